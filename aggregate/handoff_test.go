package aggregate

import (
	"testing"

	"github.com/weftrun/weft/events"
)

// docs/semantics.md §8 (only the runner that drives a run hands it off; the
// chaos harness (docs/reliability.md), seed 3: runner-2-3, SIGTERMed while
// runner-1-6 took its
// runs over, appended run_handed_off at runner-1-6's incarnation, after a
// conflict made it decide its hand-off again on the fresh state; the runs
// were then unattended for good, their driver alive and their hand-off
// naming a runner that was gone): a HandOff from a runner that does not
// drive the run hands nothing off.
func TestHandOffOnlyByTheDriver(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1")
	evs, err := Decide(s, Recover{Runner: "b", Cause: events.RecoveredRunnerLost}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		s = Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: e})
	}
	// "r" started the run and lost it to "b": its hand-off is stale.
	if evs, err := Decide(s, HandOff{Runner: "r"}, epoch); err != nil || len(evs) != 0 {
		t.Fatalf("hand-off by a runner that no longer drives the run: %v, %v; want nothing", evs, err)
	}
	evs, err = Decide(s, HandOff{Runner: "b"}, epoch)
	if err != nil || len(evs) != 1 {
		t.Fatalf("hand-off by the driver: %v, %v; want run_handed_off", evs, err)
	}
	if h, ok := evs[0].(events.RunHandedOff); !ok || h.Runner != "b" || h.Incarnation != 2 {
		t.Fatalf("hand-off by the driver: %+v", evs[0])
	}
}
