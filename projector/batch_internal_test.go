package projector

import (
	"context"
	"testing"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
)

// TestABatchWritesEachViewOnceAndTheCheckpointOnce
// (docs/adr/0028-projector-batches.md): a batch of the log's messages
// stores each run's view once, folded up to the run's last event in the
// batch (the bytes of the pure fold), and the checkpoint once, at the
// batch's last message: one acknowledgement wait for many writes, where a
// projector writing message by message stored a view per event and a
// checkpoint per message.
func TestABatchWritesEachViewOnceAndTheCheckpointOnce(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(Assets()...))
	ctx := context.Background()
	perRun, log := projtest.Histories(5, 40)
	heads := map[string]eventlog.Head{}
	for _, r := range log {
		_, h, err := s.Log.Append(ctx, r.Run, heads[r.Run], r.At, r.Event)
		if err != nil {
			t.Fatal(err)
		}
		heads[r.Run] = h
	}
	var evs []eventlog.StreamEvent
	sctx, cancel := context.WithCancel(ctx)
	err := s.Log.Subscribe(sctx, 1, func(se eventlog.StreamEvent) error {
		evs = append(evs, se)
		if len(evs) == len(log) {
			cancel()
		}
		return nil
	})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.lease.acquire(ctx, func(string) {}); err != nil {
		t.Fatal(err)
	}
	views0, state0 := BucketLastSeq(t, s.JS, BucketViews), BucketLastSeq(t, s.JS, BucketState)
	if err := p.projectBatch(ctx, newBatch(), evs); err != nil {
		t.Fatal(err)
	}
	if got := BucketLastSeq(t, s.JS, BucketViews) - views0; got != uint64(len(perRun)) {
		t.Errorf("%d view writes for %d runs of %d events, want one a run", got, len(perRun), len(log))
	}
	if got := BucketLastSeq(t, s.JS, BucketState) - state0; got != 1 {
		t.Errorf("%d checkpoint writes for a batch of %d messages, want 1", got, len(log))
	}
	cp, err := p.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := evs[len(evs)-1].Seq; cp.Seq != want || p.Seq() != want {
		t.Errorf("checkpoint %d, Seq %d, want %d", cp.Seq, p.Seq(), want)
	}
	for _, h := range perRun {
		v, _, err := p.readView(ctx, h[0].Run)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := v.Encode()
		want, _ := projections.Fold(h).Encode()
		if string(got) != string(want) {
			t.Fatalf("view %s:\n got %s\nwant %s", h[0].Run, got, want)
		}
	}
}
