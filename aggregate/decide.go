package aggregate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// Decide decides what happens when command c meets the run in state s at
// the store time now (the time the runner stamps on the appended events).
// It is pure: it does not change s and reads no clock. It returns the
// events to append, or a *weft.Error refusal whose Code is a protocol error
// code. A refusal may come with events that must be appended all the same:
// approval expiries that were due (applied before any command is judged)
// and the SettlementRefused audit record of a not_awaited settlement.
//
// Before judging any command on a live run, Decide applies every approval
// expiry due at now; a takeover (Recover) applies them after it records
// the recovery, before Recover.Then. After the command, it emits the follow-on events the
// new state calls for: attempts fenced for free concurrency slots, the next
// model turn once every action of the batch is model-visible, the
// correction turn of a rejected typed answer, a due model retry, and the
// run's end; on a paused run, none of the fences, child runs and turns
// (docs/semantics.md §13).
func Decide(s State, c Command, now time.Time) ([]events.Event, error) {
	closing, isClosing := c.(Closing)
	if isClosing {
		c = closing.Then
		if err := checkCloses(s, closing); err != nil {
			return nil, err
		}
	}
	if st, ok := c.(Start); ok {
		return decideStart(s, st, now)
	}
	if !s.started {
		return nil, weft.UnknownRun(s.run)
	}
	d := &decider{s: s.Clone(), now: now}
	if isClosing {
		// Recorded before anything that depends on them, expiries
		// included (docs/adr/0023-closing-attempts.md).
		d.recordCloses(closing)
	}
	if _, takeover := c.(Recover); !takeover && !d.s.finished && !d.s.cancelling {
		// A takeover applies them itself, after the recovery is
		// recorded (recover).
		d.expireDue()
	}
	err := d.command(c)
	if err == nil || len(d.evs) > 0 {
		d.advance()
	}
	return d.evs, err
}

// decider accumulates the events of one decision, folding each into its
// private copy of the state so that later steps see earlier ones.
type decider struct {
	s   State
	now time.Time
	evs []events.Event
	// modelLost is set by a recovery that found the run's requested model
	// call lost with its runner: advance issues it again once the command
	// the takeover was for (Recover.Then) is decided, unless that command
	// cancelled or ended the run (docs/semantics.md §7). recall says the lost
	// call was never made (RunHandedOff Uncalled): it is issued under the
	// same turn.
	modelLost bool
	recall    bool
	// closedNow are the actions whose latest attempt this decision
	// records closed (recordCloses); markedNow those of them whose close
	// found their worker's claim marked not started, with that worker.
	closedNow map[string]bool
	markedNow map[string]*events.ClosedNotStarted
}

func (d *decider) emit(e events.Event) {
	d.evs = append(d.evs, e)
	d.s.evolve(events.Recorded{Run: d.s.run, Version: d.s.version + 1, At: d.now, Event: e})
}

func (d *decider) command(c Command) error {
	if err := CheckCommandUnused(d.s, commandProofFor(c)); err != nil {
		return err
	}
	switch c := c.(type) {
	case ModelReply:
		return d.modelReply(c)
	case ModelFailure:
		return d.modelFailure(c)
	case ResolveCalls:
		return d.resolveCalls(c)
	case Approve:
		return d.approve(c)
	case Reject:
		return d.reject(c)
	case Answers:
		return d.answers(c)
	case Report:
		return d.report(c)
	case Lost:
		return d.lost(c)
	case Settle:
		return d.settle(c)
	case Reconcile:
		return d.reconcile(c)
	case MarkedNotStarted:
		return d.markedNotStarted(c)
	case Resolve:
		return d.resolve(c)
	case Cancel:
		return d.cancel(c)
	case Pause:
		return d.pause(c)
	case Resume:
		return d.resume(c)
	case ChildSettle:
		return d.childSettle(c)
	case ToolMissing:
		return d.toolMissing(c)
	case TimerFired:
		return d.timerFired(c)
	case HandOff:
		return d.handOff(c)
	case Recover:
		return d.recover(c)
	}
	return weft.Errorf(weft.CodeInternal, "unknown command %T", c)
}

func (d *decider) runEnded() error {
	return &weft.Error{Code: weft.CodeRunEnded, Reason: d.s.outcome.Kind, Message: fmt.Sprintf("run %s has finished", d.s.run)}
}

// endedOrCancelling refuses a command on a finished run, or on a run being
// cancelled, with run_ended: the reason is the finished run's outcome kind
// (completed, failed, ...), or cancelled for a run being cancelled, which
// always ends cancelled (docs/semantics.md §7).
func (d *decider) endedOrCancelling() error {
	if d.s.finished {
		return d.runEnded()
	}
	return &weft.Error{Code: weft.CodeRunEnded, Reason: events.OutcomeCancelled, Message: fmt.Sprintf("run %s is being cancelled", d.s.run)}
}

func (d *decider) at(m events.Millis) *time.Time {
	dur, ok := m.Duration()
	if !ok || m == 0 {
		return nil
	}
	t := d.now.Add(dur)
	return &t
}

// ---- start

func decideStart(s State, c Start, now time.Time) ([]events.Event, error) {
	if s.started {
		same := s.start.Agent == c.Agent && s.start.Input == c.Input && sameForkPoint(s.forked, c.Fork)
		return nil, &weft.Error{Code: weft.CodeAlreadyStarted, Message: fmt.Sprintf("run %s exists", s.run), SameInput: &same}
	}
	if !validRunID(c.Run) {
		return nil, weft.Errorf(weft.CodeInvalidName, "run id %q: 1-128 of [A-Za-z0-9_-]", c.Run)
	}
	l := c.Limits
	switch {
	case l.MaxTurns < 1:
		return nil, weft.Errorf(weft.CodeInvalidRequest, "max turns %d: allowed 1..2^53-1", l.MaxTurns)
	case l.MaxConcurrency < 1:
		return nil, weft.Errorf(weft.CodeInvalidRequest, "max concurrency %d: allowed 1..", l.MaxConcurrency)
	case l.TokenBudget < 0:
		return nil, weft.Errorf(weft.CodeInvalidRequest, "token budget %d: allowed 1..", l.TokenBudget)
	case l.MaxResultBytes < 1:
		return nil, weft.Errorf(weft.CodeInvalidRequest, "max result bytes %d: allowed 1..", l.MaxResultBytes)
	}
	if p := c.Parent; p != nil && (p.Depth < 1 || p.FamilyTurns < 1 || p.Run == "" || p.Action == "") {
		return nil, weft.Errorf(weft.CodeInvalidRequest, "parent %s action %s depth %d family turns %d: a child run needs a parent run and action, depth 1.. and family turns 1..", p.Run, p.Action, p.Depth, p.FamilyTurns)
	}
	d := &decider{s: State{run: c.Run}, now: now}
	if f := c.Fork; f != nil && (f.From.Run == "" || f.From.Run == c.Run || f.From.Turn < 1 || c.Parent != nil) {
		return nil, weft.Errorf(weft.CodeInvalidRequest, "fork of %q at turn %d: a restart names another run, a turn 1.. and no parent", f.From.Run, f.From.Turn)
	}
	d.emit(events.RunStarted{Agent: c.Agent, Input: c.Input, Correlation: c.Correlation, Limits: l, Typed: c.Typed, Runner: c.Runner, Parent: c.Parent})
	if c.Fork != nil {
		d.emit(*c.Fork)
	}
	d.requestTurn(events.TurnStart)
	return d.evs, nil
}

