package aggregate

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"

	"github.com/weftrun/weft/events"
)

// Work is what the runtime must do for a run now, derived from its State
// alone, so that a runner resumes any run after a crash purely from the
// log. The runner calls Pending after every append and on recovery.
type Work struct {
	// Finished is set when the run reached its outcome; nothing else is
	// set then (settlements and stored reconciliations may still come).
	Finished bool
	// Model is the model call to make, nil when none: the turn was
	// requested (ModelRequested committed) and has no reply or failure.
	Model *ModelCall
	// Resolve is the tool request whose calls await validation and policy;
	// answer it with ResolveCalls. Nil when none.
	Resolve *CallBatch
	// Dispatch lists every fenced attempt of the current incarnation that
	// has no outcome yet, in action order. Dispatch each one once
	// (idempotent by run/action/attempt).
	Dispatch []Dispatch
	// Timers lists every timer that must be armed, ordered by time then
	// kind and action. Arming is idempotent by (kind, action, attempt,
	// revision, turn); a fired timer comes back as TimerFired.
	Timers []Timer
	// Children lists every delegated action in action order: make sure
	// its child run is started (Start with the ChildStarted's agent,
	// input and Parent; idempotent by the derived id), feed the child's
	// outcome back with ChildSettle once it finished, and cancel the child
	// when Cancel is set (the run is being cancelled).
	Children []Child
}

// Child is a delegated action's child run.
type Child struct {
	Start  events.ChildStarted
	Parent events.Parent
	Cancel bool
}

// ModelCall is a model call to make for Turn. Deadline is when the model
// timeout stops it (zero for none); the request is rebuilt from Transcript.
// RecordOnly is set by Work.Draining: make no call, only record a reply
// that already arrived.
type ModelCall struct {
	Turn       int64
	Deadline   time.Time
	RecordOnly bool
}

// CallBatch is a tool request awaiting validation and policy: the calls of
// Turn in the model's order.
type CallBatch struct {
	Turn  int64
	Calls []events.ToolCall
}

// Dispatch is a fenced attempt to hand to a worker.
type Dispatch struct {
	Action    string
	Tool      string
	Attempt   int
	Arguments json.RawMessage
	// Fence is the recorded fence: timeout, budget, settle window, deadline.
	Fence events.AttemptFenced
}

// Timer is a durable timer to arm: fire Kind at At.
type Timer struct {
	Kind     TimerKind
	At       time.Time
	Action   string
	Attempt  int
	Revision int
	Turn     int64
}

// Command returns the TimerFired command the timer gives when it fires.
func (t Timer) Command() TimerFired {
	return TimerFired{Kind: t.Kind, Action: t.Action, Attempt: t.Attempt, Revision: t.Revision, Turn: t.Turn}
}

// Pending computes the run's Work. On a run that was handed off
// (State.HandedOff) or whose runner was lost, decide Recover first: it
// decides the lost attempts and model call, and Pending then lists the
// work of the new incarnation.
func Pending(s State) Work {
	var w Work
	if !s.started {
		return w
	}
	if s.finished {
		w.Finished = true
		return w
	}
	if s.modelPending {
		mc := &ModelCall{Turn: s.turn}
		if s.modelDue != nil {
			mc.Deadline = *s.modelDue
		}
		w.Model = mc
	}
	if s.retryAt != nil {
		w.Timers = append(w.Timers, Timer{Kind: TimerModelRetry, At: *s.retryAt, Turn: s.turn})
	}
	for _, a := range s.actions {
		switch a.State {
		case ActionRequested:
			if w.Resolve == nil || w.Resolve.Turn != a.Turn {
				w.Resolve = &CallBatch{Turn: a.Turn, Calls: s.calls(a.Turn)}
			}
		case ActionAwaitingApproval:
			if !a.Request.Expires.IsZero() {
				w.Timers = append(w.Timers, Timer{Kind: TimerApprovalExpiry, At: a.Request.Expires, Action: a.ID, Revision: a.Request.Revision})
			}
		case ActionRunning:
			if a.Attempt.Incarnation == s.incarnation {
				w.Dispatch = append(w.Dispatch, Dispatch{Action: a.ID, Tool: a.Tool, Attempt: a.Attempt.Attempt, Arguments: a.CallArguments(), Fence: a.Attempt})
			}
			if a.Attempt.Deadline != nil {
				w.Timers = append(w.Timers, Timer{Kind: TimerToolTimeout, At: *a.Attempt.Deadline, Action: a.ID, Attempt: a.Attempt.Attempt})
			}
		case ActionSettling:
			w.Timers = append(w.Timers, Timer{Kind: TimerSettleWindow, At: a.SettleBy, Action: a.ID, Attempt: a.Attempt.Attempt})
		case ActionDelegated:
			c := *a.Child
			w.Children = append(w.Children, Child{Start: c, Parent: events.Parent{Run: s.run, Action: a.ID, Depth: c.Depth, FamilyTurns: c.FamilyTurns, MaxDepth: c.MaxDepth}, Cancel: s.cancelling})
		}
	}
	slices.SortStableFunc(w.Timers, func(a, b Timer) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Action, b.Action))
	})
	if s.paused && !s.cancelling {
		w = pausedWork(w)
	}
	return w
}

// calls returns the calls of the tool request of turn, from the transcript.
func (s State) calls(turn int64) []events.ToolCall {
	for _, a := range s.actions {
		if a.Turn == turn {
			return slices.Clone(s.transcriptCalls(turn))
		}
	}
	return nil
}

func (s State) transcriptCalls(turn int64) []events.ToolCall {
	for i, e := range s.transcript {
		if e.batch == turn && i > 0 {
			return s.transcript[i-1].msg.Calls
		}
	}
	return nil
}

// Idle reports whether the run waits only for people, by its state alone:
// started, not finished, not handed off, suspended (an approval or a
// reconciliation pending) with nothing in flight — no model call or
// retry, no calls to resolve, no queued, running or settling action, no
// child run to tend — and no timer but approval expiries. Such a run needs
// nothing from a runner until a command or an expiry reaches it, and a
// runner that takes it over has nothing to recover (docs/adr/0014,
// docs/adr/0019-partitions.md).
func Idle(s State) bool {
	if !s.started || s.finished || s.handedOff || Status(s).Kind != StatusSuspended {
		return false
	}
	w := Pending(s)
	if w.Model != nil || w.Resolve != nil || len(w.Dispatch) > 0 || len(w.Children) > 0 {
		return false
	}
	for _, t := range w.Timers {
		if t.Kind != TimerApprovalExpiry {
			return false
		}
	}
	return true
}
