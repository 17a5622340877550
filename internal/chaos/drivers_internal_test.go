package chaos

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_DriverCheckNamesEntriesOfRunsWithNothingInFlight: the
// check driver_entry_left (weft_drivers holds only runs with work in
// flight; docs/semantics.md §8) lists the entries of a finished run, of
// a run that waits only for a person (aggregate.Idle) and of a run that
// does not exist, each with the run's last events, and not the entry of a
// run with work in flight; once those are removed it lists none.
func TestSemantics8_DriverCheckNamesEntriesOfRunsWithNothingInFlight(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	ctx := context.Background()
	perRun, _ := projtest.Histories(7, 200)
	var finished, idle, busy []events.Recorded
	for _, h := range perRun {
		st := aggregate.Fold(h)
		_, done := st.Finished()
		switch {
		case done && finished == nil:
			finished = h
		case !done && aggregate.Idle(st) && idle == nil:
			idle = h
		case !done && !aggregate.Idle(st) && busy == nil:
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
		}
	}
	kv, err := s.JS.KeyValue(ctx, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	const p = runner.DefaultPartitions
	keys := map[string]string{} // key → run
	for _, run := range []string{finished[0].Run, idle[0].Run, busy[0].Run, "never-started"} {
		k := runner.DriverKey(run, p)
		keys[k] = run
		if _, err := kv.Put(ctx, k, []byte("runner-1")); err != nil {
			t.Fatal(err)
		}
	}
	h := &harness{cfg: Config{Lease: time.Second}, js: s.JS, evlog: s.Log}
	left, err := h.driverLeftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range left {
		got = append(got, l.run)
		if l.key != runner.DriverKey(l.run, p) || l.driver != "runner-1" || l.rev == 0 {
			t.Errorf("leftover %+v: want key %s, driver runner-1 and its revision", l, runner.DriverKey(l.run, p))
		}
		if l.run == finished[0].Run && (len(l.last) == 0 || l.last[len(l.last)-1].Type != events.NameRunFinished) {
			t.Errorf("finished run's last events: %s", describeLast(l.last))
		}
	}
	want := []string{finished[0].Run, idle[0].Run, "never-started"}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("leftovers %v, want %v (not the busy run %s)", got, want, busy[0].Run)
	}

	for k, run := range keys {
		if run != busy[0].Run {
			if err := kv.Purge(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	if left, err := h.driverLeftovers(ctx); err != nil || len(left) != 0 {
		t.Fatalf("after the removals: %v leftovers, %v", left, err)
	}
}
