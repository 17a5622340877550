package aggregate

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/events"
)

// Command is something the outside world contributed to a run. The set is
// closed: the structs of this file.
type Command interface {
	// CommandName is a stable name for logs and scripts, such as "start".
	CommandName() string
	isCommand()
}

// Start creates a run. It is decided on the empty State; on an existing run
// it is refused already_started with SameInput (same agent and input,
// correlation ignored).
type Start struct {
	Run         string
	Agent       events.AgentRef
	Input       string
	Correlation string
	Limits      events.Limits
	// Typed is set when the agent has a typed final answer.
	Typed bool
	// Runner is the runner that starts and drives the run.
	Runner string
	// Parent links a child run to the delegation that started it (the
	// runner copies it from the parent's ChildStarted); nil for a root run.
	Parent *events.Parent
	// Fork is set on a run restarted from a finished run's turn
	// (docs/semantics.md §14; ForkOf judges it): recorded right after
	// RunStarted, and the first turn requested is Fork.From.Turn.
	Fork *events.RunForked
}

// ModelReply is a model turn's successful reply for Turn. For a typed final
// answer the runner decodes Reply.Turn.Text with the agent's codec first
// and passes either Answer (the decoded JSON) or AnswerError (why it could
// not be read).
type ModelReply struct {
	Turn        int64
	Reply       Reply
	Answer      json.RawMessage
	AnswerError string
}

// ModelFailure is a model turn's failure for Turn (including the model
// timeout, Kind timed_out), its Kind in the log's terms (the runner maps
// the model port's error kind; docs/adr/0037).
type ModelFailure struct {
	Turn       int64
	Kind       events.FailureKind
	Status     int
	Message    string
	RetryAfter time.Duration
}

// ResolveCalls carries the validation and policy outcome of every call of
// the tool request of Turn, one Resolution per call in any order.
type ResolveCalls struct {
	Turn  int64
	Calls []Resolution
}

// Resolution is what the runner found for one call: the validation outcome
// (events.CallValid, CallUnknownTool, CallInvalidArguments with Detail and,
// when valid, the Normalized arguments), then for a valid call the policy's
// decision and the tool's configuration.
//
// Delegate is set when the called tool is a sub-agent delegation (the
// child agent). Such a call is checked against max children, max depth and
// the family turn budget before policy (DelegationLimits); a call over a
// bound ends limit_reached and its Policy is ignored, so the runner does not
// evaluate it.
type Resolution struct {
	CallID     string
	Validation string
	Detail     string
	Normalized json.RawMessage
	Policy     PolicyResult
	Tool       events.ToolConfig
	Delegate   *events.AgentRef
}

// PolicyResult is a policy decision as the runner obtained it: Decision is
// events.PolicyAllow, PolicyDeny (Reason), PolicyRequireApproval
// (Requirement) or PolicyError (Reason: the error, panic or timeout).
type PolicyResult struct {
	Decision    string
	Reason      string
	Requirement events.Requirement
}

// Approve answers the approval request (Action, Revision) with a proof the
// runner already verified (Reviewer, Verifier) and the policy's decision
// re-run with the approver's context. Tool is the tool's configuration at
// this time (its Timeout zero means the agent default).
//
// Proof is the signed proof the runner verified, when the approver takes
// signed proofs: it is recorded with the answer, refused proof_used when
// the run already recorded it (checked first: a replay is named as such)
// and proof_expired when it expired by the decision's time (the time
// recorded on the answer, so an audit judges it the same).
type Approve struct {
	Action   string
	Revision int
	Reviewer string
	Verifier string
	Proof    *events.ApprovalProof
	// Identity is whether the deployment vouches for Reviewer (recorded).
	Identity events.Identity
	Policy   PolicyResult
	Tool     events.ToolConfig
	// Arguments, when set, are the edited arguments the approver narrows
	// the call to (docs/semantics.md §4, "Approving narrower arguments"):
	// the runner decoded them with the tool's input codec, verified a proof
	// that covers them and re-ran the policy with them (Policy). They are
	// recorded with the answer and the body gets them.
	Arguments json.RawMessage
}

