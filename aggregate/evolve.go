package aggregate

import (
	"fmt"
	"slices"

	"github.com/weftrun/weft/events"
)

// Evolve folds one recorded event into s and returns the new State. It is
// total: history is fact, so it accepts every event Decide can produce, in
// every order Decide can produce it. An event that no decision could have
// produced (an attempt fenced for an action that is not queued, a reply to a
// turn nobody requested) is a bug: Evolve panics naming the event and the
// state it met.
//
// Evolve consumes s like append consumes its slice: the returned State may
// share storage with s, so keep using only the result (Clone first to keep
// s).
func Evolve(s State, r events.Recorded) State {
	s.evolve(r)
	return s
}

// Fold folds a run's whole history from the empty State.
func Fold(history []events.Recorded) State {
	var s State
	for _, r := range history {
		s.evolve(r)
	}
	return s
}

// ImpossibleError is what Evolve panics with when it meets an event that no
// decision could have produced. A history read from the log can hold one
// that is well formed and continues the hash chain (anyone who can publish
// on the run's subject can compute its Prev), so readers of the log fold
// with EvolveChecked or FoldChecked and quarantine the run instead of
// crashing (docs/semantics.md §8: one malformed message must not
// stop the world).
type ImpossibleError struct {
	// Run is the run, Version the version of the impossible event, Event
	// its name.
	Run     string
	Version uint64
	Event   events.Name
	// Detail says what the event met.
	Detail string
}

// Error names the event, the run, the version and what is wrong.
func (e *ImpossibleError) Error() string {
	return fmt.Sprintf("aggregate: impossible %s in run %q (version %d): %s", e.Event, e.Run, e.Version, e.Detail)
}

func (s *State) bug(name events.Name, format string, args ...any) {
	panic(&ImpossibleError{Run: s.run, Version: s.version, Event: name, Detail: fmt.Sprintf(format, args...)})
}

// EvolveChecked is Evolve for a history read from the log: an impossible
// event is returned as an *ImpossibleError instead of a panic (any other
// panic is not recovered). On an error the returned State is the empty
// State, and s, which Evolve may have half changed, must not be used.
func EvolveChecked(s State, r events.Recorded) (_ State, err error) {
	defer recoverImpossible(r, &err)
	s.evolve(r)
	return s, nil
}

// FoldChecked is Fold for a history read from the log: an impossible event
// is returned as an *ImpossibleError (with the empty State) instead of a
// panic.
func FoldChecked(history []events.Recorded) (State, error) {
	var s State
	for _, r := range history {
		var err error
		if s, err = EvolveChecked(s, r); err != nil {
			return State{}, err
		}
	}
	return s, nil
}

// recoverImpossible turns the panic of an impossible r into *err and
// re-panics any other panic.
func recoverImpossible(r events.Recorded, err *error) {
	p := recover()
	if p == nil {
		return
	}
	ie, ok := p.(*ImpossibleError)
	if !ok {
		panic(p)
	}
	// The checks before the version is taken (a run not started or
	// finished) name the previous version: name the event's own.
	ie.Version = r.Version
	if ie.Run == "" {
		ie.Run = r.Run
	}
	*err = ie
}

// act returns the action id's index, panicking for an unknown action.
func (s *State) act(name events.Name, id string, allowed ...ActionState) *Action {
	i, ok := s.index[id]
	if !ok {
		s.bug(name, "no action %s", id)
	}
	a := &s.actions[i]
	for _, st := range allowed {
		if a.State == st {
			return a
		}
	}
	s.bug(name, "action %s is %s, want one of %v", id, a.State, allowed)
	return nil
}

// move returns the action id names, after checking that the transition
// allows its state (machine.go). The caller records the event's data; the
// new state is set after the switch (evolve), so a case may still read the
// state the event met. Without a transition (an outcome outside the
// catalogue) the case's own switch names what is wrong.
func (s *State) move(name events.Name, id string, t Transition, ok bool) *Action {
	if !ok {
		i, found := s.index[id]
		if !found {
			s.bug(name, "no action %s", id)
		}
		return &s.actions[i]
	}
	return s.act(name, id, t.From...)
}

