package aggregate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// Sub-agent delegation (docs/semantics.md §1–§7, docs/adr/0007): a call whose
// tool is a sub-agent is validated like any call, then checked against the
// run's max children, max depth and the family turn budget BEFORE policy
// (over a bound: CallValidated outcome limit_reached, the model sees the
// error, the run continues), then the policy decides with target agent;
// once allowed (at once or after an approval) the action is delegated
// (ChildStarted; on a paused run queued until the resume, delegate) to a
// child run whose id ChildRunID derives from the parent run and action.
// The child's outcome comes back as ChildSettle.

// ChildRunID is the id of the child run that action of run delegates to:
// "child-" and the hex SHA-256 of the length-prefixed run and action (70
// characters of the run-id grammar). It is deterministic, so starting the
// child is idempotent and two runners derive the same id.
func ChildRunID(run, action string) string {
	h := sha256.Sum256([]byte(strconv.Itoa(len(run)) + ":" + run + strconv.Itoa(len(action)) + ":" + action))
	return "child-" + hex.EncodeToString(h[:])
}

// DelegationLimits checks the delegations of the tool request of turn
// against the run's bounds, in call order, before policy: it returns the
// bound each call over a bound reaches ("max_depth N", "max_children N" or
// "family_limit N"), by call id. isDelegation reports whether a call (by
// call id) is a valid call of a sub-agent. A runner calls it before it
// evaluates the policy (calls over a bound never reach the policy);
// ResolveCalls decides the same.
//
// Max depth: a run at depth d (0 for a root) may delegate when d+1 <= its
// max depth. Max children: the run's delegations that passed this check
// and have not ended without starting their child (denied, rejected,
// not_started) — a child slot is reserved at the check and never given
// back once the child started. Family: the child would get the family
// turns left minus one (the turn the parent needs to read its result);
// fewer than one is over the bound.
func DelegationLimits(s State, turn int64, isDelegation func(callID string) bool) map[string]string {
	l := s.start.Limits
	reserved := 0
	for _, a := range s.actions {
		if a.Agent != nil && a.Turn != turn && holdsChildSlot(a.State) {
			reserved++
		}
	}
	familyLeft := s.FamilyBudget() - s.FamilyUsed() - 1
	out := map[string]string{}
	for _, a := range s.actions {
		if a.Turn != turn || !isDelegation(a.CallID) {
			continue
		}
		switch {
		case s.Depth()+1 > s.MaxDepth():
			out[a.CallID] = fmt.Sprintf("max_depth %d", s.MaxDepth())
		case reserved >= l.MaxChildren:
			out[a.CallID] = fmt.Sprintf("max_children %d", l.MaxChildren)
		case familyLeft < 1:
			out[a.CallID] = fmt.Sprintf("family_limit %d", s.FamilyBudget())
		default:
			reserved++
		}
	}
	return out
}

// MaxDepth is the depth bound of the run's delegations: its own max depth,
// or for a child run the family's bound when that is smaller.
func (s State) MaxDepth() int {
	m := s.start.Limits.MaxDepth
	if p := s.start.Parent; p != nil && p.MaxDepth > 0 {
		m = min(m, p.MaxDepth)
	}
	return m
}

func holdsChildSlot(st ActionState) bool {
	switch st {
	case ActionLimitReached, ActionDenied, ActionRejected, ActionNotStarted, ActionInvalidArguments, ActionUnknownTool:
		return false
	}
	return true
}

// noTurnLeft returns the budget outcome when the run may not request
// another turn: its own max turns (turn_limit) or the family turn budget
// (family_limit: its turns plus its settled children's reach the budget).
// A restarted run counts only its own turns (OwnTurns).
func (d *decider) noTurnLeft() (events.Outcome, bool) {
	l := d.s.start.Limits
	if own := d.s.OwnTurns(); own >= l.MaxTurns {
		return events.Outcome{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonTurnLimit, Limit: l.MaxTurns, Used: own}, true
	}
	if b, used := d.s.FamilyBudget(), d.s.FamilyUsed(); used >= b {
		return events.Outcome{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonFamilyLimit, Limit: b, Used: used}, true
	}
	return events.Outcome{}, false
}

// DelegationInput is the child run's input from a delegation's arguments
// {"input": text}; arguments of another shape are passed as they are.
func DelegationInput(args json.RawMessage) string {
	var in struct {
		Input *string `json:"input"`
	}
	if json.Unmarshal(args, &in) == nil && in.Input != nil {
		return *in.Input
	}
	return string(args)
}