func validRunID(id string) bool {
	if len(id) < 1 || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// ---- model turns

// requestTurn requests the next turn, or ends the run when no turn is left.
func (d *decider) requestTurn(why string) {
	l := d.s.start.Limits
	if o, none := d.noTurnLeft(); none {
		d.finish(o, events.NotStartedBudgetExhausted)
		return
	}
	d.emit(events.ModelRequested{Turn: d.s.turn + 1, Incarnation: d.s.incarnation, Why: why, Deadline: d.at(l.ModelTimeout)})
}

func (d *decider) awaitTurn(turn int64) error {
	if d.s.finished || d.s.cancelling {
		return d.endedOrCancelling()
	}
	if !d.s.modelPending || turn != d.s.turn {
		return weft.Errorf(weft.CodeStaleReference, "turn %d is not awaited (current turn %d, awaiting %v)", turn, d.s.turn, d.s.modelPending)
	}
	if d.modelLost {
		return weft.Errorf(weft.CodeStaleReference, "turn %d was lost with its runner; the recovery calls the model again", turn)
	}
	return nil
}

func (d *decider) modelReply(c ModelReply) error {
	if d.s.finished {
		return d.runEnded()
	}
	if err := d.awaitTurn(c.Turn); err != nil {
		return err
	}
	r := c.Reply
	ev := replyEvent(c.Turn, r)
	d.emit(ev)
	l := d.s.start.Limits
	if l.TokenBudget > 0 {
		if r.Usage == nil {
			d.finish(events.Outcome{Kind: events.OutcomeBudgetUnverifiable, Turn: c.Turn}, events.NotStartedBudgetExhausted)
			return nil
		}
		if d.s.tokens > l.TokenBudget {
			d.finish(events.Outcome{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonTokenLimit, Limit: l.TokenBudget, Used: d.s.tokens}, events.NotStartedBudgetExhausted)
			return nil
		}
	}
	switch r.Kind {
	case events.ReplyRefusal:
		d.finish(events.Outcome{Kind: events.OutcomeRefused, Reason: r.Reason}, events.NotStartedRunFinished)
	case events.ReplyTruncated:
		partial := r.Reason
		if partial == "" {
			partial = r.Turn.Text
		}
		d.finish(events.Outcome{Kind: events.OutcomeOutputLimited, Partial: partial}, events.NotStartedRunFinished)
	case events.ReplyFinalAnswer:
		d.finalAnswer(c)
	case events.ReplyToolRequest:
		if !ev.CreatesActions() {
			d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonModelProtocolViolation, Turn: c.Turn}, events.NotStartedRunFinished)
			return nil
		}
		// The results could not be fed to another permitted turn: no turn
		// or no token is left.
		if o, none := d.noTurnLeft(); none {
			d.finish(o, events.NotStartedBudgetExhausted)
		} else if !d.tokensLeft() {
			d.finish(events.Outcome{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonTokenLimit, Limit: l.TokenBudget, Used: d.s.tokens}, events.NotStartedBudgetExhausted)
		}
	default:
		d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonModelProtocolViolation, Turn: c.Turn}, events.NotStartedRunFinished)
	}
	return nil
}

func (d *decider) finalAnswer(c ModelReply) {
	text := c.Reply.Turn.Text
	if !d.s.start.Typed {
		b, _ := json.Marshal(text)
		d.finish(events.Outcome{Kind: events.OutcomeCompleted, Answer: b}, events.NotStartedRunFinished)
		return
	}
	if c.AnswerError == "" && len(c.Answer) > 0 && json.Valid(c.Answer) {
		d.finish(events.Outcome{Kind: events.OutcomeCompleted, Answer: c.Answer}, events.NotStartedRunFinished)
		return
	}
	reason := c.AnswerError
	if reason == "" {
		reason = "no answer was decoded"
	}
	l := d.s.start.Limits
	attempts := max(l.AnswerAttempts, 1)
	if _, none := d.noTurnLeft(); d.s.corrections+1 < attempts && !none && d.tokensLeft() {
		// The correction turn is requested by advance: at once on a live
		// run, by the resume on a paused one (docs/semantics.md §13).
		d.emit(events.AnswerRejected{Turn: c.Turn, Reason: reason})
		return
	}
	d.finish(events.Outcome{Kind: events.OutcomeAnswerInvalid, Raw: text, Reason: reason}, events.NotStartedRunFinished)
}

// tokensLeft reports whether another turn could be paid for: no token
// budget, or reported usage still under it.
func (d *decider) tokensLeft() bool {
	b := d.s.start.Limits.TokenBudget
	return b == 0 || d.s.tokens < b
}

func (d *decider) modelFailure(c ModelFailure) error {
	if d.s.finished {
		return d.runEnded()
	}
	if err := d.awaitTurn(c.Turn); err != nil {
		return err
	}
	ev := events.ModelFailed{Turn: c.Turn, Kind: c.Kind, Status: c.Status, Message: c.Message, RetryAfter: events.MillisOf(c.RetryAfter)}
	l := d.s.start.Limits
	if !ev.Kind.Retryable() {
		d.emit(ev)
		d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonModelFailed, Turn: c.Turn}, events.NotStartedRunFinished)
		return nil
	}
	if o, none := d.noTurnLeft(); none {
		d.emit(ev)
		d.finish(o, events.NotStartedBudgetExhausted)
		return nil
	}
	at := d.now.Add(RetryDelay(l.ModelRetryDelay, d.s.failures, c.RetryAfter))
	ev.RetryAt = &at
	d.emit(ev)
	return nil
}

// RetryDelay is the delay before retrying a retryable model failure: the
// agent's retry delay doubled per earlier consecutive failure up to 64×,
// or the provider's retry-after (capped at 10 minutes) when longer.
func RetryDelay(base events.Millis, earlierFailures int, retryAfter time.Duration) time.Duration {
	b, _ := base.Duration()
	delay := b << min(earlierFailures, 6)
	retryAfter = min(retryAfter, 10*time.Minute)
	return max(delay, retryAfter)
}

// ---- calls, policy, approvals

func validConfig(c events.ToolConfig) error {
	const maxMillis = 1<<32 - 1
	switch {
	case c.MaxAttempts < 0 || c.MaxAttempts > 100:
		return weft.Errorf(weft.CodeInvalidRequest, "max attempts %d: allowed 1..100", c.MaxAttempts)
	case c.Timeout != events.Infinite && (c.Timeout < 0 || c.Timeout > maxMillis):
		return weft.Errorf(weft.CodeInvalidRequest, "timeout %d ms: allowed 1 ms..2^32-1 ms or infinity", c.Timeout)
	case c.SettleWithin < 0 || c.SettleWithin > maxMillis:
		return weft.Errorf(weft.CodeInvalidRequest, "settle within %d ms: allowed 1 ms..2^32-1 ms", c.SettleWithin)
	}
	return nil
}

// config resolves a tool configuration's defaults against the run's limits.
func (d *decider) config(c events.ToolConfig) events.ToolConfig {
	if c.Timeout == 0 {
		c.Timeout = d.s.start.Limits.ToolTimeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 1
	}
	return c
}

func validPolicy(p PolicyResult) error {
	switch p.Decision {
	case events.PolicyAllow, events.PolicyDeny, events.PolicyError:
		return nil
	case events.PolicyRequireApproval:
		if p.Requirement.Name == "" {
			return weft.Errorf(weft.CodeInvalidRequest, "require_approval without a requirement")
		}
		return nil
	}
	return weft.Errorf(weft.CodeInvalidRequest, "policy decision %q", p.Decision)
}