func (s *State) evolve(r events.Recorded) {
	name := r.Event.EventName()
	// The action state machine is one definition (machine.go): the case
	// below checks the action's state against t.From and records the
	// event's data; moved then takes t.To.
	t, ok := ActionTransition(r.Event)
	var moved *Action
	if !s.started {
		if _, ok := r.Event.(events.RunStarted); !ok {
			s.bug(name, "run not started")
		}
	} else if s.finished {
		switch r.Event.(type) {
		case events.Reconciled, events.Resolved, events.SettlementAccepted, events.SettlementRefused, events.ReportRefused, events.HeadSigned, events.AttemptNotStarted:
		default:
			s.bug(name, "run finished (%s)", s.outcome.Kind)
		}
	}
	s.version = r.Version
	s.useCommandProof(name, r.Event)
	s.headBehind = headOwed(s.headBehind, s.finished, r.Event)
	switch e := r.Event.(type) {
	case events.RunStarted:
		if s.started {
			s.bug(name, "run already started")
		}
		s.started = true
		s.run = r.Run
		s.start = e
		s.incarnation = 1
		s.runner = e.Runner
		s.index = map[string]int{}
		s.transcript = append(s.transcript, entry{msg: events.Message{Role: events.RoleUser, Text: e.Input}})

	case events.RunForked:
		s.fork(name, e)

	case events.ModelRequested:
		if s.modelPending && e.Why != events.TurnRecovery {
			s.bug(name, "turn %d still awaits its reply", s.turn)
		}
		recall := e.Why == events.TurnRecovery && s.modelPending && s.uncalled == s.turn && e.Turn == s.turn
		if e.Turn != s.turn+1 && !recall {
			s.bug(name, "turn %d after turn %d", e.Turn, s.turn)
		}
		s.uncalled = 0
		s.turn = e.Turn
		s.modelPending = true
		s.modelDue = e.Deadline
		s.retryAt = nil

	case events.ModelReplied:
		if !s.modelPending || e.Turn != s.turn {
			s.bug(name, "turn %d replied, pending %v turn %d", e.Turn, s.modelPending, s.turn)
		}
		s.modelPending = false
		s.modelDue = nil
		s.failures = 0
		if e.Usage != nil {
			s.tokens += e.Usage.Total()
		} else {
			s.unreported++
		}
		s.transcript = append(s.transcript, entry{msg: events.Message{Role: events.RoleAssistant, Text: e.Text, Calls: cloneCalls(e.Calls), ProviderData: e.ProviderData}})
		if e.CreatesActions() {
			for i, c := range e.Calls {
				id := ActionID(e.Turn, c.ID)
				s.index[id] = len(s.actions)
				s.actions = append(s.actions, Action{ID: id, Turn: e.Turn, CallID: c.ID, Index: i, Tool: c.Name, Arguments: c.Arguments, State: ActionRequested})
			}
			s.batch = e.Turn
			s.transcript = append(s.transcript, entry{batch: e.Turn})
		}

	case events.ModelFailed:
		if !s.modelPending || e.Turn != s.turn {
			s.bug(name, "turn %d failed, pending %v turn %d", e.Turn, s.modelPending, s.turn)
		}
		s.modelPending = false
		s.modelDue = nil
		s.retryAt = e.RetryAt
		if e.Kind.Retryable() {
			s.failures++
		}

	case events.AnswerRejected:
		s.corrections++
		s.transcript = append(s.transcript, entry{msg: events.Message{Role: events.RoleUser, Text: CorrectionText(e.Reason)}})

	case events.CallValidated:
		a := s.move(name, e.Action, t, ok)
		moved = a
		switch e.Outcome {
		case events.CallValid:
			if len(e.Normalized) > 0 {
				a.Arguments = e.Normalized
			}
			a.Agent = e.Agent
		case events.CallLimitReached:
			a.Agent = e.Agent
			a.Detail, a.Content = e.Detail, errorContent("limit_reached", e.Detail)
		case events.CallUnknownTool:
			a.Detail, a.Content = e.Detail, errorContent("unknown_tool", "")
		case events.CallInvalidArguments:
			a.Detail, a.Content = e.Detail, errorContent("invalid_arguments", e.Detail)
		default:
			s.bug(name, "outcome %q", e.Outcome)
		}

	case events.PolicyDecided:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if e.Decision == events.PolicyDeny {
			a.Detail, a.Content = e.Reason, errorContent("denied", e.Reason)
			a.Approved = false
		}

	case events.ApprovalRequested:
		a := s.move(name, e.Action, t, ok)
		moved = a
		a.Approved = false
		if !a.Started() {
			// An edit the call never started with is not kept: the
			// request asked again approves the call as the model asked it
			// unless its answer edits it (docs/semantics.md §4).
			a.Edited = nil
		}
		a.Request = Approval{Revision: e.Revision, Requirement: e.Requirement}
		if e.Expires != nil {
			a.Request.Expires = *e.Expires
		}
		s.revision = max(s.revision, e.Revision)

	case events.ApprovalAnswered:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if a.Request.Revision != e.Revision || !a.Request.Pending() {
			s.bug(name, "action %s answers revision %d, request %d answered %q", e.Action, e.Revision, a.Request.Revision, a.Request.Answer)
		}
		a.Request.Answer = e.Answer
		a.Answers = append(a.Answers, e)
		switch e.Answer {
		case events.AnswerApprove:
			a.Approved = true
			if e.Arguments != nil {
				a.Edited = e.Arguments
			}
		case events.AnswerReject:
			a.Detail, a.Content = e.Reason, errorContent("rejected", e.Reason)
		case events.AnswerExpired:
			a.Detail, a.Content = "approval expired", errorContent("rejected", "approval expired")
		default:
			s.bug(name, "answer %q", e.Answer)
		}

	case events.RequirementChanged:
		a := s.move(name, e.Action, t, ok)
		a.Approved = false

	case events.ActionQueued:
		a := s.move(name, e.Action, t, ok)
		moved = a
		a.Config = e.Config

	case events.AttemptFenced:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if e.Attempt != a.Attempts+1 {
			s.bug(name, "action %s attempt %d after %d", e.Action, e.Attempt, a.Attempts)
		}
		a.Attempts = e.Attempt
		a.Attempt = e
		a.FencedAt = r.At
		a.ClaimToken = ""
		a.Outcome = ""
		a.Detail = ""

	case events.AttemptReported:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if e.Attempt != a.Attempts {
			s.bug(name, "action %s reports attempt %d, current %d", e.Action, e.Attempt, a.Attempts)
		}
		a.Outcome = e.Outcome
		switch e.Outcome {
		case events.OutcomeOutput:
			a.Content = e.Content
		case events.OutcomeExplain:
			a.Detail, a.Content = e.Message, ExplainContent(e.Message)
		case events.OutcomeUncertain:
			a.Detail = e.Evidence
		case events.OutcomeOversize:
			a.Detail = fmt.Sprintf("result of %d bytes over max result bytes", e.Bytes)
		default:
			s.bug(name, "outcome %q", e.Outcome)
		}

	case events.AttemptLost:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if e.Attempt != a.Attempts {
			s.bug(name, "action %s lost attempt %d, current %d", e.Action, e.Attempt, a.Attempts)
		}
		a.Outcome = e.Cause
		a.Detail = e.Evidence
		switch e.Next {
		case events.NextReplay:
		case events.NextReapprove:
			a.Approved = false
		case events.NextSettle:
			if e.SettleBy == nil {
				s.bug(name, "settle without settle_by")
			}
			a.SettleBy = *e.SettleBy
		case events.NextUncertain:
		default:
			s.bug(name, "next %q", e.Next)
		}

	case events.ReportRefused:

	case events.ActionUncertain:
		// The states it may come from are explained in machine.go.
		a := s.move(name, e.Action, t, ok)
		moved = a
		if a.State != ActionSettling && a.Attempts == 0 {
			s.bug(name, "action %s is %s and never had an attempt", e.Action, a.State)
		}
		a.Detail, a.Content = e.Evidence, nil

	case events.SettlementAccepted:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if e.Late != (a.State == ActionUncertain) {
			s.bug(name, "action %s is %s, late %v", e.Action, a.State, e.Late)
		}
		// A settlement is not the body's report: Outcome keeps what ended
		// the attempt, so that the body's own definite report is still
		// accepted after an uncertain settlement (its return value wins).
		switch {
		case e.Outcome == events.OutcomeUncertain && !e.Late:
			a.Detail = e.Summary
		case e.Outcome == events.OutcomeOutput && e.Late:
			a.Content = e.Content
		case e.Outcome == events.OutcomeExplain && e.Late:
			a.Detail, a.Content = e.Message, ExplainContent(e.Message)
		case e.Outcome == events.OutcomeOutput:
			a.Detail, a.Content = e.Summary, e.Content
		case e.Outcome == events.OutcomeExplain:
			a.Detail, a.Content = e.Message, ExplainContent(e.Message)
		default:
			s.bug(name, "outcome %q late %v", e.Outcome, e.Late)
		}

	case events.SettlementRefused:

	case events.Reconciled:
		a := s.move(name, e.Action, t, ok)
		moved = a
		a.Content, a.ReconciledKind = e.Content, e.Kind

	case events.Resolved:
		s.evolveResolved(name, e, t, ok)

	case events.ActionsNotStarted:
		for _, id := range e.Actions {
			a := s.move(name, id, t, ok)
			if a.Attempts > len(a.Closed) {
				s.bug(name, "action %s had %d attempts, %d closed unclaimed", id, a.Attempts, len(a.Closed))
			}
			if !markChecked(*a) {
				s.bug(name, "action %s is uncertain, its mark never checked against the found claim's token", id)
			}
			a.State, a.Detail = t.To, e.Reason
		}

	case events.AttemptClosed:
		a := s.move(name, e.Action, t, ok)
		if e.Attempt != a.Attempts || e.Incarnation != a.Attempt.Incarnation || slices.Contains(a.Closed, e.Attempt) || slices.Contains(a.Claimed, e.Attempt) {
			s.bug(name, "action %s closes attempt %d incarnation %d; latest %d incarnation %d, closed %v, claimed %v", e.Action, e.Attempt, e.Incarnation, a.Attempts, a.Attempt.Incarnation, a.Closed, a.Claimed)
		}
		if e.Claimed {
			a.Claimed = append(a.Claimed, e.Attempt)
			a.ClaimToken = e.ClaimToken
		} else {
			a.Closed = append(a.Closed, e.Attempt)
		}

	case events.AttemptNotStarted:
		a := s.move(name, e.Action, t, ok)
		if e.Attempt != a.Attempts || e.Incarnation != a.Attempt.Incarnation || !slices.Contains(a.Claimed, e.Attempt) || slices.Contains(a.Closed, e.Attempt) {
			s.bug(name, "action %s: attempt %d incarnation %d marked not started; latest %d incarnation %d, closed %v, claimed %v", e.Action, e.Attempt, e.Incarnation, a.Attempts, a.Attempt.Incarnation, a.Closed, a.Claimed)
		}
		// The close found a claim that did not act after all: the attempt
		// counts closed (the replay budget and §5's rule no longer count
		// it), and stays listed as claimed so that it is never closed.
		a.Closed = append(a.Closed, e.Attempt)
		if e.Ended && a.Attempts != len(a.Closed) {
			s.bug(name, "action %s: ended %v with %d attempts, %d closed", e.Action, e.Ended, a.Attempts, len(a.Closed))
		}
		if e.Ended {
			// On a live run the model reads that the call did not run
			// (Action.ModelVisible; docs/adr/0023-closing-attempts.md,
			// "A late mark on a live run").
			a.Detail, a.Content = events.NotStartedMarked, LateMarkContent(e, s.finished, s.cancelling)
		}
		moved = a

	case events.CancelRequested:
		if s.cancelling {
			s.bug(name, "already cancelling")
		}
		s.cancelling = true
		s.modelPending = false
		s.modelDue = nil
		s.retryAt = nil

	case events.RunPaused:
		if s.paused || s.cancelling {
			s.bug(name, "already paused or cancelling")
		}
		s.paused = true

	case events.RunResumed:
		if !s.paused {
			s.bug(name, "not paused")
		}
		s.paused = false

	case events.RunHandedOff:
		s.handedOff = true
		s.uncalled = e.Uncalled

	case events.RunRecovered:
		if e.Incarnation != s.incarnation+1 {
			s.bug(name, "incarnation %d after %d", e.Incarnation, s.incarnation)
		}
		s.incarnation = e.Incarnation
		s.runner = e.Runner
		s.handedOff = false

	case events.ChildStarted:
		a := s.move(name, e.Action, t, ok)
		moved = a
		if a.Agent == nil {
			s.bug(name, "action %s is not a delegation", e.Action)
		}
		c := e
		a.Child = &c

	case events.ChildSettled:
		a := s.move(name, e.Action, t, ok)
		moved = a
		a.Outcome = e.Outcome.Kind
		s.childTurns += e.Turns
		switch {
		case e.Bytes > 0:
			a.Detail = fmt.Sprintf("child answer of %d bytes over max result bytes", e.Bytes)
		default:
			a.Content = e.Content
			a.Detail = events.DescribeOutcome(e.Outcome)
		}

	case events.HeadSigned:
		// A runner's signature over the head before it (runner/signhead.go):
		// nothing of the run changes.

	case events.RunFinished:
		s.finished = true
		s.outcome = e.Outcome
		s.modelPending = false
		s.modelDue = nil
		s.retryAt = nil

	default:
		s.bug(name, "unknown event type")
	}
	if moved != nil && t.To != "" {
		moved.State = t.To
	}
}