// delegationConfig is the tool configuration a delegation is queued with:
// it has no body timeout (the child run's limits bound it) and no attempts
// of its own to replay.
var delegationConfig = events.ToolConfig{Timeout: events.Infinite, MaxAttempts: 1}

// delegate starts the child run of an action the policy allowed (why is
// events.QueuedAllowed or QueuedApproved). On a paused run, whose child
// would call its model, it queues the action instead: advance starts the
// child of a queued delegation once the run is not paused — by the resume
// (docs/semantics.md §13), also after a takeover, as the state is derived
// from the log. A cancel or a run end meanwhile ends it not_started.
func (d *decider) delegate(id, why string) {
	if d.s.paused {
		d.emit(events.ActionQueued{Action: id, Why: why, Config: delegationConfig})
		return
	}
	d.startChild(id)
}

// startChild delegates an allowed action to its child run.
func (d *decider) startChild(id string) {
	a, _ := d.s.Action(id)
	family := max(d.s.FamilyBudget()-d.s.FamilyUsed()-1, 1)
	d.emit(events.ChildStarted{Action: a.ID, Child: ChildRunID(d.s.run, a.ID), Agent: *a.Agent, Input: DelegationInput(a.CallArguments()), Depth: d.s.Depth() + 1, FamilyTurns: family, MaxDepth: d.s.MaxDepth()})
}

// ChildContent is what the model reads of a child run's outcome: the
// child's answer when it completed, else {"error":"child_<kind>",
// "outcome":<the outcome>}.
func ChildContent(o events.Outcome) json.RawMessage {
	if o.Kind == events.OutcomeCompleted && len(o.Answer) > 0 && json.Valid(o.Answer) {
		return o.Answer
	}
	b, _ := json.Marshal(struct {
		Error   string         `json:"error"`
		Outcome events.Outcome `json:"outcome"`
	}{"child_" + o.Kind, o})
	return b
}

func (d *decider) childSettle(c ChildSettle) error {
	if d.s.finished {
		return d.runEnded()
	}
	a, ok := d.s.Action(c.Action)
	if !ok || a.Child == nil || a.Child.Child != c.Child {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q delegated to %q", d.s.run, c.Action, c.Child)
	}
	if a.State != ActionDelegated {
		return &weft.Error{Code: weft.CodeAlreadyRecorded, Reason: string(a.State), Message: fmt.Sprintf("action %s already has its child's outcome", a.ID)}
	}
	if c.Outcome.Kind == "" || c.Turns < 0 {
		return weft.Errorf(weft.CodeInvalidRequest, "child outcome %q turns %d", c.Outcome.Kind, c.Turns)
	}
	content := ChildContent(c.Outcome)
	if n, limit := int64(len(content)), d.s.start.Limits.MaxResultBytes; n > limit {
		d.emit(events.ChildSettled{Action: a.ID, Child: c.Child, Outcome: c.Outcome, Turns: c.Turns, Bytes: n})
		if d.s.cancelling {
			return nil
		}
		d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonOutputEncodingFailed, Action: a.ID, Setting: "max_result_bytes", Limit: limit, Used: n}, events.NotStartedRunFinished)
		return nil
	}
	d.emit(events.ChildSettled{Action: a.ID, Child: c.Child, Outcome: c.Outcome, Turns: c.Turns, Content: content})
	return nil
}

// detach ends a delegation because the run finishes first: the runner
// cancels the child, whose outcome nobody reads.
func (d *decider) detach(a Action, o events.Outcome) {
	d.emit(events.ChildSettled{Action: a.ID, Child: a.Child.Child, Outcome: events.Outcome{Kind: events.OutcomeCancelled, Reason: "parent_finished"},
		Content: errorContent("parent_finished", o.Kind), Detached: true})
}

func (d *decider) toolMissing(c ToolMissing) error {
	if d.s.finished || d.s.cancelling {
		return d.endedOrCancelling()
	}
	a, ok := d.s.Action(c.Action)
	if !ok {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q", d.s.run, c.Action)
	}
	if a.State.Ended() || a.State == ActionUncertain || a.Agent != nil {
		return &weft.Error{Code: weft.CodeInvalidRequest, Reason: string(a.State), Message: fmt.Sprintf("action %s is %s: it needs no tool", a.ID, a.State)}
	}
	d.finish(events.Outcome{Kind: events.OutcomeFailed, Reason: events.ReasonToolChanged, Action: a.ID}, events.NotStartedRunFinished)
	return nil
}
