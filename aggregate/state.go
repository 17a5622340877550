package aggregate

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/weftrun/weft/events"
)

// ActionState is the lifecycle state of an action (docs/semantics.md §5).
type ActionState string

// The action states. Requested, AwaitingApproval, Queued, Running and
// Settling are live; Uncertain needs a person; the rest are ended.
const (
	// ActionRequested is an action the model asked for whose validation
	// and policy have not been recorded yet.
	ActionRequested ActionState = "requested"
	// ActionAwaitingApproval is an action waiting for a person's approval;
	// it holds no concurrency slot.
	ActionAwaitingApproval ActionState = "awaiting_approval"
	// ActionQueued is an allowed action waiting for a concurrency slot and
	// its fence, or a delegation allowed while its run was paused, waiting
	// for the resume to start its child run (docs/semantics.md §13).
	ActionQueued ActionState = "queued"
	// ActionRunning is an action whose current attempt is fenced: its body
	// may be running and may have touched the world.
	ActionRunning ActionState = "running"
	// ActionSettling is an action whose body was stopped (timeout,
	// cancellation) while the run waits until SettleBy for the settling
	// tool's settlement.
	ActionSettling ActionState = "settling"
	// ActionUncertain is an action whose effect may or may not have
	// happened: it waits for a person's reconciliation or one definite
	// settlement, and is never replayed.
	ActionUncertain ActionState = "uncertain"

	// ActionSucceeded is an action whose body returned an output within
	// max result bytes; Content is the encoded output.
	ActionSucceeded ActionState = "succeeded"
	// ActionToolFailed is an action whose body returned a definite failure
	// (Explain); the model reads {"error": message}.
	ActionToolFailed ActionState = "tool_failed"
	// ActionDenied is an action the policy denied; the model reads the
	// reason.
	ActionDenied ActionState = "denied"
	// ActionRejected is an action whose approval was rejected or expired.
	ActionRejected ActionState = "rejected"
	// ActionInvalidArguments is a call whose arguments did not decode with
	// the tool's input codec; it reached neither policy nor handler.
	ActionInvalidArguments ActionState = "invalid_arguments"
	// ActionUnknownTool is a call of a tool the agent does not have.
	ActionUnknownTool ActionState = "unknown_tool"
	// ActionReconciled is an uncertain action a person or a late definite
	// settlement said the truth of; Content is what the model reads.
	ActionReconciled ActionState = "reconciled"
	// ActionNotStarted is an action that ended without any attempt that
	// acted: the model never reads it, except when a worker's late mark
	// ended it on a live run (Content NotStartedContent: the call did not
	// run; Action.ModelVisible).
	ActionNotStarted ActionState = "not_started"
	// ActionFaulted is an action whose result was over max result bytes:
	// the effect happened and the run fails output_encoding_failed.
	ActionFaulted ActionState = "faulted"

	// ActionDelegated is an action that started a child run (a sub-agent
	// delegation) and waits for the child's outcome. It holds no
	// concurrency slot.
	ActionDelegated ActionState = "delegated"
	// ActionChildSettled is a delegation whose child run finished; Content
	// is what the model reads (the child's answer or an error naming its
	// outcome).
	ActionChildSettled ActionState = "child_settled"
	// ActionLimitReached is a delegation over max children, max depth or
	// the family turn budget, refused before policy.
	ActionLimitReached ActionState = "limit_reached"
)

// Ended reports whether the action can never change again (Uncertain is not
// ended: a person or a settlement ends it).
func (a ActionState) Ended() bool {
	switch a {
	case ActionSucceeded, ActionToolFailed, ActionDenied, ActionRejected, ActionInvalidArguments,
		ActionUnknownTool, ActionReconciled, ActionNotStarted, ActionFaulted, ActionChildSettled, ActionLimitReached:
		return true
	}
	return false
}

// ModelVisible reports whether an action in state a ended with content the
// model reads on its next turn. A not_started action is read only with
// content (Action.ModelVisible).
func (a ActionState) ModelVisible() bool {
	return a.Ended() && a != ActionNotStarted && a != ActionFaulted
}

// ModelVisible reports whether the model reads a's result on its next
// turn: a ended in a model-visible state, or ended not_started on a live
// run by its worker's late mark (events.AttemptNotStarted Ended), whose
// Content, NotStartedContent, tells the model the call did not run
// (docs/adr/0023-closing-attempts.md, "A late mark on a live run").
func (a Action) ModelVisible() bool {
	return a.State.ModelVisible() || a.State == ActionNotStarted && a.Detail == events.NotStartedMarked && a.Content != nil
}

// NotStartedContent is what the model reads of an action a worker's late
// mark ended not_started on a live run: a definite failure saying the call
// did not run. A restart re-renders past transcripts with it: its text is
// part of the log's meaning and does not change.
func NotStartedContent() json.RawMessage {
	return errorContent("not_started", "the call did not run: its body never started")
}