func (d *decider) resolveCalls(c ResolveCalls) error {
	if d.s.finished {
		return d.runEnded()
	}
	var want []Action
	for _, a := range d.s.actions {
		if a.Turn == c.Turn && a.State == ActionRequested {
			want = append(want, a)
		}
	}
	if len(want) == 0 {
		return weft.Errorf(weft.CodeStaleReference, "no calls of turn %d await validation", c.Turn)
	}
	byCall := make(map[string]Resolution, len(c.Calls))
	for _, r := range c.Calls {
		if _, dup := byCall[r.CallID]; dup {
			return weft.Errorf(weft.CodeInvalidRequest, "call %s resolved twice", r.CallID)
		}
		byCall[r.CallID] = r
	}
	if len(byCall) != len(want) {
		return weft.Errorf(weft.CodeInvalidRequest, "%d resolutions for %d calls of turn %d", len(byCall), len(want), c.Turn)
	}
	limited := DelegationLimits(d.s, c.Turn, func(call string) bool {
		r := byCall[call]
		return r.Validation == events.CallValid && r.Delegate != nil
	})
	policyFailed := ""
	for _, a := range want {
		r, ok := byCall[a.CallID]
		if !ok {
			return weft.Errorf(weft.CodeInvalidRequest, "call %s of turn %d is not resolved", a.CallID, c.Turn)
		}
		switch r.Validation {
		case events.CallUnknownTool, events.CallInvalidArguments:
			continue
		case events.CallValid:
		default:
			return weft.Errorf(weft.CodeInvalidRequest, "call %s: validation %q", a.CallID, r.Validation)
		}
		if _, over := limited[a.CallID]; over {
			continue
		}
		if err := validPolicy(r.Policy); err != nil {
			return err
		}
		if err := validConfig(r.Tool); err != nil {
			return err
		}
		if r.Policy.Decision == events.PolicyError && policyFailed == "" {
			policyFailed = a.ID
		}
	}
	for _, a := range want {
		r := byCall[a.CallID]
		ev := events.CallValidated{Action: a.ID, Turn: a.Turn, CallID: a.CallID, Tool: a.Tool, Outcome: r.Validation, Detail: r.Detail}
		if r.Validation == events.CallValid && len(r.Normalized) > 0 && string(r.Normalized) != string(a.Arguments) {
			ev.Normalized = r.Normalized
		}
		if r.Validation == events.CallValid && r.Delegate != nil {
			ag := *r.Delegate
			ev.Agent = &ag
			if detail, over := limited[a.CallID]; over {
				ev.Outcome, ev.Detail = events.CallLimitReached, detail
			}
		}
		d.emit(ev)
	}
	if policyFailed != "" {
		for _, a := range want {
			if _, over := limited[a.CallID]; over {
				continue
			}
			if r := byCall[a.CallID]; r.Validation == events.CallValid && r.Policy.Decision == events.PolicyError {
				d.emit(events.PolicyDecided{Action: a.ID, Context: "model", Decision: events.PolicyError, Reason: r.Policy.Reason})
			}
		}
		d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonPolicyFailed, Action: policyFailed}, events.NotStartedPolicyFailed)
		return nil
	}
	for _, a := range want {
		r := byCall[a.CallID]
		if _, over := limited[a.CallID]; over || r.Validation != events.CallValid {
			continue
		}
		pd := events.PolicyDecided{Action: a.ID, Context: "model", Decision: r.Policy.Decision, Reason: r.Policy.Reason}
		if r.Policy.Decision == events.PolicyRequireApproval {
			req := r.Policy.Requirement
			pd.Requirement = &req
		}
		d.emit(pd)
		switch r.Policy.Decision {
		case events.PolicyAllow:
			if r.Delegate != nil {
				d.delegate(a.ID, events.QueuedAllowed)
				break
			}
			d.emit(events.ActionQueued{Action: a.ID, Why: events.QueuedAllowed, Config: d.config(r.Tool)})
		case events.PolicyRequireApproval:
			d.ask(a.ID, r.Policy.Requirement, events.AskPolicy)
		}
	}
	return nil
}

// ask emits an approval request with the run's next revision.
func (d *decider) ask(action string, req events.Requirement, why string) {
	d.emit(events.ApprovalRequested{Action: action, Revision: d.s.revision + 1, Requirement: req, Expires: d.at(d.s.start.Limits.ApprovalExpiry), Why: why})
}

// expireDue applies every approval expiry due at now, in action order.
func (d *decider) expireDue() {
	for _, a := range d.s.actions {
		if a.State == ActionAwaitingApproval && a.Request.Pending() && !a.Request.Expires.IsZero() && !d.now.Before(a.Request.Expires) {
			d.emit(events.ApprovalAnswered{Action: a.ID, Revision: a.Request.Revision, Requirement: a.Request.Requirement, Answer: events.AnswerExpired})
			if hasUnresultedFence(a) {
				d.endUncertain(a, "re-approval expired")
			}
		}
	}
}

// CheckAnswer is the pure pre-check of an approval answer (approve or
// reject) for the request (action, revision) at the store time now. A
// runner calls it before it verifies a proof or re-runs the policy, and
// verifies the proof against the returned request's requirement. It refuses
// with run_ended (reason: the run's outcome kind, cancelled while it is
// being cancelled), wrong_reference (no such action, or an action that
// never asked for approval), stale_reference (not the action's latest
// revision: either an earlier request of the action, "superseded", or a
// revision the action never had, named so in the message), approval_expired (the request expired, or expires at now) or
// already_answered.
func CheckAnswer(s State, action string, revision int, now time.Time) (Approval, error) {
	if !s.started {
		return Approval{}, weft.UnknownRun(s.run)
	}
	if s.finished {
		return Approval{}, &weft.Error{Code: weft.CodeRunEnded, Reason: s.outcome.Kind, Message: fmt.Sprintf("run %s has finished", s.run)}
	}
	if s.cancelling {
		return Approval{}, &weft.Error{Code: weft.CodeRunEnded, Reason: events.OutcomeCancelled, Message: fmt.Sprintf("run %s is being cancelled", s.run)}
	}
	a, ok := s.Action(action)
	if !ok || a.Request.Revision == 0 {
		return Approval{}, weft.Errorf(weft.CodeWrongReference, "run %s has no approval request for action %q", s.run, action)
	}
	if revision != a.Request.Revision {
		// docs/semantics.md §12 scenario 17: a wrong revision is
		// stale_reference
		// (wrong_reference names another run or no such action). Only a
		// request the action had before is superseded.
		for _, ans := range a.Answers {
			if ans.Revision == revision && revision < a.Request.Revision {
				return Approval{}, weft.Errorf(weft.CodeStaleReference, "action %s: revision %d superseded by %d", action, revision, a.Request.Revision)
			}
		}
		return Approval{}, weft.Errorf(weft.CodeStaleReference, "action %s has no approval request of revision %d; its current request is revision %d", action, revision, a.Request.Revision)
	}
	switch {
	case a.Request.Answer == events.AnswerExpired:
		return Approval{}, weft.Errorf(weft.CodeApprovalExpired, "action %s: revision %d expired at %s", action, revision, a.Request.Expires.UTC().Format(time.RFC3339Nano))
	case a.Request.Answer != "":
		return Approval{}, &weft.Error{Code: weft.CodeAlreadyAnswered, Reason: a.Request.Answer, Message: fmt.Sprintf("action %s: revision %d already answered", action, revision)}
	case !a.Request.Expires.IsZero() && !now.Before(a.Request.Expires):
		return Approval{}, weft.Errorf(weft.CodeApprovalExpired, "action %s: revision %d expired at %s", action, revision, a.Request.Expires.UTC().Format(time.RFC3339Nano))
	}
	return a.Request, nil
}

// ProofUsed reports whether s records an answer given with the signed
// proof p (the same statement by the same key, package proof's Digest), and
// which: a proof is consumed once.
func ProofUsed(s State, p *events.ApprovalProof) (action string, revision int, used bool) {
	if p == nil {
		return "", 0, false
	}
	d := proof.Digest(*p)
	for _, a := range s.actions {
		for _, ans := range a.Answers {
			if ans.Proof != nil && ans.Proof.Key == p.Key && proof.Digest(*ans.Proof) == d {
				return a.ID, ans.Revision, true
			}
		}
	}
	return "", 0, false
}