// Reject answers the approval request (Action, Revision) with a rejection.
// The policy is not re-run. Proof is checked and recorded as for Approve.
type Reject struct {
	Action   string
	Revision int
	Reason   string
	By       string
	Verifier string
	Proof    *events.ApprovalProof
	// Identity is whether the deployment vouches for By (recorded).
	Identity events.Identity
}

// Report is a worker's report of an attempt's body: Outcome
// events.OutcomeOutput (Content), OutcomeExplain (Message) or
// OutcomeUncertain (Evidence). An output's Content, or an Explain's
// {"error": Message}, over the run's max result bytes is recorded as an
// oversize report: the action is faulted (docs/semantics.md §2).
type Report struct {
	Action   string
	Attempt  int
	Outcome  string
	Content  json.RawMessage
	Message  string
	Evidence string
	// Bytes is the encoded size a worker measured for Outcome
	// events.OutcomeOversize, whose content is not sent; it must be over
	// the run's max result bytes.
	Bytes int64
}

// Lost says that an attempt ended without a result of its own: Cause is
// events.CauseCrashed, CauseWorkerLost or CauseTimedOut (a worker that saw
// the body overrun; the runner's own timeout is TimerFired, a lost runner is
// Recover, cancellation is Cancel). A Lost that does not match the running
// attempt is recorded as ReportRefused.
type Lost struct {
	Action   string
	Attempt  int
	Cause    string
	Evidence string
}

// Settle is a settlement offered through a settling tool's handle: Outcome
// is events.OutcomeOutput (Content), OutcomeExplain (Message) or
// OutcomeUncertain. Summary says what happened, for a person.
//
// On a running action Decide refuses not_awaited with Reason
// "body_running" and records nothing: the runner waits for the attempt's
// report and decides the settlement again, which then gives already_recorded
// (docs/semantics.md §9). A handler settling its own call is refused
// not_awaited
// by the runner at once, without deciding. Output content, or an Explain
// whose {"error": Message} encoding, over the run's max result bytes is
// refused not_awaited with Reason "result_too_large" (recorded as
// SettlementRefused): a person reconciles.
type Settle struct {
	Action  string
	Outcome string
	Content json.RawMessage
	Message string
	Summary string
}

// Reconcile records what happened to an uncertain action. Content is the
// tool's encoded output, {"error": message} or {"unconfirmed": note}.
// Stored is the stored-run form (reconcile_stored), for finished runs only.
// On a live run the model reads Content, so content over the run's max
// result bytes is refused payload_too_large.
type Reconcile struct {
	Action  string
	Content json.RawMessage
	By      string
	Stored  bool
	// Reason, Identity and Proof are recorded as given (who did it:
	// docs/security.md).
	Reason   string
	Identity events.Identity
	Proof    *events.CommandProof
}

// ChildSettle feeds a delegated action the outcome of its child run:
// Child is the child run id (as ChildStarted recorded it), Outcome the
// child's RunFinished outcome and Turns the turns it spent. A settle for an
// action already settled is refused already_recorded and changes nothing,
// so a runner may send it again after a crash.
type ChildSettle struct {
	Action  string
	Child   string
	Outcome events.Outcome
	Turns   int64
}

// ToolMissing says the run's agent (same name and version) no longer has
// the tool a live action needs: the run fails tool_changed. A runner sends
// it when it is about to dispatch, approve or recover an action whose tool
// its agent lacks.
type ToolMissing struct {
	Action string
	Tool   string
}

// Cancel cancels the run.
type Cancel struct {
	By     string
	Reason string
	// Identity and Proof are recorded as given.
	Identity events.Identity
	Proof    *events.CommandProof
}

// TimerKind is the closed set of durable timers a runner arms.
type TimerKind string

