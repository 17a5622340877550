package aggregate

import (
	"encoding/json"

	"github.com/weftrun/weft/events"
)

// This file is the one definition of the action and run state machine
// (docs/semantics.md §5 and §6): which states an event moves an action from and
// to, which states are in flight, and how a run's status follows. Evolve
// applies it to the whole State and panics on a transition it does not
// allow; the read models (package projections) apply the same definition
// to their views (docs/adr/0017), so a rule is changed here and nowhere
// else.

// Transition is what one event does to the state of the action it names
// (every action of ActionsNotStarted): From lists the states the action may
// be in when the event is recorded, and To is its state after, "" when the
// event leaves the state as it is (a valid call, an allowing policy, an
// approve answer, a changed requirement, a resolution).
type Transition struct {
	From []ActionState
	To   ActionState
}

// The From sets of the transitions, shared so that ActionTransition
// allocates nothing.
var (
	fromRequested    = []ActionState{ActionRequested}
	fromDeciding     = []ActionState{ActionRequested, ActionAwaitingApproval}
	fromAsking       = []ActionState{ActionRequested, ActionAwaitingApproval, ActionQueued}
	fromAwaiting     = []ActionState{ActionAwaitingApproval}
	fromQueued       = []ActionState{ActionQueued}
	fromRunning      = []ActionState{ActionRunning}
	fromBody         = []ActionState{ActionRunning, ActionSettling}
	fromStartedAgain = []ActionState{ActionSettling, ActionQueued, ActionAwaitingApproval, ActionRejected, ActionDenied}
	fromSettleable   = []ActionState{ActionSettling, ActionUncertain}
	fromUncertain    = []ActionState{ActionUncertain}
	fromReconciled   = []ActionState{ActionReconciled}
	fromDelegated    = []ActionState{ActionDelegated}
	fromDelegating   = []ActionState{ActionRequested, ActionAwaitingApproval, ActionQueued}
	// fromNotYetStartable: running or uncertain only with every attempt
	// closed (Evolve checks it): uncertain in a log whose late mark on a
	// live run was evidence alone (docs/adr/0023-closing-attempts.md).
	fromNotYetStartable = []ActionState{ActionRequested, ActionAwaitingApproval, ActionQueued, ActionRunning, ActionUncertain}
	fromClosable        = []ActionState{ActionRunning, ActionQueued, ActionAwaitingApproval}
)