// CheckUnused refuses a signed proof s already recorded (proof_refused,
// reason proof_used); nil for none. Decide checks it first for an answer;
// the runner too, before the references, so a replay is named as one.
func CheckUnused(s State, p *events.ApprovalProof) error {
	if action, rev, used := ProofUsed(s, p); used {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: proof.ReasonProofUsed,
			Message: fmt.Sprintf("this proof was already recorded with the answer to action %s revision %d: a proof is consumed once", action, rev)}
	}
	return nil
}

// checkProofExpiry refuses a signed proof that expired by now, the
// decision's time (the answer's recorded time).
func checkProofExpiry(p *events.ApprovalProof, now time.Time) error {
	if p != nil && !now.Before(p.Expires) {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: proof.ReasonProofExpired,
			Message: "the proof expired at " + p.Expires.UTC().Format(time.RFC3339)}
	}
	return nil
}

func (d *decider) approve(c Approve) error {
	if err := CheckUnused(d.s, c.Proof); err != nil {
		return err
	}
	req, err := CheckAnswer(d.s, c.Action, c.Revision, d.now)
	if err != nil {
		return err
	}
	if err := checkProofExpiry(c.Proof, d.now); err != nil {
		return err
	}
	if err := validPolicy(c.Policy); err != nil {
		return err
	}
	if err := validConfig(c.Tool); err != nil {
		return err
	}
	cfg := d.config(c.Tool)
	asked, _ := d.s.Action(c.Action)
	c.Arguments = EditOf(asked, c.Arguments)
	if c.Arguments != nil {
		if err := checkEdit(asked, req, c.Arguments, c.Policy); err != nil {
			return err
		}
	}
	if a := asked; a.Attempts > 0 {
		// Re-approved after a lost attempt: the budget recorded with the
		// first queueing keeps deciding its attempts.
		cfg = a.Config
	}
	d.emit(events.ApprovalAnswered{Action: c.Action, Revision: c.Revision, Requirement: req.Requirement, Answer: events.AnswerApprove, Reviewer: c.Reviewer, Verifier: c.Verifier, Identity: c.Identity, Proof: c.Proof, Arguments: c.Arguments})
	pd := events.PolicyDecided{Action: c.Action, Context: "approval", Decision: c.Policy.Decision, Reason: c.Policy.Reason}
	if c.Policy.Decision == events.PolicyRequireApproval {
		r := c.Policy.Requirement
		pd.Requirement = &r
	}
	d.emit(pd)
	delegation := false
	if a, _ := d.s.Action(c.Action); a.Agent != nil {
		delegation = true
	}
	switch c.Policy.Decision {
	case events.PolicyAllow:
		if delegation {
			d.delegate(c.Action, events.QueuedApproved)
			break
		}
		d.emit(events.ActionQueued{Action: c.Action, Why: events.QueuedApproved, Config: cfg})
	case events.PolicyRequireApproval:
		if c.Policy.Requirement == req.Requirement {
			if delegation {
				d.delegate(c.Action, events.QueuedApproved)
				break
			}
			d.emit(events.ActionQueued{Action: c.Action, Why: events.QueuedApproved, Config: cfg})
			break
		}
		d.emit(events.RequirementChanged{Action: c.Action, Revision: c.Revision, From: req.Requirement, To: c.Policy.Requirement})
		d.ask(c.Action, c.Policy.Requirement, events.AskRequirementChanged)
	case events.PolicyDeny:
		if hasUnresultedFence(asked) {
			d.endUncertain(asked, "re-approval denied by policy"+parenthesized(c.Policy.Reason))
		}
	case events.PolicyError:
		d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonPolicyFailed, Action: c.Action}, events.NotStartedPolicyFailed)
	}
	return nil
}

func (d *decider) reject(c Reject) error {
	if err := CheckUnused(d.s, c.Proof); err != nil {
		return err
	}
	req, err := CheckAnswer(d.s, c.Action, c.Revision, d.now)
	if err != nil {
		return err
	}
	if err := checkProofExpiry(c.Proof, d.now); err != nil {
		return err
	}
	asked, _ := d.s.Action(c.Action)
	d.emit(events.ApprovalAnswered{Action: c.Action, Revision: c.Revision, Requirement: req.Requirement, Answer: events.AnswerReject, Reason: c.Reason, Reviewer: c.By, Verifier: c.Verifier, Identity: c.Identity, Proof: c.Proof})
	if hasUnresultedFence(asked) {
		d.endUncertain(asked, "re-approval rejected"+parenthesized(c.Reason))
	}
	return nil
}

// ---- attempts

// fence starts the next attempt of a queued action.
func (d *decider) fence(a Action) {
	cfg := a.Config
	d.emit(events.AttemptFenced{
		Action: a.ID, Tool: a.Tool, Attempt: a.Attempts + 1, Incarnation: d.s.incarnation,
		Timeout: cfg.Timeout, MaxAttempts: cfg.MaxAttempts, SettleWithin: cfg.SettleWithin,
		Deadline: d.at(cfg.Timeout),
	})
}

// lose decides a lost attempt from its recorded fence alone: a replay while
// the recorded budget allows one (re-asking approval first when reask is
// set and the action is approved: its runner was lost, not handed off),
// else the settle window after a timeout, else an uncertain effect.
func (d *decider) lose(a Action, cause, evidence string, reask bool) {
	f := a.Attempt
	ev := events.AttemptLost{Action: a.ID, Attempt: f.Attempt, Cause: cause, Evidence: evidence}
	switch {
	case currentClosed(a):
		// Closed before any worker claimed it: it did not act, so it
		// spends no replay and loses no approval (docs/semantics.md §8,
		// "Closing an attempt").
		ev.Next = events.NextReplay
		ev.Evidence = evidence + "; " + d.closedHow(a, "closed before any worker claimed it") + ": it did not act"
	case spent(a) < f.MaxAttempts:
		ev.Next = events.NextReplay
		if reask && a.Approved {
			ev.Next = events.NextReapprove
		}
	case cause == events.CauseTimedOut && f.SettleWithin > 0:
		ev.Next = events.NextSettle
		ev.SettleBy = d.at(f.SettleWithin)
	default:
		ev.Next = events.NextUncertain
		if f.MaxAttempts > 1 {
			ev.Evidence = fmt.Sprintf("%s; replay budget exhausted (%d of %d attempts)", evidence, spent(a), f.MaxAttempts)
		}
	}
	d.emit(ev)
	if ev.Next == events.NextReapprove {
		req := a.Request.Requirement
		d.ask(a.ID, req, events.AskRecovery)
	}
}

// stop records a running attempt stopped by cancellation or the run's end:
// a settling tool waits for its settlement, anything else is uncertain.
func (d *decider) stop(a Action, why string) {
	f := a.Attempt
	ev := events.AttemptLost{Action: a.ID, Attempt: f.Attempt, Cause: events.CauseStopped, Evidence: "stopped while running: " + why, Next: events.NextUncertain}
	if currentClosed(a) {
		// Its body never started, but an earlier attempt's may have
		// (an action whose every attempt was closed ended not_started).
		ev.Evidence = fmt.Sprintf("%s before attempt %d started (%s); an earlier attempt may have acted", why, f.Attempt, d.closedHow(a, "closed unclaimed"))
	} else if f.SettleWithin > 0 && why == "cancelled" {
		ev.Next = events.NextSettle
		ev.SettleBy = d.at(f.SettleWithin)
	}
	d.emit(ev)
}

