package aggregate

import (
	"fmt"

	"github.com/weftrun/weft/events"
)

// The checks the runner and the worker make on a run's state before (or
// instead of) deciding a command: whether an attempt is still the one the
// run waits for, whether the agent a run is served under still binds its
// live actions' tools, whether a report came in on the run's queue, and
// how a policy's answer is recorded. They are rules of docs/semantics.md,
// so they live here with their scripts (testdata/rule*_*.txt); the callers
// convert their own types at the edge.

// FenceVisible reports whether s has reached the fence of attempt of
// action at incarnation: a state that has not (a replica behind the
// leader) cannot answer whether the attempt is current yet.
func FenceVisible(s State, action string, attempt, incarnation int) bool {
	if !s.Exists() || s.Incarnation() < incarnation {
		return false
	}
	a, ok := s.Action(action)
	return ok && a.Attempts >= attempt
}

// AttemptCurrent reports whether attempt of action at incarnation is the
// running attempt of its action in s: same attempt, the run's current
// incarnation, not handed off, not finished (docs/semantics.md §5: a task
// whose attempt is no longer current is not started).
func AttemptCurrent(s State, action string, attempt, incarnation int) bool {
	return !s.HandedOff() && AttemptRunning(s, action, attempt, incarnation)
}

// AttemptRunning is AttemptCurrent without the hand-off condition: the
// answer for a handed-off run whose draining runner still lives (it
// records the work in flight). The finished check and the two incarnation
// checks decide only for states this core's decisions never write (a run
// finished while an attempt runs, a recovery that did not re-fence it);
// they hold for any log the worker folds (LogCheck folds whatever the log
// holds), and testdata/rule05_attempt_currency.txt folds such states.
func AttemptRunning(s State, action string, attempt, incarnation int) bool {
	if !s.Exists() {
		return false
	}
	if _, fin := s.Finished(); fin {
		return false
	}
	a, ok := s.Action(action)
	return ok && a.State == ActionRunning && a.Attempt.Attempt == attempt &&
		a.Attempt.Incarnation == incarnation && s.Incarnation() == incarnation
}

// LacksTool reports whether the agent a run is served under lacks the
// tool of an action still to run (awaiting approval, queued or running):
// binds says whether that agent binds a tool. The run then ends
// failed(tool_changed) before anything is dispatched (docs/semantics.md §3).
func LacksTool(s State, binds func(tool string) bool) bool {
	for _, a := range s.Actions() {
		switch a.State {
		case ActionAwaitingApproval, ActionQueued, ActionRunning:
			if !binds(a.Tool) {
				return true
			}
		}
	}
	return false
}

// Queue is a tool queue a report or settlement was received on: the
// agent identity and the tool its tasks are addressed to.
type Queue struct {
	Agent events.AgentRef
	Tool  string
}

// OtherQueue says why a report or settlement of action received on queue
// q does not belong there (docs/semantics.md §3: a report on another
// identity's or another tool's queue is refused wrong_reference, reason
// other_queue, and nothing is recorded), or "" when it does. name is how
// the refusal names the queue. A run that does not exist, or an action
// the run does not have, is left to the usual refusal ("").
func OtherQueue(s State, action string, q Queue, name string) string {
	if !s.Exists() {
		return ""
	}
	if ref := s.Started().Agent; ref.Name != q.Agent.Name || ref.Version != q.Agent.Version {
		return fmt.Sprintf("run %s is a run of %s@%s, not of queue %s", s.Run(), ref.Name, ref.Version, name)
	}
	if a, ok := s.Action(action); ok && a.Tool != q.Tool {
		return fmt.Sprintf("action %s of run %s calls %s, not the tool of queue %s", action, s.Run(), a.Tool, name)
	}
	return ""
}

// PolicyOutcome is how a policy's answer is recorded (docs/semantics.md
// §4): an error (or a panic or timeout, which the evaluator returns as
// one) is PolicyError with its message; an allow, a deny with its reason
// and a required approval with its requirement are themselves; any other
// kind (the zero decision) is PolicyError "invalid policy decision". kind
// is the decision's kind as package policy names it (the same strings as
// events.PolicyAllow, PolicyDeny and PolicyRequireApproval).
func PolicyOutcome(kind, reason string, requirement events.Requirement, err error) PolicyResult {
	if err != nil {
		return PolicyResult{Decision: events.PolicyError, Reason: err.Error()}
	}
	switch kind {
	case events.PolicyAllow:
		return PolicyResult{Decision: events.PolicyAllow}
	case events.PolicyDeny:
		return PolicyResult{Decision: events.PolicyDeny, Reason: reason}
	case events.PolicyRequireApproval:
		return PolicyResult{Decision: events.PolicyRequireApproval, Requirement: requirement}
	}
	return PolicyResult{Decision: events.PolicyError, Reason: "invalid policy decision"}
}