// ActionTransition returns the transition e makes for the action(s) it
// names. ok is false for an event that moves no action (run-level events,
// refused reports and settlements) and for an outcome, next step or answer
// outside the catalogue (no decision emits one; Evolve panics on it).
func ActionTransition(e events.Event) (t Transition, ok bool) {
	switch e := e.(type) {
	case events.CallValidated:
		switch e.Outcome {
		case events.CallValid:
			return Transition{fromRequested, ""}, true
		case events.CallUnknownTool:
			return Transition{fromRequested, ActionUnknownTool}, true
		case events.CallInvalidArguments:
			return Transition{fromRequested, ActionInvalidArguments}, true
		case events.CallLimitReached:
			return Transition{fromRequested, ActionLimitReached}, true
		}
	case events.PolicyDecided:
		if e.Decision == events.PolicyDeny {
			return Transition{fromDeciding, ActionDenied}, true
		}
		return Transition{fromDeciding, ""}, true
	case events.ApprovalRequested:
		return Transition{fromAsking, ActionAwaitingApproval}, true
	case events.ApprovalAnswered:
		switch e.Answer {
		case events.AnswerApprove:
			return Transition{fromAwaiting, ""}, true
		case events.AnswerReject, events.AnswerExpired:
			return Transition{fromAwaiting, ActionRejected}, true
		}
	case events.RequirementChanged:
		return Transition{fromAwaiting, ""}, true
	case events.ActionQueued:
		return Transition{fromDeciding, ActionQueued}, true
	case events.AttemptFenced:
		return Transition{fromQueued, ActionRunning}, true
	case events.AttemptReported:
		switch e.Outcome {
		case events.OutcomeOutput:
			return Transition{fromBody, ActionSucceeded}, true
		case events.OutcomeExplain:
			return Transition{fromBody, ActionToolFailed}, true
		case events.OutcomeUncertain:
			return Transition{fromBody, ActionUncertain}, true
		case events.OutcomeOversize:
			return Transition{fromBody, ActionFaulted}, true
		}
	case events.AttemptLost:
		switch e.Next {
		case events.NextReplay, events.NextReapprove:
			return Transition{fromRunning, ActionQueued}, true
		case events.NextSettle:
			return Transition{fromRunning, ActionSettling}, true
		case events.NextUncertain:
			return Transition{fromRunning, ActionUncertain}, true
		}
	case events.ActionUncertain:
		// From a closed settle window, or (docs/semantics.md §5) from an action
		// waiting to start again after an attempt that may have acted:
		// cancelled or ended while queued for its replay or re-asking its
		// approval, or just rejected, expired or denied at that approval.
		return Transition{fromStartedAgain, ActionUncertain}, true
	case events.SettlementAccepted:
		switch {
		case e.Outcome == events.OutcomeUncertain && !e.Late:
			return Transition{fromSettleable, ActionUncertain}, true
		case e.Outcome == events.OutcomeUncertain:
		case e.Outcome != events.OutcomeOutput && e.Outcome != events.OutcomeExplain:
		case e.Late:
			return Transition{fromSettleable, ActionReconciled}, true
		case e.Outcome == events.OutcomeOutput:
			return Transition{fromSettleable, ActionSucceeded}, true
		default:
			return Transition{fromSettleable, ActionToolFailed}, true
		}
	case events.Reconciled:
		return Transition{fromUncertain, ActionReconciled}, true
	case events.Resolved:
		return Transition{fromReconciled, ""}, true
	case events.ActionsNotStarted:
		return Transition{fromNotYetStartable, ActionNotStarted}, true
	case events.AttemptClosed:
		return Transition{fromClosable, ""}, true
	case events.AttemptNotStarted:
		if e.Ended {
			return Transition{fromUncertain, ActionNotStarted}, true
		}
		return Transition{fromUncertain, ""}, true
	case events.ChildStarted:
		// Queued: allowed while the run was paused, started by the
		// resume (docs/semantics.md §13).
		return Transition{fromDelegating, ActionDelegated}, true
	case events.ChildSettled:
		if e.Bytes > 0 {
			return Transition{fromDelegated, ActionFaulted}, true
		}
		return Transition{fromDelegated, ActionChildSettled}, true
	}
	return Transition{}, false
}

// Allows reports whether an action in state from may take the transition.
func (t Transition) Allows(from ActionState) bool {
	for _, st := range t.From {
		if st == from {
			return true
		}
	}
	return false
}

// Active reports whether an action in this state is work the runtime
// does without a person: validation and policy to record, a slot to wait
// for, a body running or stopped and settling, a child run to wait for.
// A run with an active action (or a model turn in flight) is working.
func (a ActionState) Active() bool {
	switch a {
	case ActionRequested, ActionQueued, ActionRunning, ActionSettling, ActionDelegated:
		return true
	}
	return false
}

// RunStatusOf is the status rule of docs/semantics.md §6, from the facts both
// the aggregate and the read models keep: a finished run is finished; a
// run with nothing in flight and approvals or uncertain effects waiting is
// suspended; otherwise it is unattended while handed off and not yet
// recovered, and working.
func RunStatusOf(finished, inFlight, waitsForPeople, handedOff bool) StatusKind {
	switch {
	case finished:
		return StatusFinished
	case !inFlight && waitsForPeople:
		return StatusSuspended
	case handedOff:
		return StatusUnattended
	}
	return StatusWorking
}

// ExplainContent is what the model reads for a definite tool failure
// (Explain, or an explain settlement): {"error": message}.
func ExplainContent(message string) json.RawMessage {
	d, _ := json.Marshal(message)
	return json.RawMessage(`{"error":` + string(d) + `}`)
}