// The timer kinds.
const (
	// TimerApprovalExpiry fires at an approval request's deadline; it
	// names the Action and the request's Revision.
	TimerApprovalExpiry TimerKind = "approval_expiry"
	// TimerSettleWindow fires when a stopped settling tool's window closes;
	// it names the Action and Attempt.
	TimerSettleWindow TimerKind = "settle_window"
	// TimerModelRetry fires when a retryable model failure's delay is over;
	// it names the Turn that failed.
	TimerModelRetry TimerKind = "model_retry"
	// TimerToolTimeout fires at a fenced attempt's deadline; it names the
	// Action and Attempt.
	TimerToolTimeout TimerKind = "tool_timeout"
)

// TimerFired says a timer armed from Pending's Work fired. A timer that is
// no longer due (the state moved on) decides nothing.
type TimerFired struct {
	Kind     TimerKind
	Action   string
	Attempt  int
	Revision int
	Turn     int64
}

// HandOff is a draining runner giving the run up, after waiting (within its
// drain window) for running bodies and an in-flight model reply.
// ModelNotCalled says the run's requested model turn was never called by
// this runner, so the next runner calls it under the same turn. A HandOff
// from a runner that does not drive the run (another took it over) emits
// nothing.
type HandOff struct {
	Runner         string
	ModelNotCalled bool
}

// Recover is a runner taking over a run nobody drives. Cause is what the
// log says: events.RecoveredHandedOff when the run was handed off
// (State.HandedOff), events.RecoveredRunnerLost otherwise; a mismatch is
// refused invalid_request. events.RecoveredIdle may be given for a run
// that is Idle (and only then): nothing is in flight, so the recovery
// records run_recovered alone. Only a loss re-asks approvals: a hand-off keeps
// every recorded approval (docs/semantics.md §8).
//
// The cause is judged on the run as its log says, before anything else:
// approval expiries that fell due meanwhile are applied after the
// recovery, at the new incarnation, so RecoveryCause(s) is never refused
// (docs/semantics.md §8, "A run can always be answered").
//
// Then is the command that made the runner take the run over (an answer,
// a cancel, a report, a timer), nil for a takeover on its own (a runner's
// recovery scan). It is decided on the recovered state in the same
// decision, before any follow-on of the recovery — the replay's fence, the
// re-issued model call, the fence of a queued action — so that a command
// that cancels or ends the run starts no body and issues no model call
// (docs/semantics.md §7). A refusal of Then comes with the recovery's events,
// which are appended all the same. Then may not be Start, HandOff or
// Recover; a finished run needs no takeover (decide the command alone).
type Recover struct {
	Runner string
	Cause  string
	Then   Command
}

// Closing is a command (Then) decided after the runner closed the claims of
// the fenced attempts Then ends or abandons without a result of their own
// (docs/adr/0023-closing-attempts.md, docs/semantics.md §8 "Closing an
// attempt"): Closes are the outcomes of those closes, the decision's
// recorded input. Each close that won (Closed) is recorded as
// events.AttemptClosed ahead of Then's events, in the same decision, unless
// the log already records it; a close that found a worker's claim, or
// whose outcome is unknown, is passed with Closed false and changes
// nothing (§5's rule stands); one that found a worker's claim (Claimed) is
// recorded as events.AttemptClosed with Claimed, so that no later decision
// closes that attempt again. A close naming an attempt the run does not
// know as its action's latest fence (no such action, another attempt or
// incarnation, an action no longer running nor waiting to start again) is
// refused invalid_request, with no events. Then may not be Start or
// Closing; By is the runner that closed the claims.
type Closing struct {
	By     string
	Closes []Close
	Then   Command
}

// Close is the outcome of one attempt's close: Action, Attempt and
// Incarnation name the fence (its claim key, api.ClaimKey), Why the path
// (events.ClosedCancelled, ...), Closed whether the runner's create-only
// write of the closed claim won or found a closed value, Claimed whether
// it found a worker's claim (neither: the outcome is unknown). By, when
// set, is the runner whose closed value the close found (Closing.By
// otherwise). NotStarted, with Closed, is the worker whose claim the close
// found marked not started and why (api.Claim.NotStarted): that worker
// never started the body, so the attempt counts closed and the log
// records who claimed it (events.AttemptClosed NotStarted).
type Close struct {
	Action      string
	Attempt     int
	Incarnation int
	Why         string
	Closed      bool
	Claimed     bool
	By          string
	NotStarted  *events.ClosedNotStarted
	// ClaimWorker and ClaimToken are the worker's claim a close that
	// found one (Claimed) read, when it could be read as a claim.
	ClaimWorker string
	ClaimToken  string
}

