package projector

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
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
