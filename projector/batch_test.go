package projector_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// TestAStopMidBatchIsRepairedFromTheCheckpoint
// (docs/adr/0028-projector-batches.md): a projector stopped in the middle
// of writing a batch — its views stored, the index entries they no longer
// have removed, their new entries, summaries and items not yet written and
// its checkpoint not moved — leaves read models that a projector started
// again from the checkpoint makes whole: every key then holds the bytes a
// rebuild from sequence 1 writes.
func TestAStopMidBatchIsRepairedFromTheCheckpoint(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	_, log := projtest.Histories(11, 120)
	appendLog(t, s.Log, log)
	last := lastSeq(t, s.JS)

	// The first projector stops at the first move of a batch that
	// changed views already stored (the first batch creates them).
	stopped := errors.New("stopped mid-batch")
	pctx, cancel := context.WithCancelCause(ctx)
	var once sync.Once
	var first *projector.Projector
	pauses := 0
	p1, err := projector.New(ctx, s.JS, s.Log, projector.WithIndexPause(func() {
		if pauses++; pauses >= 2 && first.Seq() > 0 {
			once.Do(func() { cancel(stopped) })
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	first = p1
	if err := p1.Run(pctx); err != nil {
		t.Fatalf("first projector: %v", err)
	}
	if context.Cause(pctx) != stopped {
		t.Fatalf("the first projector ended without being stopped mid-batch (at %d of %d)", p1.Seq(), last)
	}
	cp, err := p1.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq >= last {
		t.Fatalf("checkpoint %d after a stop mid-batch, want before %d", cp.Seq, last)
	}

	p2, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p2)
	waitSeq(t, p2, last)
	stop()
	live := dump(t, s.JS)
	purge(t, s.JS)
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))
}