// LateMarkContent is the content the model reads of the action e marked,
// folded into a run finished or cancelling as said: NotStartedContent when
// the mark ended the action on a live run (neither finished nor being
// cancelled), else nil (no model reads it). The one definition both the
// run's fold and the run view use (docs/adr/0023-closing-attempts.md, "A
// late mark on a live run").
func LateMarkContent(e events.AttemptNotStarted, finished, cancelling bool) json.RawMessage {
	if !e.Ended || finished || cancelling {
		return nil
	}
	return NotStartedContent()
}

// Action is the read-only view of one action. Slices and raw JSON are
// shared with the State: do not modify them.
type Action struct {
	// ID is "<turn>/<call_id>"; Turn, CallID and Index (the position in the
	// model's call list) identify the call.
	ID     string `json:"id"`
	Turn   int64  `json:"turn"`
	CallID string `json:"call_id"`
	Index  int    `json:"index"`
	// Tool is the tool name the model called.
	Tool string `json:"tool"`
	// Arguments are the arguments the tool body gets: the normalized ones
	// once validated, the model's bytes before.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Edited are the arguments an approver narrowed the call to
	// (events.ApprovalAnswered.Arguments; docs/semantics.md §4, "Approving
	// narrower arguments"): the attempts and the body use them instead of
	// Arguments, which stay the model's. Nil when no approver edited it.
	Edited json.RawMessage `json:"edited,omitempty"`
	// State is the lifecycle state.
	State ActionState `json:"state"`
	// Detail is why the action is in its state: a validation detail, a deny
	// or reject reason, or the evidence of an uncertain effect.
	Detail string `json:"detail,omitempty"`
	// Content is what the model reads once the action ended model-visible.
	Content json.RawMessage `json:"content,omitempty"`
	// Config is the tool configuration recorded when the action was
	// queued; every attempt uses it.
	Config events.ToolConfig `json:"config"`
	// Approved is set while the action is authorised by an approval (an
	// approved action re-asks after a lost runner).
	Approved bool `json:"approved,omitempty"`
	// Request is the latest approval request; zero Revision when none.
	Request Approval `json:"request"`
	// Answers are every answer the action's requests got, for audit.
	Answers []events.ApprovalAnswered `json:"answers,omitempty"`
	// Attempts is the number of fenced attempts (replays = Attempts-1);
	// Attempt is the last fence.
	Attempts int                  `json:"attempts,omitempty"`
	Attempt  events.AttemptFenced `json:"attempt"`
	// Closed are the attempts whose claim the runtime closed before any
	// worker claimed them (AttemptClosed): they did not act.
	Closed []int `json:"closed,omitempty"`
	// Claimed are the attempts whose close found a worker's claim
	// (AttemptClosed with Claimed): they may have acted, and are never
	// closed again.
	Claimed []int `json:"claimed,omitempty"`
	// ClaimToken is the token of the worker's claim a close of the latest
	// attempt found (AttemptClosed ClaimToken); empty when none was found
	// or the log predates the field. Only a mark on a claim with this
	// token is recorded (MarkedNotStarted).
	ClaimToken string `json:"claim_token,omitempty"`
	// FencedAt is when the latest attempt was fenced (its AttemptFenced's
	// recorded time): its claim, taken after the fence, lives at least
	// until FencedAt plus the claims bucket's max age.
	FencedAt time.Time `json:"fenced_at"`
	// SettleBy is when the settle window closes (State Settling).
	SettleBy time.Time `json:"settle_by"`
	// Outcome is how the action's last attempt ended, for audit: the
	// body's reported outcome or the cause of its loss (a settlement does
	// not change it). For a delegation it is the child run's outcome kind.
	Outcome string `json:"outcome,omitempty"`
	// Agent is set when the action is a sub-agent delegation: the child
	// agent it starts.
	Agent *events.AgentRef `json:"agent,omitempty"`
	// Child is the child run the delegation started (ChildStarted).
	Child *events.ChildStarted `json:"child,omitempty"`
	// ReconciledKind is how a person reconciled the action (Reconciled's
	// kind: output, error or unconfirmed); empty otherwise.
	ReconciledKind string `json:"reconciled_kind,omitempty"`
	// Resolved is the final truth recorded for an action reconciled as
	// unconfirmed (events.Resolved), nil while the question is open.
	Resolved *ResolvedTruth `json:"resolved,omitempty"`
}

// Replays is the number of attempts after the first.
func (a Action) Replays() int { return max(a.Attempts-1, 0) }

// Approval is an approval request of an action.
type Approval struct {
	Revision    int                `json:"revision"`
	Requirement events.Requirement `json:"requirement"`
	// Expires is the deadline by the store's clock; zero for no expiry.
	Expires time.Time `json:"expires"`
	// Answer is "" while pending, else an events.Answer* value.
	Answer string `json:"answer,omitempty"`
}

// Pending reports whether the request still waits for its answer.
func (a Approval) Pending() bool { return a.Revision > 0 && a.Answer == "" }

