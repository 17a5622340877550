package provision_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

func TestEnsureBaseAndExtraAssetsIdempotent(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	extra := []provision.Asset{
		provision.Stream(jetstream.StreamConfig{Name: "WEFT_TEST", Subjects: []string{"weft.test.>"}, Storage: jetstream.FileStorage}),
		provision.KV(jetstream.KeyValueConfig{Bucket: "weft_test", History: 1}),
	}
	for i := 0; i < 2; i++ {
		if err := provision.Ensure(ctx, s.JS, extra, provision.WithReplicas(1)); err != nil {
			t.Fatalf("ensure #%d: %v", i+1, err)
		}
	}
	ev, err := s.JS.Stream(ctx, provision.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ev.CachedInfo().Config
	if cfg.Retention != jetstream.LimitsPolicy || cfg.Storage != jetstream.FileStorage || !cfg.AllowDirect ||
		cfg.Duplicates != provision.EventsDuplicates || cfg.Replicas != 1 || cfg.Subjects[0] != "weft.ev.>" {
		t.Fatalf("WEFT_EVENTS config %+v", cfg)
	}
	tasks, err := s.JS.Stream(ctx, provision.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := tasks.CachedInfo().Config; c.Retention != jetstream.WorkQueuePolicy || c.Subjects[0] != "weft.task.>" {
		t.Fatalf("WEFT_TASKS config %+v", c)
	}
	if _, err := s.JS.Stream(ctx, "WEFT_TEST"); err != nil {
		t.Fatalf("extra stream: %v", err)
	}
	kv, err := s.JS.KeyValue(ctx, "weft_test")
	if err != nil {
		t.Fatalf("extra bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// Updating an extra in place keeps its data.
	if err := provision.Ensure(ctx, s.JS, []provision.Asset{provision.KV(jetstream.KeyValueConfig{Bucket: "weft_test", History: 5, Description: "now with history"})}); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || string(e.Value()) != "v" {
		t.Fatalf("bucket data after update: %v", err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.History() != 5 {
		t.Fatalf("bucket not updated: history %d, %v", st.History(), err)
	}
}

func TestEnsureNamesAssetItCannotUpdate(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Retention cannot change in place.
	bad := provision.Stream(jetstream.StreamConfig{Name: provision.TasksStream, Subjects: []string{"weft.task.>"}, Retention: jetstream.InterestPolicy})
	err := provision.Ensure(ctx, s.JS, []provision.Asset{bad})
	if err == nil || !strings.Contains(err.Error(), provision.TasksStream) {
		t.Fatalf("Ensure = %v, want an error naming %s", err, provision.TasksStream)
	}
}

func TestReplicasApplyToAssetsWithoutTheirOwn(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A single server refuses 3 replicas: proof that Options.Replicas is
	// passed through to every asset.
	err := provision.Ensure(ctx, s.JS, []provision.Asset{provision.KV(jetstream.KeyValueConfig{Bucket: "weft_r3"})}, provision.WithReplicas(3))
	if err == nil {
		t.Fatal("3 replicas accepted by a single server")
	}
	if _, err := s.JS.KeyValue(ctx, "weft_r3"); err == nil {
		t.Fatal("bucket created despite the refusal")
	}
}
