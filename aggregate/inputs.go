package aggregate

import (
	"fmt"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// This file holds the pure rules by which an input that reaches a runner
// becomes a command (or none), and the gates a runner applies to the work
// Pending lists: decisions the runner only carries out.

// LostCommand is the command a worker's report that an attempt was lost
// with cause gives. A crash and a lost worker are recorded (Lost). A
// timeout and a stop give none (nil, nil): nothing of the worker's is
// recorded, because the tool_timeout timer decides a timeout by the
// store's clock and the cancellation that stopped the body decided the
// attempt already; the runner wakes the run instead (due timers applied).
// Any other cause is refused invalid_request.
func LostCommand(action string, attempt int, cause, evidence string) (Command, error) {
	switch cause {
	case events.CauseTimedOut, events.CauseStopped:
		return nil, nil
	case events.CauseWorkerLost, events.CauseCrashed:
		return Lost{Action: action, Attempt: attempt, Cause: cause, Evidence: evidence}, nil
	}
	return nil, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("lost cause %q", cause)}
}

// UnrecordableReply is the command for the reply of turn whose decision
// could not be recorded because it is too large (the log refused it
// payload_too_large, detail saying why): the turn failed with an
// unreadable reply, model error invalid_reply. Every input becomes an
// event before a decision uses it, so a reply that cannot be recorded
// cannot be decided on; without this the run would wait for its reply
// forever.
func UnrecordableReply(turn int64, detail string) ModelFailure {
	return ModelFailure{Turn: turn, Kind: events.FailureInvalidReply, Message: "the model's reply is too large to record: " + detail}
}

// ReasonBodyRunning is the Reason of settle_unconfirmed when the settled
// action's body was still running when the settlement stopped waiting
// (AwaitBody), and of Decide's not_awaited for a settlement of a running
// action.
const ReasonBodyRunning = "body_running"

// AwaitBody says whether a settlement of action offered at now must wait
// for the action's body before it is decided (docs/semantics.md §9: a
// settlement
// offered while the body may still run waits for it): wait is set while
// the action's attempt is running. The wait is over once now is past the
// attempt's recorded deadline plus grace (the time for the tool timeout to
// be recorded): then the answer is settle_unconfirmed, reason
// body_running. An attempt without a deadline (an Infinity timeout) is
// waited for as long as the caller's context allows. An action that is not
// running is decided at once (wait false, nil).
func AwaitBody(s State, action string, grace time.Duration, now time.Time) (wait bool, err error) {
	a, ok := s.Action(action)
	if !ok || a.State != ActionRunning {
		return false, nil
	}
	if d := a.Attempt.Deadline; d != nil && now.After(d.Add(grace)) {
		return false, &weft.Error{Code: weft.CodeSettleUnconfirmed, Reason: ReasonBodyRunning, Message: "the body is still running past its attempt's deadline"}
	}
	return true, nil
}

// Draining is the work a draining runner performs of w: it makes no new
// model call and resolves no calls (the runner that takes the run over
// does, docs/semantics.md §8 graceful drain), so Resolve is dropped and the
// model
// call, when there is one, is marked RecordOnly (a reply that already
// arrived is still recorded). Dispatches, timers and children are kept:
// the work in flight is still recorded here.
func (w Work) Draining() Work {
	w.Resolve = nil
	if w.Model != nil {
		m := *w.Model
		m.RecordOnly = true
		w.Model = &m
	}
	return w
}