func (d *decider) report(c Report) error {
	a, ok := d.s.Action(c.Action)
	if !ok {
		d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: events.RefusedForeign})
		return nil
	}
	if slices.Contains(a.Closed, c.Attempt) {
		// Closed before any worker claimed it: no body of it ran, so no
		// report of it is current (a worker never reports one).
		d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: events.RefusedStale})
		return nil
	}
	switch c.Outcome {
	case events.OutcomeOutput:
		if !json.Valid(c.Content) {
			return weft.Errorf(weft.CodeInvalidRequest, "report of %s attempt %d: content is not JSON", c.Action, c.Attempt)
		}
	case events.OutcomeExplain, events.OutcomeUncertain:
	case events.OutcomeOversize:
		if limit := d.s.start.Limits.MaxResultBytes; c.Bytes <= limit {
			return weft.Errorf(weft.CodeInvalidRequest, "oversize report of %s attempt %d: bytes %d is not over max result bytes %d", c.Action, c.Attempt, c.Bytes, limit)
		}
	default:
		return weft.Errorf(weft.CodeInvalidRequest, "report outcome %q", c.Outcome)
	}
	size, oversize := resultBytes(c.Outcome, c.Content, c.Message), false
	switch c.Outcome {
	case events.OutcomeOutput, events.OutcomeExplain:
		oversize = size > d.s.start.Limits.MaxResultBytes
	case events.OutcomeOversize:
		size, oversize = c.Bytes, true
	}
	if c.Attempt != a.Attempts || a.Attempts == 0 {
		d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: attemptMismatch(a, c.Attempt)})
		return nil
	}
	switch a.State {
	case ActionRunning, ActionSettling:
		if d.s.finished {
			break
		}
		if oversize {
			d.emit(events.AttemptReported{Action: c.Action, Attempt: c.Attempt, Outcome: events.OutcomeOversize, Bytes: size})
			if d.s.cancelling {
				// The action is faulted, but a run being cancelled always
				// ends cancelled (docs/semantics.md §7): advance finishes it
				// once nothing is in flight.
				return nil
			}
			d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonOutputEncodingFailed, Action: c.Action, Setting: "max_result_bytes", Limit: d.s.start.Limits.MaxResultBytes, Used: size}, events.NotStartedRunFinished)
			return nil
		}
		d.emit(events.AttemptReported{Action: c.Action, Attempt: c.Attempt, Outcome: c.Outcome, Content: c.Content, Message: c.Message, Evidence: c.Evidence})
		return nil
	case ActionUncertain:
		// A late report of the attempt whose loss made the action uncertain
		// is treated as a settlement: one definite result is accepted.
		// (Not when the body itself reported the action uncertain: a
		// second report of that attempt is a duplicate.)
		lostAttempt := a.Outcome != events.OutcomeUncertain
		if !d.s.finished && lostAttempt && c.Outcome != events.OutcomeUncertain {
			if oversize {
				// The model never reads a result over max result bytes
				// (docs/semantics.md §2): it cannot settle the action, which
				// stays uncertain for a person to reconcile.
				d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: events.RefusedResultTooLarge})
				return nil
			}
			d.emit(events.SettlementAccepted{Action: c.Action, Attempt: c.Attempt, Outcome: c.Outcome, Content: c.Content, Message: c.Message, Summary: "late report of attempt " + fmt.Sprint(c.Attempt), Late: true})
			return nil
		}
	}
	reason := events.RefusedDuplicate
	if d.s.finished {
		reason = events.RefusedRunFinished
	} else if !a.State.Ended() && a.State != ActionUncertain {
		reason = events.RefusedNotRunning
	}
	d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: reason})
	return nil
}

// resultBytes is the size of the encoded tool result the model reads for a
// definite outcome (docs/semantics.md §2, §3): the output's own encoding, or
// {"error": message} for an Explain. Any other outcome has none (0).
func resultBytes(outcome string, content json.RawMessage, message string) int64 {
	switch outcome {
	case events.OutcomeOutput:
		return int64(len(content))
	case events.OutcomeExplain:
		return int64(len(ExplainContent(message)))
	}
	return 0
}

// attemptMismatch is the ReportRefused reason of a report or loss notice
// naming an attempt other than the action's current one (docs/semantics.md §5):
// foreign for an attempt that was never fenced (premature: numbered
// after the current one, or below 1), stale for an earlier attempt.
func attemptMismatch(a Action, attempt int) string {
	if attempt < 1 || attempt > a.Attempts {
		return events.RefusedForeign
	}
	return events.RefusedStale
}

func (d *decider) lost(c Lost) error {
	if d.s.finished {
		return d.runEnded()
	}
	a, ok := d.s.Action(c.Action)
	if !ok {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q", d.s.run, c.Action)
	}
	switch c.Cause {
	case events.CauseCrashed, events.CauseWorkerLost, events.CauseTimedOut:
	default:
		return weft.Errorf(weft.CodeInvalidRequest, "lost cause %q", c.Cause)
	}
	if c.Attempt != a.Attempts || a.Attempts == 0 {
		d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: attemptMismatch(a, c.Attempt)})
		return nil
	}
	if a.State != ActionRunning || (currentClosed(a) && !d.closedNow[a.ID]) {
		// A closed attempt's body never started: a loss notice of it
		// (a worker that does not know closed claims) is not current
		// once the close is recorded. One closed by this very decision
		// (Closing{Then: Lost}: a timed_out notice of a worker that got
		// the task after its deadline, unclaimed; a runner recording a
		// close whose own decision was lost) is lost: the closed attempt
		// is replayed.
		d.emit(events.ReportRefused{Action: c.Action, Attempt: c.Attempt, Reason: events.RefusedStale})
		return nil
	}
	ev := c.Evidence
	if ev == "" {
		ev = c.Cause
	}
	d.lose(a, c.Cause, ev, false)
	return nil
}

func (d *decider) timerFired(c TimerFired) error {
	if d.s.finished {
		return nil
	}
	switch c.Kind {
	case TimerToolTimeout:
		a, ok := d.s.Action(c.Action)
		if ok && a.State == ActionRunning && a.Attempts == c.Attempt && a.Attempt.Deadline != nil && !d.now.Before(*a.Attempt.Deadline) {
			d.lose(a, events.CauseTimedOut, fmt.Sprintf("attempt %d timed out after %d ms", a.Attempts, a.Attempt.Timeout), false)
		}
	case TimerSettleWindow:
		a, ok := d.s.Action(c.Action)
		if ok && a.State == ActionSettling && a.Attempts == c.Attempt && !d.now.Before(a.SettleBy) {
			d.emit(events.ActionUncertain{Action: a.ID, Evidence: fmt.Sprintf("%s; no settlement within %d ms", a.Detail, a.Attempt.SettleWithin)})
		}
	case TimerApprovalExpiry, TimerModelRetry:
		// Applied by expireDue and advance.
	default:
		return weft.Errorf(weft.CodeInvalidRequest, "timer kind %q", c.Kind)
	}
	return nil
}

// ---- settlement and reconciliation

