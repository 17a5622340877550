package provision_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// docs/adr/0036-driver-entry-removed-by-sequence.md: a bucket provisioned
// WithMessageDelete is created as CreateOrUpdateKeyValue creates it but for
// its stream allowing message deletes (which no stream update can allow
// later), and provisioned again it keeps allowing them; a bucket that
// CreateOrUpdateKeyValue made keeps denying them and its provisioning does
// not fail (the server refuses to cancel DenyDelete).
func TestABucketWithMessageDeleteIsCreatedAllowingThem(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfgs := []jetstream.KeyValueConfig{
		{Storage: jetstream.FileStorage},
		{Description: "d", TTL: time.Minute, MaxBytes: 1 << 20, MaxValueSize: 1024, Storage: jetstream.FileStorage,
			Compression: true, Metadata: map[string]string{"k": "v"}, LimitMarkerTTL: 2 * time.Second},
	}
	for i, cfg := range cfgs {
		plain, deletes := cfg, cfg
		plain.Bucket, deletes.Bucket = "plain", "deletes"
		if _, err := s.JS.CreateOrUpdateKeyValue(ctx, plain); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// A bucket of an earlier release: made without it.
			if _, err := s.JS.CreateOrUpdateKeyValue(ctx, func() jetstream.KeyValueConfig { c := cfg; c.Bucket = "older"; return c }()); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			for _, b := range []string{"deletes", "older"} {
				c := cfg
				c.Bucket = b
				if err := provision.EnsureOnly(ctx, s.JS, []provision.Asset{provision.KV(c).WithMessageDelete()}); err != nil {
					t.Fatalf("config %d, bucket %s: %v", i, b, err)
				}
			}
		}
		info := func(name string) jetstream.StreamConfig {
			st, err := s.JS.Stream(ctx, "KV_"+name)
			if err != nil {
				t.Fatal(err)
			}
			return st.CachedInfo().Config
		}
		want, got := info("plain"), info("deletes")
		if got.DenyDelete {
			t.Fatalf("config %d: the bucket denies message deletes", i)
		}
		if !info("older").DenyDelete {
			t.Fatalf("config %d: the older bucket allows message deletes", i)
		}
		want.Name, want.Subjects, want.DenyDelete = got.Name, got.Subjects, false
		want.Metadata = got.Metadata // the server's own (_nats.*) and cfg's, compared below
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("config %d:\n got %+v\nwant %+v", i, got, want)
		}
		for k, v := range cfg.Metadata {
			if got.Metadata[k] != v {
				t.Fatalf("config %d: metadata %s = %q, want %q", i, k, got.Metadata[k], v)
			}
		}
	}
}
