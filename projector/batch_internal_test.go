package projector

import (
	"context"
	"testing"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
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
	s, p, perRun, evs := batchLog(t)
	ctx := context.Background()
	views0, state0 := BucketLastSeq(t, s.JS, BucketViews), BucketLastSeq(t, s.JS, BucketState)
	if err := p.projectBatch(ctx, newBatch(), evs); err != nil {
		t.Fatal(err)
	}
	if got := BucketLastSeq(t, s.JS, BucketViews) - views0; got != uint64(len(perRun)) {
		t.Errorf("%d view writes for %d runs of %d events, want one a run", got, len(perRun), len(evs))
	}
	if got := BucketLastSeq(t, s.JS, BucketState) - state0; got != 1 {
		t.Errorf("%d checkpoint writes for a batch of %d messages, want 1", got, len(evs))
	}
	checkpointAt(t, p, evs[len(evs)-1].Seq)
	viewsAreFolds(t, p, perRun)
}

// TestABatchProjectsAViewChangedUnderItAgainEventByEvent
// (docs/adr/0028-projector-batches.md, step 2): another writer changes one
// run's view after the batch read it; the batch's compare-and-set of that
// view fails, and exactly that run's events of the batch are projected
// again one by one from the view read anew (one view write each), while
// the other runs' views are written once; every view then holds the pure
// fold and the checkpoint moves to the batch's last message.
func TestABatchProjectsAViewChangedUnderItAgainEventByEvent(t *testing.T) {
	s, p, perRun, evs := batchLog(t)
	ctx := context.Background()
	half := len(evs) / 2
	if err := p.projectBatch(ctx, newBatch(), evs[:half]); err != nil {
		t.Fatal(err)
	}
	rest := evs[half:]
	// The batch reads the first run of the rest, then another writer
	// stores that view again (same bytes, a new revision).
	b := newBatch()
	if staged, err := p.stage(ctx, b, rest[0].Envelope); err != nil || !staged {
		t.Fatalf("stage: %v, %v", staged, err)
	}
	run := rest[0].Run
	if b.runs[run].rev == 0 {
		t.Fatalf("run %s has no stored view after the first half", run)
	}
	e, err := p.views.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.views.Put(ctx, run, e.Value()); err != nil {
		t.Fatal(err)
	}
	views0 := BucketLastSeq(t, s.JS, BucketViews)
	if err := p.projectBatch(ctx, b, rest[1:]); err != nil {
		t.Fatal(err)
	}
	projectedAgain(t, p, BucketLastSeq(t, s.JS, BucketViews)-views0, rest, run, perRun)
}

// TestABatchCreatesAViewOverADeleteMarker
// (docs/adr/0028-projector-batches.md, step 2): a new run whose view key
// holds a delete marker (a run read anew, a rebuild's sweep) fails the
// batch's compare-and-set on no stored view; its events are projected one
// by one (a KV create succeeds over the marker), the other runs' views are
// written once, every view holds the pure fold and the checkpoint moves.
func TestABatchCreatesAViewOverADeleteMarker(t *testing.T) {
	s, p, perRun, evs := batchLog(t)
	ctx := context.Background()
	run := evs[0].Run
	if err := p.views.Delete(ctx, run); err != nil {
		t.Fatal(err)
	}
	views0 := BucketLastSeq(t, s.JS, BucketViews)
	if err := p.projectBatch(ctx, newBatch(), evs); err != nil {
		t.Fatal(err)
	}
	projectedAgain(t, p, BucketLastSeq(t, s.JS, BucketViews)-views0, evs, run, perRun)
}

// batchLog appends projtest.Histories(5, 40) to a fresh server's log and
// returns a projector holding (and renewing, until the test ends) the
// lease, the histories and the log's messages as the subscription
// delivers them.
func batchLog(t *testing.T) (*natstest.Server, *Projector, [][]events.Recorded, []eventlog.StreamEvent) {
	t.Helper()
	s := natstest.Start(t, natstest.WithAssets(Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
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
	sctx, scancel := context.WithCancel(ctx)
	err := s.Log.Subscribe(sctx, 1, func(se eventlog.StreamEvent) error {
		evs = append(evs, se)
		if len(evs) == len(log) {
			scancel()
		}
		return nil
	})
	scancel()
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
	// Renewed, so that a slow machine fails on what a test checks, not on
	// a lease expired.
	renewed := make(chan struct{})
	go func() { defer close(renewed); p.lease.renew(ctx, func(error) {}) }()
	t.Cleanup(func() { cancel(); <-renewed })
	return s, p, perRun, evs
}

// projectedAgain checks what a batch of evs whose compare-and-set of
// run's view failed leaves: writes view writes, one for each other run
// and one for each of run's events (projected again one by one), every
// view the pure fold and the checkpoint at the batch's last message.
func projectedAgain(t *testing.T, p *Projector, writes uint64, evs []eventlog.StreamEvent, run string, perRun [][]events.Recorded) {
	t.Helper()
	seen := map[string]bool{}
	again := 0
	for _, se := range evs {
		seen[se.Run] = true
		if se.Run == run {
			again++
		}
	}
	if want := uint64(len(seen) - 1 + again); writes != want {
		t.Errorf("%d view writes, want %d: one for each of the %d other runs, one for each of the %d events of %s", writes, want, len(seen)-1, again, run)
	}
	checkpointAt(t, p, evs[len(evs)-1].Seq)
	viewsAreFolds(t, p, perRun)
}

func checkpointAt(t *testing.T, p *Projector, want uint64) {
	t.Helper()
	cp, err := p.Checkpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq != want || p.Seq() != want {
		t.Errorf("checkpoint %d, Seq %d, want %d", cp.Seq, p.Seq(), want)
	}
}

// viewsAreFolds checks that each run's stored view holds the bytes of the
// pure fold of its history.
func viewsAreFolds(t *testing.T, p *Projector, perRun [][]events.Recorded) {
	t.Helper()
	for _, h := range perRun {
		v, _, err := p.readView(context.Background(), h[0].Run)
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