// State is a run's state as folded from its events. The zero State is a run
// that does not exist yet. Read it through its methods; change it only with
// Evolve.
type State struct {
	run         string
	version     uint64
	started     bool
	start       events.RunStarted
	incarnation int
	runner      string
	handedOff   bool
	uncalled    int64 // requested turn a draining runner never called

	turn         int64      // last requested turn (turns used)
	modelPending bool       // a ModelRequested has no reply or failure yet
	modelDue     *time.Time // model deadline of the pending call
	retryAt      *time.Time // a retryable failure waits for its retry
	failures     int        // consecutive retryable model failures
	corrections  int        // typed answers rejected
	tokens       int64
	unreported   int

	childTurns int64 // turns spent by settled child runs (family budget)

	revision int // last approval revision issued in the run
	actions  []Action
	index    map[string]int
	batch    int64 // turn of the current tool batch, 0 for none

	transcript []entry

	cancelling bool
	paused     bool               // RunPaused without a later RunResumed (docs/semantics.md §13)
	forked     *events.ForkedFrom // RunForked: the run this one restarted (docs/semantics.md §14)
	// commandProofs are the signed command proofs recorded, each consumed
	// once (CheckCommandUnused).
	commandProofs []UsedCommandProof
	finished      bool
	outcome       events.Outcome
	// headBehind: a decision a person made (Vouched), or anything
	// appended after the run's end, follows the last head_signed.
	headBehind bool
}

// entry is one transcript element: a message, or the placeholder of a tool
// batch whose results are built from the actions when asked.
type entry struct {
	msg   events.Message
	batch int64
}

// Clone returns a copy of s that Evolve can consume without touching s.
func (s State) Clone() State {
	c := s
	c.actions = slices.Clone(s.actions)
	for i := range c.actions {
		c.actions[i].Answers = slices.Clip(c.actions[i].Answers)
		c.actions[i].Closed = slices.Clip(c.actions[i].Closed)
		c.actions[i].Claimed = slices.Clip(c.actions[i].Claimed)
	}
	c.index = maps.Clone(s.index)
	c.transcript = slices.Clip(s.transcript)
	c.commandProofs = slices.Clip(s.commandProofs)
	return c
}

// Run is the run id.
func (s State) Run() string { return s.run }

// Exists reports whether the run has started (RunStarted was folded).
func (s State) Exists() bool { return s.started }

// Version is the version of the last folded event (the run's head).
func (s State) Version() uint64 { return s.version }

// Started is the run's RunStarted event: agent, input, correlation, limits.
func (s State) Started() events.RunStarted { return s.start }

// Limits are the limits that bind the run.
func (s State) Limits() events.Limits { return s.start.Limits }

// Incarnation is the run's incarnation (1 at start, +1 per recovery).
func (s State) Incarnation() int { return s.incarnation }

// Runner is the runner of the current incarnation.
func (s State) Runner() string { return s.runner }

// HandedOff reports whether the current runner gave the run up and no
// runner recovered it yet.
func (s State) HandedOff() bool { return s.handedOff }

// Turn is the number of turns used: the last requested turn.
func (s State) Turn() int64 { return s.turn }

// TokensUsed is the sum of reported input and output tokens.
func (s State) TokensUsed() int64 { return s.tokens }

// UnreportedReplies counts replies that reported no usage (no budget).
func (s State) UnreportedReplies() int { return s.unreported }

// Parent is the delegation that started this run, nil for a root run.
func (s State) Parent() *events.Parent { return s.start.Parent }

// Depth is the run's depth in its family: 0 for a root run.
func (s State) Depth() int {
	if s.start.Parent == nil {
		return 0
	}
	return s.start.Parent.Depth
}

// ChildTurns is the number of turns the run's settled children spent.
func (s State) ChildTurns() int64 { return s.childTurns }

// FamilyBudget is the family turn budget the run spends against
// (docs/adr/0007): its own max turns for a root run, the budget its parent
// gave it for a child run.
func (s State) FamilyBudget() int64 {
	if p := s.start.Parent; p != nil {
		return p.FamilyTurns
	}
	return s.start.Limits.MaxTurns
}

// FamilyUsed is the family turns this run accounts for: its own turns plus
// the turns of its settled children.
func (s State) FamilyUsed() int64 { return s.OwnTurns() + s.childTurns }

// OwnTurns is the number of model turns the run itself requested: Turn,
// less the turns before its fork point for a run restarted from a step,
// whose numbering continues its parent's (docs/semantics.md §14).
func (s State) OwnTurns() int64 {
	if s.forked != nil {
		return s.turn - (s.forked.Turn - 1)
	}
	return s.turn
}

// Cancelling reports whether a cancellation was requested.
func (s State) Cancelling() bool { return s.cancelling }

// Finished returns the run's outcome and whether it finished.
func (s State) Finished() (events.Outcome, bool) { return s.outcome, s.finished }

// Actions returns every action of the run in the order the model asked for
// them (turn, then call order).
func (s State) Actions() []Action { return slices.Clone(s.actions) }

// Action returns the action with the given id.
func (s State) Action(id string) (Action, bool) {
	i, ok := s.index[id]
	if !ok {
		return Action{}, false
	}
	return s.actions[i], true
}

// ActionID is the id of the call callID of turn: "<turn>/<call_id>".
func ActionID(turn int64, callID string) string {
	return strconv.FormatInt(turn, 10) + "/" + callID
}
