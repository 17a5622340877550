package projector

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// TestRunAllRestartsWithBackoff (one retry helper): a
// projector that keeps failing without progress — here its checkpoint
// cannot be decoded — is resumed after pauses that double from a second up
// to the limit (internal/backoff), not every second forever; the pauses
// are recorded, not waited.
func TestRunAllRestartsWithBackoff(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kv, err := s.JS.KeyValue(ctx, BucketState)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, KeyCheckpoint, []byte("not a checkpoint")); err != nil {
		t.Fatal(err)
	}
	var pauses []time.Duration
	pause := func(ctx context.Context, d time.Duration) error {
		pauses = append(pauses, d)
		if len(pauses) == 6 {
			cancel()
			return ctx.Err()
		}
		return nil
	}
	if err := runAll(ctx, s.Conn, s.JS, eventlog.New(s.JS), nil, pause); err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 16 * time.Second}
	if !slices.Equal(pauses, want) {
		t.Fatalf("pauses %v, want %v", pauses, want)
	}
}

// TestRunAllWaitsForItsBucketsInsteadOfExiting (docs/semantics.md §8, a
// run can always be answered: the queries come back without a person): a
// projector started before its buckets can be bound — here they do not
// exist yet, as while a cluster elects its stream leaders after a fault —
// tries again after a pause instead of returning, and serves once they can
// be bound. Before, RunAll returned the error and a host stopped with it.
func TestRunAllWaitsForItsBucketsInsteadOfExiting(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var pauses []time.Duration
	pause := func(ctx context.Context, d time.Duration) error {
		pauses = append(pauses, d)
		if len(pauses) == 2 {
			if err := provision.EnsureOnly(ctx, s.JS, Assets()); err != nil {
				t.Error(err)
				cancel()
			}
		}
		return ctx.Err()
	}
	done := make(chan error, 1)
	go func() { done <- runAll(ctx, s.Conn, s.JS, eventlog.New(s.JS), nil, pause) }()
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	ready := make(chan error, 1)
	go func() { ready <- NewClient(s.Conn).Ready(rctx) }()
	select {
	case err := <-done:
		t.Fatalf("runAll returned before serving: %v", err)
	case err := <-ready:
		if err != nil {
			t.Fatalf("the query service never came up: %v", err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runAll: %v", err)
	}
	if want := []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(pauses, want) {
		t.Fatalf("pauses before serving %v, want %v", pauses, want)
	}
}