// MarkedNotStarted records that the worker's claim a close found (the
// action's latest attempt, recorded events.AttemptClosed with Claimed: the
// action was decided uncertain) has since been marked not started by its
// worker (api.Claim.NotStarted; docs/adr/0023-closing-attempts.md, "Late
// evidence: a mark after the decision"). Worker and Why are the mark as the
// runner read it from the claim's value — the decision's recorded input,
// never a worker's report alone; By is that runner. It records
// events.AttemptNotStarted, ending the action not_started when every
// attempt it had is now closed or marked, on a live or a finished run (on
// a live run the model reads that the call did not run, and its next turn
// follows once the batch is answered). It
// is refused not_reconcilable (reason: the action's state) for an action
// no longer uncertain — a reconciliation or late settlement recorded first
// wins — and invalid_request for an attempt that is not the action's
// latest or whose close did not find a claim, or whose Token is not the
// token of the claim the close found (events.AttemptClosed ClaimToken: a
// claim created again under the key after that one expired is another
// claim; a close recorded without a token accepts no mark).
type MarkedNotStarted struct {
	Action      string
	Attempt     int
	Incarnation int
	// Token is the marked claim's token as the runner read it.
	Token  string
	Worker string
	Why    string
	By     string
}

// CommandName returns "marked_not_started".
func (MarkedNotStarted) CommandName() string { return "marked_not_started" }

func (MarkedNotStarted) isCommand() {}

// CommandName returns "start".
func (Start) CommandName() string { return "start" }

// CommandName returns "model_reply".
func (ModelReply) CommandName() string { return "model_reply" }

// CommandName returns "model_failure".
func (ModelFailure) CommandName() string { return "model_failure" }

// CommandName returns "resolve_calls".
func (ResolveCalls) CommandName() string { return "resolve_calls" }

// CommandName returns "approve".
func (Approve) CommandName() string { return "approve" }

// CommandName returns "reject".
func (Reject) CommandName() string { return "reject" }

// CommandName returns "report".
func (Report) CommandName() string { return "report" }

// CommandName returns "lost".
func (Lost) CommandName() string { return "lost" }

// CommandName returns "settle".
func (Settle) CommandName() string { return "settle" }

// CommandName returns "reconcile" or "reconcile_stored".
func (c Reconcile) CommandName() string {
	if c.Stored {
		return "reconcile_stored"
	}
	return "reconcile"
}

// CommandName returns "child_settle".
func (ChildSettle) CommandName() string { return "child_settle" }

// CommandName returns "tool_missing".
func (ToolMissing) CommandName() string { return "tool_missing" }

// CommandName returns "cancel".
func (Cancel) CommandName() string { return "cancel" }

// CommandName returns "timer_fired".
func (TimerFired) CommandName() string { return "timer_fired" }

// CommandName returns "hand_off".
func (HandOff) CommandName() string { return "hand_off" }

// CommandName returns "recover".
func (Recover) CommandName() string { return "recover" }

// CommandName returns Then's name: the closes are inputs of that command.
func (c Closing) CommandName() string {
	if c.Then == nil {
		return "closing"
	}
	return c.Then.CommandName()
}

func (Start) isCommand()        {}
func (ModelReply) isCommand()   {}
func (ModelFailure) isCommand() {}
func (ResolveCalls) isCommand() {}
func (Approve) isCommand()      {}
func (Reject) isCommand()       {}
func (Report) isCommand()       {}
func (Lost) isCommand()         {}
func (Settle) isCommand()       {}
func (Reconcile) isCommand()    {}
func (Cancel) isCommand()       {}
func (ChildSettle) isCommand()  {}
func (ToolMissing) isCommand()  {}
func (TimerFired) isCommand()   {}
func (HandOff) isCommand()      {}
func (Recover) isCommand()      {}
func (Closing) isCommand()      {}
