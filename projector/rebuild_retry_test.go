package projector_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// TestRebuildOutlivesWritesTheStoreDidNotAnswer: a rebuild of a large log
// makes millions of writes, and under load the store sometimes does not
// answer one in time although it landed (the 1M-run scale test lost a
// 20-minute rebuild to one "context deadline exceeded"). Such a write is
// made again (the view read back, compared-and-set with the same bytes)
// and the rebuild ends equal to the live projection; an error that is not
// the store's silence still fails it (docs/protocol/50-queries.md,
// `weft rebuild`).
func TestRebuildOutlivesWritesTheStoreDidNotAnswer(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p)
	_, log := projtest.Histories(11, 30)
	appendLog(t, s.Log, log)
	waitSeq(t, p, lastSeq(t, s.JS))
	stop()
	live := dump(t, s.JS)

	var mu sync.Mutex
	seen := map[string]int{}
	lost := 0
	fault := projector.WithRewriteFault(func(run string) error {
		mu.Lock()
		defer mu.Unlock()
		seen[run]++
		if seen[run] == 1 && len(seen)%3 == 0 { // every third run's first write: landed, answer lost
			lost++
			return fmt.Errorf("put: %w", nats.ErrTimeout)
		}
		return nil
	})
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil, fault); err != nil {
		t.Fatalf("rebuild with %d unanswered writes: %v", lost, err)
	}
	if lost == 0 {
		t.Fatal("no write was made to go unanswered: the test proves nothing")
	}
	sameStores(t, live, dump(t, s.JS))

	refused := errors.New("refused")
	_, err = projector.Rebuild(ctx, s.JS, s.Log, nil, projector.WithRewriteFault(func(string) error { return refused }))
	if !errors.Is(err, refused) {
		t.Fatalf("rebuild whose write was refused: err = %v, want %v", err, refused)
	}
}

// docs/semantics.md §8 (work not recorded is derived again from the log,
// never dropped), for a rebuild: a rebuild whose subscription to the log
// stops delivering — an iterator that never returns after a server
// restart — ends with ErrStalled once nothing came for its stall bound,
// instead of waiting for good; run again, it rebuilds.
func TestSemantics8_ARebuildWhoseLogSubscriptionStopsDeliveringEnds(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	_, log := projtest.Histories(8, 3)
	appendLog(t, s.Log, log)
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		_, err := projector.Rebuild(ctx, s.JS, s.Log, nil, projector.WithStallAfter(2*time.Second),
			projector.WithFeedHook(func(ctx context.Context, _ eventlog.StreamEvent) { once.Do(func() { <-ctx.Done() }) }))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, projector.ErrStalled) {
			t.Fatalf("a rebuild whose subscription stopped delivering ended with %v, want ErrStalled", err)
		}
	case <-time.After(stallLimit):
		t.Fatalf("a rebuild whose subscription stopped delivering still waits after %s", stallLimit)
	}
	cp, err := projector.Rebuild(ctx, s.JS, s.Log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := lastSeq(t, s.JS); cp.Seq != want {
		t.Fatalf("the rebuild run again reached %d, want %d", cp.Seq, want)
	}
}