func (d *decider) settle(c Settle) error {
	a, ok := d.s.Action(c.Action)
	if !ok {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q", d.s.run, c.Action)
	}
	switch c.Outcome {
	case events.OutcomeOutput:
		if !json.Valid(c.Content) {
			return weft.Errorf(weft.CodeInvalidContent, "settlement content is not JSON")
		}
	case events.OutcomeExplain, events.OutcomeUncertain:
	default:
		return weft.Errorf(weft.CodeInvalidRequest, "settlement outcome %q", c.Outcome)
	}
	switch a.State {
	case ActionSucceeded, ActionToolFailed, ActionReconciled, ActionFaulted:
		return &weft.Error{Code: weft.CodeAlreadyRecorded, Reason: string(a.State), Message: fmt.Sprintf("action %s already has its result", a.ID)}
	case ActionRunning:
		return &weft.Error{Code: weft.CodeNotAwaited, Reason: ReasonBodyRunning, Message: fmt.Sprintf("action %s: the body may still return; wait for its report", a.ID)}
	}
	refuse := func(why string) error {
		d.emit(events.SettlementRefused{Action: a.ID, Reason: string(weft.CodeNotAwaited), Summary: c.Summary})
		return &weft.Error{Code: weft.CodeNotAwaited, Reason: why, Message: fmt.Sprintf("action %s: no settlement is awaited; a person must reconcile", a.ID)}
	}
	if d.s.finished {
		return refuse("run_finished")
	}
	if n, limit := resultBytes(c.Outcome, c.Content, c.Message), d.s.start.Limits.MaxResultBytes; n > limit &&
		(a.State == ActionSettling || a.State == ActionUncertain) {
		// The model never reads a result over max result bytes, be it an
		// output or an Explain's {"error": message}: the settlement is
		// refused and a person reconciles (docs/semantics.md §2).
		d.emit(events.SettlementRefused{Action: a.ID, Reason: string(weft.CodeNotAwaited), Summary: c.Summary})
		what := "content"
		if c.Outcome == events.OutcomeExplain {
			what = "encoded error"
		}
		return &weft.Error{Code: weft.CodeNotAwaited, Reason: "result_too_large",
			Message: fmt.Sprintf("action %s: the settlement's %s of %d bytes is over max result bytes %d; a person must reconcile", a.ID, what, n, limit)}
	}
	switch a.State {
	case ActionSettling:
		d.emit(events.SettlementAccepted{Action: a.ID, Attempt: a.Attempts, Outcome: c.Outcome, Content: c.Content, Message: c.Message, Summary: c.Summary})
		return nil
	case ActionUncertain:
		if c.Outcome == events.OutcomeUncertain {
			return refuse("uncertain")
		}
		d.emit(events.SettlementAccepted{Action: a.ID, Attempt: a.Attempts, Outcome: c.Outcome, Content: c.Content, Message: c.Message, Summary: c.Summary, Late: true})
		return nil
	}
	return refuse(string(a.State))
}

func (d *decider) reconcile(c Reconcile) error {
	if c.Stored && !d.s.finished {
		return weft.Errorf(weft.CodeRunActive, "run %s is live: use reconcile", d.s.run)
	}
	if !c.Stored && d.s.finished {
		return d.runEnded()
	}
	a, ok := d.s.Action(c.Action)
	if !ok {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q", d.s.run, c.Action)
	}
	if a.State != ActionUncertain {
		return &weft.Error{Code: weft.CodeNotReconcilable, Reason: string(a.State), Message: fmt.Sprintf("action %s is %s, not uncertain", a.ID, a.State)}
	}
	kind, err := ContentKind(c.Content)
	if err != nil {
		return err
	}
	if n, limit := int64(len(c.Content)), d.s.start.Limits.MaxResultBytes; !c.Stored && n > limit {
		// The model reads it on its next turn: the same bound as a tool
		// result (docs/semantics.md §2). The stored form is read by no model.
		return weft.Errorf(weft.CodePayloadTooLarge, "reconciliation content of %d bytes is over max result bytes %d", n, limit)
	}
	d.emit(events.Reconciled{Action: a.ID, Kind: kind, Content: c.Content, By: c.By, Stored: c.Stored, Reason: c.Reason, Identity: c.Identity, Proof: c.Proof})
	return nil
}

// markedNotStarted records the late evidence of c (MarkedNotStarted): the
// worker's claim a close found was marked not started by its worker, so
// the attempt did not act; the action ends not_started when no attempt it
// had may have acted (docs/semantics.md §8 "Closing an attempt").
func (d *decider) markedNotStarted(c MarkedNotStarted) error {
	a, ok := d.s.Action(c.Action)
	if !ok {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q", d.s.run, c.Action)
	}
	if a.State != ActionUncertain {
		return &weft.Error{Code: weft.CodeNotReconcilable, Reason: string(a.State), Message: fmt.Sprintf("action %s is %s, not uncertain: the late mark of attempt %d changes nothing", a.ID, a.State, c.Attempt)}
	}
	if c.Attempt != a.Attempts || c.Incarnation != a.Attempt.Incarnation || !currentClaimed(a) || currentClosed(a) || c.Worker == "" || c.Why == "" {
		return weft.Errorf(weft.CodeInvalidRequest, "run %s: action %s attempt %d incarnation %d is not a latest attempt whose close found a claim not yet marked", d.s.run, c.Action, c.Attempt, c.Incarnation)
	}
	if a.ClaimToken == "" || c.Token != a.ClaimToken {
		// docs/semantics.md §5 rule 1: only the claim the close found may
		// say it did not act; another claim under the same key (created
		// after that one expired) or a close recorded without its token
		// leaves the action uncertain.
		return weft.Errorf(weft.CodeInvalidRequest, "run %s: action %s attempt %d: the marked claim is not the claim its close found", d.s.run, c.Action, c.Attempt)
	}
	// With no other attempt that may have acted it ends the action
	// not_started, as a close that won does on a cancel or a run's end; on
	// a live run the model reads that the call did not run (Action.Content,
	// evolve) and its batch is answered: advance requests the next turn in
	// this decision (docs/adr/0023-closing-attempts.md, "A late mark on a
	// live run").
	ended := spent(a) == 1
	d.emit(events.AttemptNotStarted{Action: a.ID, Attempt: c.Attempt, Incarnation: c.Incarnation, Worker: c.Worker, Why: c.Why, By: c.By, Ended: ended})
	return nil
}

// LateMarks lists the attempts of s whose claims a runner reads for a mark
// its worker wrote after the decision that read the claim
// (MarkedNotStarted): the latest attempt of every uncertain action whose
// close found a worker's claim not yet recorded marked, named by its fence; only is an action ID to
// look at alone ("" for every action). An action no longer uncertain (a
// person reconciled it) is not listed: its late mark changes nothing; nor
// is one whose close was recorded without the found claim's token (a log
// written before events.AttemptClosed had it): no mark is accepted there.
func LateMarks(s State, only string) []events.AttemptFenced {
	var out []events.AttemptFenced
	for _, a := range s.actions {
		if (only == "" || a.ID == only) && a.State == ActionUncertain && currentClaimed(a) && !currentClosed(a) && a.ClaimToken != "" {
			out = append(out, a.Attempt)
		}
	}
	return out
}

