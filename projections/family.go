package projections

import "github.com/weftrun/weft/aggregate"

// Family is a run's status computed with its children's (docs/semantics.md §6:
// "status, computed for the run and its children"), the read-side
// counterpart of aggregate.FamilyStatus. A run view's own Status is the
// run's status from its own events alone (what audit compares with
// aggregate.Status); Family is computed at read time from the views of the
// run and its children, never stored in a view: a child's event changes its
// parent's family status without any event of the parent's.
type Family struct {
	// Status is one of the Status* constants.
	Status string `json:"status"`
	// Waiting lists the child runs a suspended family waits for, in
	// delegation order; their approvals and uncertain effects are in their
	// own views.
	Waiting []string `json:"waiting,omitempty"`
}

// FamilyStatus computes the family status of the run viewed by v. A run
// whose open delegations are its only work is working by its own status;
// its family status is suspended, waiting for those children, when every
// open delegation's child run is suspended (child gives a child run's
// family status, for example FamilyStatus of its own view; false when its
// view is not known yet). Otherwise it is v's own status.
func FamilyStatus(v RunView, child func(run string) (Family, bool)) Family {
	own := Family{Status: v.Status}
	if v.Status != StatusWorking || v.Cancelling || v.ModelInFlight {
		return own
	}
	var waiting []string
	for _, a := range v.Actions {
		switch {
		case a.State == StateDelegated:
			run, ok := v.childOf(a.ID)
			if !ok {
				return own
			}
			f, ok := child(run)
			if !ok || f.Status != StatusSuspended {
				return own
			}
			waiting = append(waiting, run)
		case aggregate.ActionState(a.State).Active():
			return own
		}
	}
	if len(waiting) == 0 {
		return own
	}
	return Family{Status: StatusSuspended, Waiting: waiting}
}

// childOf returns the child run the delegating action started.
func (v RunView) childOf(action string) (string, bool) {
	for _, c := range v.Children {
		if c.Action == action {
			return c.Run, true
		}
	}
	return "", false
}
