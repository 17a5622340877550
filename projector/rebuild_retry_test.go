package projector_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

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
