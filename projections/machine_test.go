package projections

import (
	"testing"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/aggregate/aggregatetest"
)

// TestViewFollowsTheAggregatesStateMachine: there is one state machine
// (docs/semantics.md §5 action lifecycle, §6 run status;
// docs/adr/0017-one-state-machine.md). Over 300 simulated runs of the decision
// core (fixed
// seeds; every path the aggregate's property test covers: approvals,
// replays, settlements, losses, hand-offs, cancellations, delegations),
// the view folded from a run's history has exactly the aggregate's
// actions, each in the aggregate's state and showing the approver's edit
// the aggregate runs it with (approved_arguments, docs/semantics.md §4;
// the simulation edits some approves), after every event, and the run
// status the aggregate computes.
func TestViewFollowsTheAggregatesStateMachine(t *testing.T) {
	edited := 0
	for seed := range uint64(300) {
		s := aggregatetest.New()
		src := aggregatetest.Rand(seed)
		s.Start(src)
		for range 120 {
			s.Step(src)
		}
		var (
			v  RunView
			st aggregate.State
		)
		for _, r := range s.History {
			v = Apply(v, r)
			st = aggregate.Evolve(st, r)
			acts := st.Actions()
			if len(acts) != len(v.Actions) {
				t.Fatalf("seed %d, version %d (%s): aggregate has %d actions, view %d", seed, r.Version, r.Event.EventName(), len(acts), len(v.Actions))
			}
			for i, a := range acts {
				if va := v.Actions[i]; va.ID != a.ID || va.State != string(a.State) {
					t.Fatalf("seed %d, version %d (%s): action %s is %s in the aggregate, the view has %s %s", seed, r.Version, r.Event.EventName(), a.ID, a.State, va.ID, va.State)
				}
				// The arguments the call runs with: an approver's edit
				// until a request asked again before the call started
				// drops it (docs/semantics.md §4).
				if va := v.Actions[i]; string(va.Approved) != string(a.Edited) {
					t.Fatalf("seed %d, version %d (%s): action %s runs with the edit %s in the aggregate, the view shows %s", seed, r.Version, r.Event.EventName(), a.ID, a.Edited, va.Approved)
				}
				if a.Edited != nil {
					edited++
				}
			}
			if want := string(aggregate.Status(st).Kind); v.Status != want {
				t.Fatalf("seed %d, version %d (%s): status %s in the aggregate, %s in the view", seed, r.Version, r.Event.EventName(), want, v.Status)
			}
		}
	}
	if edited == 0 {
		t.Fatal("no simulated action ran with an approver's edit")
	}
}
