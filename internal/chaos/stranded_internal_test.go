package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_StrandedCheckNamesARunThatDoesNotMoveByItself: the check
// run_stranded (docs/semantics.md §8, recovery: a run whose driver is gone
// is taken over, pending work is never dropped) names a run that needs no
// person and has not moved for strandedBound after its last move and its
// next due time — once — and never a finished run or one that waits only
// for a person (aggregate.Idle). No runner runs here: the busy run is
// stranded as the runs were when no runner consumed the timers' firings.
func TestSemantics8_StrandedCheckNamesARunThatDoesNotMoveByItself(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	ctx := context.Background()
	perRun, _ := projtest.Histories(7, 200)
	var finished, idle, busy []events.Recorded
	var last time.Time // the latest time any history names
	for _, h := range perRun {
		st := aggregate.Fold(h)
		_, done := st.Finished()
		switch {
		case done && finished == nil:
			finished = h
		case !done && aggregate.Idle(st) && idle == nil:
			idle = h
		case !done && !aggregate.Idle(st) && len(aggregate.Pending(st).Children) == 0 && busy == nil:
			busy = h
		}
	}
	if finished == nil || idle == nil || busy == nil {
		t.Fatalf("the generated histories lack a finished (%v), an idle (%v) or a busy (%v) run", finished != nil, idle != nil, busy != nil)
	}
	for _, h := range [][]events.Recorded{finished, idle, busy} {
		var head eventlog.Head
		for _, r := range h {
			var err error
			if _, head, err = s.Log.Append(ctx, r.Run, head, r.At, r.Event); err != nil {
				t.Fatalf("append %s v%d: %v", r.Run, r.Version, err)
			}
			last = maxTime(last, r.At)
		}
		for _, tm := range aggregate.Pending(aggregate.Fold(h)).Timers {
			last = maxTime(last, tm.At)
		}
	}
	h := &harness{cfg: Config{Lease: time.Second}, js: s.JS, evlog: s.Log}
	runs := []string{finished[0].Run, idle[0].Run, busy[0].Run}
	seen := map[string]*motion{}
	t0 := last.Add(time.Hour) // after every due time of the histories
	bound := h.strandedBound()
	for _, now := range []time.Time{t0, t0.Add(bound)} {
		h.strandedOnce(ctx, runs, now, seen)
		if len(h.violations) != 0 {
			t.Fatalf("at %v after the first read (the bound %v not passed): %v", now.Sub(t0), bound, h.violations)
		}
	}
	for range 2 { // reported once
		h.strandedOnce(ctx, runs, t0.Add(bound+strandedPoll), seen)
	}
	if len(h.violations) != 1 || h.violations[0].Check != checkStranded || h.violations[0].Run != busy[0].Run {
		t.Fatalf("violations %v, want one %s of run %s", h.violations, checkStranded, busy[0].Run)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
