package provision_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// streamRequests records the JetStream stream API requests a connection
// sends, by subject: a second connection subscribes to $JS.API.STREAM.>
// and receives a copy of each request. Messages from one publisher reach
// one subscriber in the order they were published; the server's API
// advisories do not (its handlers send them from concurrent goroutines:
// CI once saw a stream update's advisory after a later request's).
type streamRequests struct {
	mu   sync.Mutex
	reqs map[string][]string
}

func recordRequests(t *testing.T, s *natstest.Server) *streamRequests {
	t.Helper()
	r := &streamRequests{reqs: map[string][]string{}}
	nc := s.Connect()
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("$JS.API.STREAM.>", func(m *nats.Msg) {
		r.mu.Lock()
		r.reqs[m.Subject] = append(r.reqs[m.Subject], string(m.Data))
		r.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// take returns and forgets the requests recorded so far, once the
// recorder has seen a request for the stream marker sent after them.
func (r *streamRequests) take(ctx context.Context, t *testing.T, js jetstream.JetStream, marker string) map[string][]string {
	t.Helper()
	if _, err := js.Stream(ctx, marker); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the marker stream %s: %v", marker, err)
	}
	for {
		r.mu.Lock()
		if _, ok := r.reqs["$JS.API.STREAM.INFO."+marker]; ok {
			got := r.reqs
			r.reqs = map[string][]string{}
			r.mu.Unlock()
			return got
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Fatalf("no request seen for the marker %s", marker)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// docs/adr/0032-fewer-writes-per-run.md: provisioning an existing bucket
// that allows atomic publish (the claims, which group commit batches)
// never sends a stream configuration without it — the server would turn
// it off and refuse the batches of every process using the bucket — and
// sends none at all when the bucket is unchanged. A changed configuration
// is applied in one update that keeps it.
func TestAProvisioningNeverTurnsAtomicPublishOffOnAnExistingBucket(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := jetstream.KeyValueConfig{Bucket: "weft_test", History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: time.Minute}
	asset := func(cfg jetstream.KeyValueConfig) []provision.Asset {
		return []provision.Asset{provision.KV(cfg).WithAtomicPublish()}
	}
	if err := provision.EnsureOnly(ctx, s.JS, asset(cfg)); err != nil {
		t.Fatal(err)
	}
	reqs := recordRequests(t, s)
	reqs.take(ctx, t, s.JS, "MARKER0")

	atomicOn := func(when string) {
		t.Helper()
		st, err := s.JS.Stream(ctx, "KV_weft_test")
		if err != nil || !st.CachedInfo().Config.AllowAtomicPublish {
			t.Fatalf("%s: KV_weft_test %v, want atomic publish allowed", when, err)
		}
	}
	atomicOn("created")
	for i := range 2 {
		if err := provision.EnsureOnly(ctx, s.JS, asset(cfg)); err != nil {
			t.Fatal(err)
		}
		for subj, rs := range reqs.take(ctx, t, s.JS, "MARKER1") {
			if strings.HasSuffix(subj, ".KV_weft_test") && !strings.HasPrefix(subj, "$JS.API.STREAM.INFO.") {
				t.Fatalf("provisioning #%d of an unchanged bucket sent %s %v, want no change", i+2, subj, rs)
			}
		}
		atomicOn("provisioned again")
	}

	cfg.Description = "changed"
	cfg.History = 3
	if err := provision.EnsureOnly(ctx, s.JS, asset(cfg)); err != nil {
		t.Fatal(err)
	}
	updates := 0
	for subj, rs := range reqs.take(ctx, t, s.JS, "MARKER2") {
		if !strings.HasSuffix(subj, ".KV_weft_test") || strings.HasPrefix(subj, "$JS.API.STREAM.INFO.") {
			continue
		}
		for _, r := range rs {
			var sc jetstream.StreamConfig
			if err := json.Unmarshal([]byte(r), &sc); err != nil || !sc.AllowAtomicPublish {
				t.Fatalf("%s %s (%v): a configuration without atomic publish", subj, r, err)
			}
			updates++
		}
	}
	if updates != 1 {
		t.Fatalf("%d updates of the changed bucket, want 1", updates)
	}
	st, err := s.JS.Stream(ctx, "KV_weft_test")
	if err != nil || st.CachedInfo().Config.Description != "changed" || st.CachedInfo().Config.MaxMsgsPerSubject != 3 {
		t.Fatalf("the changed bucket: %v %+v", err, st.CachedInfo().Config)
	}
	atomicOn("changed")
}

// A bucket that allows atomic publish is updated as
// jetstream.CreateOrUpdateKeyValue updates one that does not: the same
// stream configuration but for atomic publish (provision sets the
// fields KeyValueConfig governs itself, to keep atomic publish on).
func TestAnAtomicBucketIsUpdatedAsCreateOrUpdateKeyValueDoes(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfgs := []jetstream.KeyValueConfig{
		{History: 1, Storage: jetstream.FileStorage},
		{Description: "d", History: 5, TTL: time.Minute, MaxBytes: 1 << 20, MaxValueSize: 1024, Storage: jetstream.FileStorage,
			Compression: true, Metadata: map[string]string{"k": "v"}},
		{History: 2, TTL: time.Hour, Storage: jetstream.FileStorage, LimitMarkerTTL: 2 * time.Minute, Metadata: map[string]string{"k2": "v2"}},
	}
	for i, cfg := range cfgs {
		plain, atomic := cfg, cfg
		plain.Bucket, atomic.Bucket = "plain", "atomic"
		if _, err := s.JS.CreateOrUpdateKeyValue(ctx, plain); err != nil {
			t.Fatal(err)
		}
		if err := provision.EnsureOnly(ctx, s.JS, []provision.Asset{provision.KV(atomic).WithAtomicPublish()}); err != nil {
			t.Fatal(err)
		}
		ps, err := s.JS.Stream(ctx, "KV_plain")
		if err != nil {
			t.Fatal(err)
		}
		as, err := s.JS.Stream(ctx, "KV_atomic")
		if err != nil {
			t.Fatal(err)
		}
		want, got := ps.CachedInfo().Config, as.CachedInfo().Config
		if !got.AllowAtomicPublish {
			t.Fatalf("config %d: atomic publish off", i)
		}
		want.Name, want.Subjects, want.AllowAtomicPublish = got.Name, got.Subjects, true
		// The API level the server records the stream needs: atomic
		// publish raises it.
		want.Metadata["_nats.req.level"] = got.Metadata["_nats.req.level"]
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("config %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
}
