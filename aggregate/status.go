package aggregate

import (
	"github.com/weftrun/weft/events"
)

// StatusKind is the closed set of run statuses (docs/semantics.md §6).
type StatusKind string

// The run statuses.
const (
	// StatusWorking is a run with a model call or tool body in flight (or
	// due) under a live runner, or stopping after a cancellation.
	StatusWorking StatusKind = "working"
	// StatusUnattended is a run with work in flight whose runner handed it
	// off; recovery will pick it up.
	StatusUnattended StatusKind = "unattended"
	// StatusSuspended is a run with nothing in flight, waiting for people
	// (approvals, uncertain actions).
	StatusSuspended StatusKind = "suspended"
	// StatusFinished is a run that reached its outcome; it may still hold
	// uncertain actions.
	StatusFinished StatusKind = "finished"
	// StatusPaused is a run a person paused (docs/semantics.md §13): it
	// starts no model call and no tool body until resumed; what was in
	// flight may still finish.
	StatusPaused StatusKind = "paused"
)

// RunStatus is a run's status with its details: the actions a suspended run
// waits for and the outcome of a finished one (which may still hold
// uncertain actions, listed in Uncertain).
//
// Waiting is set by FamilyStatus only: the child runs a suspended family
// waits for (their approvals and uncertain effects are in their own status).
type RunStatus struct {
	Kind      StatusKind
	Approvals []string
	Uncertain []string
	Outcome   events.Outcome
	Waiting   []string
}

// Status computes the run's status from its state alone. A runner that
// lost its lease without handing off is invisible to the log; the runtime
// reports such runs unattended from its own liveness data.
func Status(s State) RunStatus {
	var st RunStatus
	for _, a := range s.actions {
		switch a.State {
		case ActionAwaitingApproval:
			st.Approvals = append(st.Approvals, a.ID)
		case ActionUncertain:
			st.Uncertain = append(st.Uncertain, a.ID)
		}
	}
	st.Kind = PausedStatus(RunStatusOf(s.finished, s.inFlight(), len(st.Approvals) > 0 || len(st.Uncertain) > 0, s.handedOff), s.paused, s.cancelling)
	if st.Kind == StatusFinished {
		st.Outcome = s.outcome
		st.Approvals = nil
	}
	return st
}

// inFlight reports whether the runtime has something to do for the run
// without a person: a model call or retry, calls to resolve, queued, running
// or settling actions.
func (s State) inFlight() bool {
	if s.modelPending || s.retryAt != nil {
		return true
	}
	for _, a := range s.actions {
		if a.State.Active() {
			return true
		}
	}
	return false
}

// FamilyStatus is the status of a run computed with its children
// (docs/semantics.md §6). Status(s) alone calls a run whose open delegations
// are
// its only work "working"; FamilyStatus calls it suspended when every open
// delegation's child run is suspended (child gives a child run's status,
// for example its own FamilyStatus; false when it is not known yet), and
// lists those children in Waiting. Otherwise it is Status(s).
func FamilyStatus(s State, child func(run string) (RunStatus, bool)) RunStatus {
	st := Status(s)
	if st.Kind != StatusWorking || s.cancelling || s.modelPending || s.retryAt != nil {
		return st
	}
	var waiting []string
	for _, a := range s.actions {
		switch {
		case a.State == ActionDelegated:
			cs, ok := child(a.Child.Child)
			if !ok || cs.Kind != StatusSuspended {
				return st
			}
			waiting = append(waiting, a.Child.Child)
		case a.State.Active():
			return st
		}
	}
	if len(waiting) == 0 {
		return st
	}
	st.Kind, st.Waiting = StatusSuspended, waiting
	return st
}
