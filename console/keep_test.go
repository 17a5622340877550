package console

import (
	"slices"
	"testing"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// TestSemantics14_TheRestartFormOffersARestartedRunsOwnTurnsOnly: a
// restarted run's turns continue its parent's numbering, and a turn before
// its own fork point is refused wrong_reference (docs/semantics.md §14):
// the form of a run restarted from turn 3 whose last turn is 4 offers
// turns 3 to 5; a run never restarted offers 1 to its last turn + 1.
func TestSemantics14_TheRestartFormOffersARestartedRunsOwnTurnsOnly(t *testing.T) {
	f := newRestartForm(projections.RunView{Run: "rt-2", Turns: 4, ForkedFrom: &events.ForkedFrom{Run: "rt-1", Turn: 3}})
	if want := []int64{3, 4, 5}; !slices.Equal(f.Turns, want) {
		t.Errorf("a run restarted from turn 3 offers turns %v, want %v", f.Turns, want)
	}
	f = newRestartForm(projections.RunView{Run: "rt-1", Turns: 2})
	if want := []int64{1, 2, 3}; !slices.Equal(f.Turns, want) {
		t.Errorf("a run never restarted offers turns %v, want %v", f.Turns, want)
	}
	if f.Run == "" || f.Run == newRestartForm(projections.RunView{Run: "rt-1", Turns: 2}).Run {
		t.Errorf("the form's new run id %q is not chosen anew per form", f.Run)
	}
}