// ContentKind classifies reconciliation content (docs/semantics.md §10: the
// tool's encoded output, {"error": m} or {"unconfirmed": note}):
// {"unconfirmed": note} with note a string and no other member is
// events.ReconciledUnconfirmed, an object with a non-null "error" member is
// ReconciledError, any other JSON value but null is ReconciledOutput.
// Content that is not exactly one JSON value, the JSON null (the model
// would read null as the result) and an unconfirmed note that is not a
// string are refused invalid_content.
func ContentKind(content json.RawMessage) (string, error) {
	if len(content) == 0 || !json.Valid(content) {
		return "", weft.Errorf(weft.CodeInvalidContent, "reconciliation content is not a JSON value")
	}
	if string(bytes.TrimSpace(content)) == "null" {
		return "", weft.Errorf(weft.CodeInvalidContent, `reconciliation content null is no output: give the tool's encoded output, {"error": message} or {"unconfirmed": note}`)
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(content, &obj) == nil && obj != nil {
		if note, ok := obj["unconfirmed"]; ok && len(obj) == 1 {
			var s string
			if json.Unmarshal(note, &s) != nil || string(bytes.TrimSpace(note)) == "null" {
				return "", weft.Errorf(weft.CodeInvalidContent, `reconciliation content {"unconfirmed": note}: the note must be a string`)
			}
			return events.ReconciledUnconfirmed, nil
		}
		if m, ok := obj["error"]; ok && string(bytes.TrimSpace(m)) != "null" {
			return events.ReconciledError, nil
		}
	}
	return events.ReconciledOutput, nil
}

// ---- cancellation, hand-off, recovery

func (d *decider) cancel(c Cancel) error {
	if d.s.finished || d.s.cancelling {
		return d.endedOrCancelling()
	}
	d.emit(events.CancelRequested{By: c.By, Reason: c.Reason, Identity: c.Identity, Proof: c.Proof})
	d.notStarted(events.NotStartedCancelled, "cancelled")
	for _, a := range d.s.actions {
		if a.State == ActionRunning {
			d.stop(a, "cancelled")
		}
	}
	return nil
}

func (d *decider) handOff(c HandOff) error {
	if d.s.finished {
		return d.runEnded()
	}
	if d.s.handedOff || c.Runner != d.s.runner {
		// Handed off already, or driven by another runner since (a
		// takeover landed first): nothing of this runner's to hand off.
		return nil
	}
	ev := events.RunHandedOff{Runner: c.Runner, Incarnation: d.s.incarnation}
	if c.ModelNotCalled && d.s.modelPending {
		ev.Uncalled = d.s.turn
	}
	d.emit(ev)
	return nil
}

// RecoveryCause is the cause of a takeover of s, as its log says:
// events.RecoveredHandedOff after a hand-off, events.RecoveredIdle when s
// waits only for people (Idle: nothing in flight, nothing is recovered),
// events.RecoveredRunnerLost otherwise. Decide never refuses
// Recover{Cause: RecoveryCause(s)} on an unfinished run s for a reason of
// the takeover's own, at any time: due expiries are applied after it.
func RecoveryCause(s State) string {
	switch {
	case s.handedOff:
		return events.RecoveredHandedOff
	case Idle(s):
		return events.RecoveredIdle
	}
	return events.RecoveredRunnerLost
}

func (d *decider) recover(c Recover) error {
	if d.s.finished {
		return d.runEnded()
	}
	graceful := d.s.handedOff
	switch c.Cause {
	case events.RecoveredRunnerLost:
		if graceful {
			return weft.Errorf(weft.CodeInvalidRequest, "recovery cause %s: run %s was handed off (cause %s)", c.Cause, d.s.run, events.RecoveredHandedOff)
		}
	case events.RecoveredHandedOff:
		if !graceful {
			return weft.Errorf(weft.CodeInvalidRequest, "recovery cause %s: run %s was not handed off (cause %s)", c.Cause, d.s.run, events.RecoveredRunnerLost)
		}
	case events.RecoveredIdle:
		if !Idle(d.s) {
			return weft.Errorf(weft.CodeInvalidRequest, "recovery cause %s: run %s is not idle (it has work in flight, or was handed off)", c.Cause, d.s.run)
		}
	default:
		return weft.Errorf(weft.CodeInvalidRequest, "recovery cause %q", c.Cause)
	}
	switch c.Then.(type) {
	case Start, HandOff, Recover, Closing:
		return weft.Errorf(weft.CodeInvalidRequest, "a takeover is not decided for a %s command", c.Then.CommandName())
	}
	previous := d.s.runner
	d.emit(events.RunRecovered{Runner: c.Runner, Incarnation: d.s.incarnation + 1, Previous: previous, Cause: c.Cause})
	for _, a := range d.s.actions {
		switch {
		case a.State == ActionRunning && graceful:
			// The drain window closed while the body ran: the attempt is
			// lost with its incarnation, but nothing was lost that a
			// person answered (docs/semantics.md §8): no approval is re-asked.
			d.lose(a, events.CauseRunnerLost, fmt.Sprintf("runner %s handed the run off while attempt %d ran (incarnation %d)", previous, a.Attempts, a.Attempt.Incarnation), false)
		case a.State == ActionRunning:
			d.lose(a, events.CauseRunnerLost, fmt.Sprintf("runner %s lost while attempt %d ran (incarnation %d)", previous, a.Attempts, a.Attempt.Incarnation), true)
		case a.State == ActionQueued && a.Approved && !graceful:
			// Approved but not started at a loss: the approval is asked
			// again. A hand-off keeps it: its reviewer is in the log.
			d.ask(a.ID, a.Request.Requirement, events.AskRecovery)
		}
	}
	if d.s.modelPending {
		// Issued again by advance, after c.Then (docs/semantics.md §7).
		d.modelLost = true
		d.recall = graceful && d.s.uncalled == d.s.turn
	}
	if !d.s.cancelling {
		// Expiries that fell due meanwhile are applied after the
		// takeover, at the new incarnation: judged before it, they could
		// change the run the takeover's cause was chosen from
		// (docs/semantics.md §8, "A run can always be answered").
		d.expireDue()
	}
	if c.Then != nil {
		return d.command(c.Then)
	}
	return nil
}

// Recovered returns the state of s after the takeover r alone (r.Then is
// ignored), without recording anything: a runner pre-checks a command that
// takes a run over on it (CheckAnswer, the proof's requirement, the
// arguments the policy is re-run on) before it decides Recover{Then:
// command} on s. The error is Decide's refusal of the recovery.
func Recovered(s State, r Recover, now time.Time) (State, error) {
	r.Then = nil
	evs, err := Decide(s, r, now)
	if err != nil {
		return s, err
	}
	s = s.Clone()
	for _, e := range evs {
		s.evolve(events.Recorded{Run: s.run, Version: s.version + 1, At: now, Event: e})
	}
	return s, nil
}

// requestTurnRecovery re-issues a model call lost with its runner: the lost
// call spent its turn.
func (d *decider) requestTurnRecovery() {
	l := d.s.start.Limits
	if o, none := d.noTurnLeft(); none {
		d.finish(o, events.NotStartedBudgetExhausted)
		return
	}
	d.emit(events.ModelRequested{Turn: d.s.turn + 1, Incarnation: d.s.incarnation, Why: events.TurnRecovery, Deadline: d.at(l.ModelTimeout)})
}

// ---- follow-ons

// notStarted ends every live action that never started (ActionsNotStarted
// with reason), because the run is cancelled or finishes (why, for the
// evidence). An action waiting to start again after an attempt that may
// have acted ends uncertain instead (docs/semantics.md §5).
func (d *decider) notStarted(reason, why string) {
	var ids []string
	var attempted []Action
	for _, a := range d.s.actions {
		switch a.State {
		case ActionRequested, ActionAwaitingApproval, ActionQueued:
			if hasUnresultedFence(a) {
				attempted = append(attempted, a)
				continue
			}
			ids = append(ids, a.ID)
		case ActionRunning, ActionUncertain:
			if a.Attempts > 0 && spent(a) == 0 && markChecked(a) {
				// Every attempt was closed before any worker claimed
				// it, or marked not started by its worker: no body ever
				// started (docs/semantics.md §8). Uncertain so only in a
				// log whose late mark on a live run was recorded as
				// evidence alone (before such a mark ended the action).
				ids = append(ids, a.ID)
			}
		}
	}
	if len(ids) > 0 {
		d.emit(events.ActionsNotStarted{Actions: ids, Reason: reason})
	}
	for _, a := range attempted {
		waiting := " while waiting to replay"
		if a.State == ActionAwaitingApproval {
			waiting = " while its approval was asked again"
		}
		d.endUncertain(a, why+waiting)
	}
}

// hasUnresultedFence reports whether a waits to start again (queued for a
// replay, or asking its approval again) after a fenced attempt that ended
// without a result of its own (lost, crashed, timed out): that attempt may
// have acted. Every path that would end such an action as if it never
// started — not_started, rejected, expired, denied — ends it uncertain
// instead (endUncertain): an attempted action is never reported as not
// having happened (docs/semantics.md §5).
func hasUnresultedFence(a Action) bool {
	return spent(a) > 0 && (a.State == ActionQueued || a.State == ActionAwaitingApproval)
}

// spent is the number of a's attempts that may have acted: its fenced
// attempts less those closed before any worker claimed them (AttemptClosed,
// docs/semantics.md §8 "Closing an attempt"). It is what the replay budget
// counts.
func spent(a Action) int { return a.Attempts - len(a.Closed) }

// markChecked reports whether a's late mark, if it is uncertain, was
// checked against the token of the claim the close found: only the latest
// attempt of an uncertain action is ever marked, and ClaimToken is that
// close's found token. A log written before marks were bound to that token
// recorded some without it; such a mark may come from another claim under
// the key, whose holder may have run the body, so it proves nothing
// (docs/adr/0023-closing-attempts.md, "A late mark on a live run").
func markChecked(a Action) bool {
	return a.State != ActionUncertain || a.ClaimToken != ""
}

// closedHow says how a's latest attempt, which the log records closed, was
// closed: on a claim its worker marked not started, when this decision
// records that close (events.AttemptClosed NotStarted), else unclaimed.
func (d *decider) closedHow(a Action, unclaimed string) string {
	if m := d.markedNow[a.ID]; m != nil {
		return fmt.Sprintf("claimed by worker %s, which marked it not started (%s)", m.Worker, m.Why)
	}
	return unclaimed
}

// currentClosed reports whether a's latest fenced attempt was closed before
// any worker claimed it.
func currentClosed(a Action) bool {
	return a.Attempts > 0 && slices.Contains(a.Closed, a.Attempts)
}

// currentClaimed reports whether a close of a's latest fenced attempt found
// a worker's claim: the attempt may have acted and is never closed again.
func currentClaimed(a Action) bool {
	return a.Attempts > 0 && slices.Contains(a.Claimed, a.Attempts)
}

// closable reports whether a's latest fence may be closed: the action is
// running it, or waits to start again after it.
func closable(a Action) bool {
	switch a.State {
	case ActionRunning, ActionQueued, ActionAwaitingApproval:
		return a.Attempts > 0
	}
	return false
}

// checkCloses refuses, with invalid_request, a Closing whose closes name an
// attempt s does not know as a closable latest fence, and a Closing of a
// Start or of another Closing.
func checkCloses(s State, c Closing) error {
	switch c.Then.(type) {
	case nil, Start, Closing:
		return weft.Errorf(weft.CodeInvalidRequest, "closes are not decided with a %T command", c.Then)
	}
	for _, cl := range c.Closes {
		a, ok := s.Action(cl.Action)
		if !ok || !closable(a) || cl.Attempt != a.Attempts || cl.Incarnation != a.Attempt.Incarnation || (cl.Closed && cl.Claimed) {
			return weft.Errorf(weft.CodeInvalidRequest, "run %s: a close of action %q attempt %d incarnation %d names no attempt the run could close", s.run, cl.Action, cl.Attempt, cl.Incarnation)
		}
	}
	return nil
}

// recordCloses records every close of c that won or found a worker's
// claim and the log does not record yet.
func (d *decider) recordCloses(c Closing) {
	for _, cl := range c.Closes {
		a, _ := d.s.Action(cl.Action)
		if (!cl.Closed && !cl.Claimed) || currentClosed(a) || currentClaimed(a) {
			continue
		}
		by := c.By
		if cl.By != "" && cl.Closed {
			by = cl.By
		}
		ev := events.AttemptClosed{Action: cl.Action, Attempt: cl.Attempt, Incarnation: cl.Incarnation, By: by, Why: cl.Why, Claimed: !cl.Closed}
		if cl.Closed {
			ev.NotStarted = cl.NotStarted
		} else {
			ev.ClaimWorker, ev.ClaimToken = cl.ClaimWorker, cl.ClaimToken
		}
		d.emit(ev)
		if cl.Closed {
			if d.closedNow == nil {
				d.closedNow = map[string]bool{}
			}
			d.closedNow[cl.Action] = true
			if cl.NotStarted != nil {
				if d.markedNow == nil {
					d.markedNow = map[string]*events.ClosedNotStarted{}
				}
				d.markedNow[cl.Action] = cl.NotStarted
			}
		}
	}
}

// endUncertain ends a, which has an unresulted fence (a as it was before
// the decision that ends it), uncertain: the evidence names what ended it
// (what) and the attempt that may have acted.
func (d *decider) endUncertain(a Action, what string) {
	lost := a.Outcome
	if a.Detail != "" && a.Detail != a.Outcome {
		lost += ": " + a.Detail
	}
	d.emit(events.ActionUncertain{Action: a.ID, Evidence: fmt.Sprintf("%s; attempt %d may have acted (%s)", what, a.Attempts, lost)})
}

// parenthesized returns " (s)", or "" for an empty s.
func parenthesized(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// finish ends the run with o: actions that never started end not_started
// (reason), bodies still running are stopped (their effect is uncertain)
// and open settle windows close.
func (d *decider) finish(o events.Outcome, reason string) {
	why := "the run finished " + o.Kind
	if o.Reason != "" {
		why += "(" + o.Reason + ")"
	}
	d.notStarted(reason, why)
	for _, a := range d.s.actions {
		switch a.State {
		case ActionRunning:
			d.stop(a, "the run finished "+o.Kind)
		case ActionSettling:
			d.emit(events.ActionUncertain{Action: a.ID, Evidence: a.Detail + "; the run finished " + o.Kind})
		case ActionDelegated:
			d.detach(a, o)
		}
	}
	d.emit(events.RunFinished{Outcome: o})
}

// advance emits what the state calls for after a decision.
func (d *decider) advance() {
	s := &d.s
	if s.finished {
		return
	}
	if s.cancelling {
		for _, a := range s.actions {
			if a.State == ActionRunning || a.State == ActionSettling || a.State == ActionDelegated {
				return
			}
		}
		d.emit(events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCancelled}})
		return
	}
	if s.handedOff {
		return
	}
	if d.modelLost {
		// A lost call is requested again even on a paused run: Pending
		// only records its reply until the resume (docs/semantics.md §13).
		d.modelLost = false
		if s.modelPending {
			if d.recall {
				// Never called: call it now under the same turn.
				d.emit(events.ModelRequested{Turn: s.turn, Incarnation: s.incarnation, Why: events.TurnRecovery, Deadline: d.at(s.start.Limits.ModelTimeout)})
			} else {
				d.requestTurnRecovery()
			}
			if s.finished {
				return
			}
		}
	}
	if s.paused {
		// Nothing is fenced and no turn is requested until the resume
		// (docs/semantics.md §13).
		return
	}
	running := 0
	for _, a := range s.actions {
		if a.State == ActionRunning {
			running++
		}
	}
	for i := range s.actions {
		a := s.actions[i]
		switch {
		case a.State != ActionQueued:
		case a.Agent != nil:
			// A delegation allowed while paused: its child starts now,
			// holding no slot (delegate).
			d.startChild(a.ID)
		case running < s.start.Limits.MaxConcurrency:
			d.fence(a)
			running++
		}
	}
	if s.modelPending {
		return
	}
	if s.correctionDue() {
		d.requestTurn(events.TurnCorrection)
		return
	}
	if s.retryAt != nil {
		if !d.now.Before(*s.retryAt) {
			d.requestTurn(events.TurnRetry)
		}
		return
	}
	if s.batch != 0 && s.turn == s.batch && s.batchVisible() {
		d.requestTurn(events.TurnToolResults)
	}
}

// batchVisible reports whether every action of the current batch ended
// model-visible.
func (s *State) batchVisible() bool {
	for _, a := range s.actions {
		if a.Turn == s.batch && !a.ModelVisible() {
			return false
		}
	}
	return true
}
