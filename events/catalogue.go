package events

import (
	"encoding/json"
	"math"
	"time"

	"github.com/weftrun/weft/model"
)

// The durable names of the event types. Never rename or reuse one; retire a
// name by moving it to the reserved list below.
const (
	NameRunStarted         Name = "run_started"
	NameModelRequested     Name = "model_requested"
	NameModelReplied       Name = "model_replied"
	NameModelFailed        Name = "model_failed"
	NameAnswerRejected     Name = "answer_rejected"
	NameCallValidated      Name = "call_validated"
	NamePolicyDecided      Name = "policy_decided"
	NameApprovalRequested  Name = "approval_requested"
	NameApprovalAnswered   Name = "approval_answered"
	NameRequirementChanged Name = "requirement_changed"
	NameActionQueued       Name = "action_queued"
	NameAttemptFenced      Name = "attempt_fenced"
	NameAttemptReported    Name = "attempt_reported"
	NameAttemptLost        Name = "attempt_lost"
	NameReportRefused      Name = "report_refused"
	NameActionUncertain    Name = "action_uncertain"
	NameSettlementAccepted Name = "settlement_accepted"
	NameSettlementRefused  Name = "settlement_refused"
	NameReconciled         Name = "reconciled"
	NameActionsNotStarted  Name = "actions_not_started"
	NameCancelRequested    Name = "cancel_requested"
	NameRunHandedOff       Name = "run_handed_off"
	NameRunRecovered       Name = "run_recovered"
	NameRunFinished        Name = "run_finished"
	NameChildStarted       Name = "child_started"
	NameChildSettled       Name = "child_settled"
	NameResolved           Name = "resolved"
)

// Names lists every event name of the catalogue, in the order of this file.
// Decode knows exactly these names.
var Names = []Name{
	NameRunStarted, NameModelRequested, NameModelReplied, NameModelFailed, NameAnswerRejected,
	NameCallValidated, NamePolicyDecided, NameApprovalRequested, NameApprovalAnswered,
	NameRequirementChanged, NameActionQueued, NameAttemptFenced, NameAttemptReported,
	NameAttemptLost, NameReportRefused, NameActionUncertain, NameSettlementAccepted,
	NameSettlementRefused, NameReconciled, NameActionsNotStarted, NameCancelRequested,
	NameRunHandedOff, NameRunRecovered, NameRunFinished, NameChildStarted, NameChildSettled,
	NameResolved,
}

// Reserved lists retired names that must never be used again.
var Reserved = []Name{}

// Millis is a duration in whole milliseconds as stored in events. Infinite
// (-1) means no limit.
type Millis int64

// Infinite is the Millis value of an unbounded timeout or expiry.
const Infinite Millis = -1

// MillisOf converts d to Millis, rounding down.
func MillisOf(d time.Duration) Millis { return Millis(d / time.Millisecond) }

// Duration converts m to a time.Duration; Infinite gives 0 and ok false.
// A value over the largest time.Duration (about 292 years; approval expiry
// allows up to 2^53-1 ms) saturates to it instead of overflowing.
func (m Millis) Duration() (d time.Duration, ok bool) {
	if m < 0 {
		return 0, false
	}
	if m > Millis(math.MaxInt64/int64(time.Millisecond)) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(m) * time.Millisecond, true
}

// AgentRef names the agent definition a run is bound to: it continues only
// under the same name and version.
type AgentRef struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Limits are the limits of SEMANTICS.md §2 that bind a run. They are recorded
// in RunStarted so that every decision about the run uses the values it
// started with. Zero TokenBudget means no budget.
type Limits struct {
	MaxTurns        int64  `json:"max_turns"`
	MaxConcurrency  int    `json:"max_concurrency"`
	TokenBudget     int64  `json:"token_budget,omitempty"`
	ModelTimeout    Millis `json:"model_timeout_ms"`
	ModelRetryDelay Millis `json:"model_retry_delay_ms"`
	ToolTimeout     Millis `json:"tool_timeout_ms"`
	MaxResultBytes  int64  `json:"max_result_bytes"`
	PolicyTimeout   Millis `json:"policy_timeout_ms"`
	CommandTimeout  Millis `json:"command_timeout_ms"`
	ApprovalExpiry  Millis `json:"approval_expiry_ms"`
	AnswerAttempts  int    `json:"answer_attempts"`
	MaxChildren     int    `json:"max_children"`
	MaxDepth        int    `json:"max_depth"`
}

// Requirement names what an approval must satisfy: a requirement name and
// its version, as the policy asked for it.
type Requirement struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
}

// RunStarted is emitted when a run is created. It is always the run's first
// event (version 1) and anchors the run's hash chain. It guarantees that the
// run is bound to Agent and Limits for its whole life.
type RunStarted struct {
	Agent       AgentRef `json:"agent"`
	Input       string   `json:"input"`
	Correlation string   `json:"correlation,omitempty"`
	Limits      Limits   `json:"limits"`
	// Typed is set when the agent has a typed final answer.
	Typed bool `json:"typed,omitempty"`
	// Runner is the runner that started the run; it drives incarnation 1.
	Runner string `json:"runner"`
	// Parent is set on a child run started by a sub-agent delegation: the
	// parent run and action it answers, its depth and its family budget.
	Parent *Parent `json:"parent,omitempty"`
}

// Parent links a child run to the delegation that started it. Depth is the
// child's depth (1 for a child of a root run). FamilyTurns is the family
// turn budget the child may spend (docs/adr/0007): the child finishes
// budget_exhausted(family_limit) when its turns reach it before its own
// max turns. MaxDepth is the family's depth bound (the smallest max depth
// of its ancestors); the child delegates only within it and its own max
// depth.
type Parent struct {
	Run         string `json:"run"`
	Action      string `json:"action"`
	Depth       int    `json:"depth"`
	FamilyTurns int64  `json:"family_turns"`
	MaxDepth    int    `json:"max_depth,omitempty"`
}

// ModelRequested is emitted when a runner is about to call the model for a
// turn; the call is made only after this event is committed. It spends a
// turn whatever happens to the call (Turn is the previous turn + 1), except
// when a runner that handed the run off never made the call (RunHandedOff
// Uncalled): recovery then requests the same Turn again with a fresh
// Deadline. The request itself is rebuilt from the log (the transcript is
// never re-recorded).
type ModelRequested struct {
	Turn        int64 `json:"turn"`
	Incarnation int   `json:"incarnation"`
	// Why is what the turn follows: "start", "tool_results", "retry",
	// "correction" or "recovery" (the previous turn's call was lost with its
	// runner; that turn stays spent).
	Why string `json:"why"`
	// Deadline is when the model timeout stops the call; absent for
	// infinity.
	Deadline *time.Time `json:"deadline,omitempty"`
}

// The reasons of ModelRequested.
const (
	TurnStart       = "start"
	TurnToolResults = "tool_results"
	TurnRetry       = "retry"
	TurnCorrection  = "correction"
	TurnRecovery    = "recovery"
)

// ModelReplied is emitted when the awaited model turn returned a reply. It
// holds the assistant turn exactly once: text, calls with their provider
// ids, and the provider data replayed on later turns. It guarantees that the
// reply was received before any decision used it. A tool request with at
// least one call and distinct call ids creates one action per call, id
// "<turn>/<call_id>", in call order; its validation and policy follow in a
// later decision (CallValidated, PolicyDecided). Kind is final_answer,
// tool_request, refusal or truncated (Reason: the refusal reason or the
// partial text). Usage nil means the provider reported none.
type ModelReplied struct {
	Turn         int64            `json:"turn"`
	Kind         model.ReplyKind  `json:"kind"`
	Text         string           `json:"text,omitempty"`
	Calls        []model.ToolCall `json:"calls,omitempty"`
	ProviderData json.RawMessage  `json:"provider_data,omitempty"`
	Reason       string           `json:"reason,omitempty"`
	Usage        *model.Usage     `json:"usage,omitempty"`
}

// ModelFailed is emitted when the awaited model turn failed or timed out
// (kind timed_out). When the failure is retryable and a turn is left,
// RetryAt is the durable time of the next attempt (the retry delay doubled
// per consecutive failure up to 64x, or the provider's RetryAfter when
// longer, capped at 10 minutes); otherwise the run finishes in the same
// decision.
type ModelFailed struct {
	Turn       int64           `json:"turn"`
	Kind       model.ErrorKind `json:"kind"`
	Status     int             `json:"status,omitempty"`
	Message    string          `json:"message,omitempty"`
	RetryAfter Millis          `json:"retry_after_ms,omitempty"`
	RetryAt    *time.Time      `json:"retry_at,omitempty"`
}

// AnswerRejected is emitted when a typed final answer could not be decoded
// with the agent's answer codec. It is also the corrective user message of
// the next turn ("your final answer could not be read: <reason>" plus the
// schema), stored once here.
type AnswerRejected struct {
	Turn   int64  `json:"turn"`
	Reason string `json:"reason"`
}

// CallValidated is emitted once for each call of a tool request, before any
// policy runs. Outcome is "valid", "unknown_tool" or "invalid_arguments"
// (Detail holds the path and reason). Invalid calls end here: the model sees
// the error and neither policy nor handler is invoked.
type CallValidated struct {
	Action  string `json:"action"`
	Turn    int64  `json:"turn"`
	CallID  string `json:"call_id"`
	Tool    string `json:"tool"`
	Outcome string `json:"outcome"`
	Detail  string `json:"detail,omitempty"`
	// Normalized is the arguments as the tool's input codec normalized
	// them, present only when they differ from the model's bytes (which
	// ModelReplied already holds).
	Normalized json.RawMessage `json:"normalized,omitempty"`
	// Agent is set when the call is a sub-agent delegation: the child
	// agent the action starts once allowed (ChildStarted instead of
	// ActionQueued).
	Agent *AgentRef `json:"agent,omitempty"`
}

// The outcomes of CallValidated. A delegation over the run's max children
// or max depth (or the family turn budget) ends "limit_reached" (Detail
// names the bound, e.g. "max_children 4"); like the other invalid outcomes
// it is decided before policy and the model sees
// {"error":"limit_reached","detail":...}.
const (
	CallValid            = "valid"
	CallUnknownTool      = "unknown_tool"
	CallInvalidArguments = "invalid_arguments"
	CallLimitReached     = "limit_reached"
)

// ChildStarted is emitted when the policy allowed a sub-agent delegation
// (at the model's request or after an approval): the action is delegated to
// the child run Child, whose id is derived from the parent run and action
// (aggregate.ChildRunID), so starting it is idempotent. The runner starts
// the child with Agent and Input and the Parent link (Depth, FamilyTurns)
// after this event is committed. A delegation holds no concurrency slot.
//
// MaxDepth is the family's depth bound the child inherits (the smaller of
// the parent's max depth and its own inherited bound).
type ChildStarted struct {
	Action      string   `json:"action"`
	Child       string   `json:"child"`
	Agent       AgentRef `json:"agent"`
	Input       string   `json:"input"`
	Depth       int      `json:"depth"`
	FamilyTurns int64    `json:"family_turns"`
	MaxDepth    int      `json:"max_depth,omitempty"`
}

// ChildSettled is emitted when a delegated action ended: the child run
// finished with Outcome after spending Turns, and Content is what the model
// reads (the child's answer when it completed, else
// {"error":"child_<kind>","outcome":...}). Bytes is set instead of Content
// when the answer is over the parent's max result bytes (the action is
// faulted, the parent fails output_encoding_failed). Detached marks a
// delegation ended because the parent finished first: the runner cancels
// the child, whose outcome the parent never reads.
type ChildSettled struct {
	Action   string          `json:"action"`
	Child    string          `json:"child"`
	Outcome  Outcome         `json:"outcome"`
	Turns    int64           `json:"turns,omitempty"`
	Content  json.RawMessage `json:"content,omitempty"`
	Bytes    int64           `json:"bytes,omitempty"`
	Detached bool            `json:"detached,omitempty"`
}

// PolicyDecided is emitted when the policy answered for an action: at the
// model's request (Context "model") or when an approval is answered
// (Context "approval", with the approver's fresh context). Decision is
// "allow", "deny" (Reason) or "require_approval" (Requirement), or "error"
// (Reason), which fails the run closed.
type PolicyDecided struct {
	Action      string       `json:"action"`
	Context     string       `json:"context"`
	Decision    string       `json:"decision"`
	Reason      string       `json:"reason,omitempty"`
	Requirement *Requirement `json:"requirement,omitempty"`
}

// The decisions of PolicyDecided.
const (
	PolicyAllow           = "allow"
	PolicyDeny            = "deny"
	PolicyRequireApproval = "require_approval"
	PolicyError           = "error"
)

// ApprovalRequested is emitted when an action waits for a person's approval.
// Revision is unique within the run; Expires is the absolute deadline by the
// store's clock (absent for infinity). Why is "policy", "requirement_changed"
// or "recovery" (an approved action not started at a loss asks again).
type ApprovalRequested struct {
	Action      string      `json:"action"`
	Revision    int         `json:"revision"`
	Requirement Requirement `json:"requirement"`
	Expires     *time.Time  `json:"expires,omitempty"`
	Why         string      `json:"why"`
}

// ApprovalAnswered is emitted when an approval request got its one answer:
// "approve" (Reviewer and Verifier from the proof), "reject" (Reason;
// Reviewer is who rejected) or "expired" (the deadline passed by the store's
// clock; applied by the first decision at or after Expires). It is kept on
// the action for audit. Reject and expired end the action rejected; an
// approve authorises the action only if the policy, re-run in the same
// decision (PolicyDecided context "approval"), allows it. For a request
// re-asked after a lost attempt, reject, expired and a denying re-run are
// followed by ActionUncertain: the lost attempt may have acted.
type ApprovalAnswered struct {
	Action      string      `json:"action"`
	Revision    int         `json:"revision"`
	Requirement Requirement `json:"requirement"`
	Answer      string      `json:"answer"`
	Reason      string      `json:"reason,omitempty"`
	Reviewer    string      `json:"reviewer,omitempty"`
	Verifier    string      `json:"verifier,omitempty"`
	// Proof is the signed approval proof the answer was given with (an
	// approver of signed proofs, approvers.Signed), recorded as presented
	// so that anyone can re-check it offline (package proof, weft audit
	// verify); absent for answers authenticated otherwise.
	Proof *ApprovalProof `json:"proof,omitempty"`
}

// ApprovalProof is a signed approval proof: the statement that the holder
// of Key gives Answer ("approve" or "reject") to exactly one approval
// request — run, action, revision and requirement — of exactly one call:
// the tool and the SHA-256 of its canonical arguments bytes; valid until
// Expires (whole seconds). Signature is the ed25519 signature by Key over
// the statement's digest (package proof: docs/protocol/20-events.md,
// "Signed approval proofs").
type ApprovalProof struct {
	// Key is the signer's public key, an nkey user key ("U…").
	Key         string      `json:"key"`
	Run         string      `json:"run"`
	Action      string      `json:"action"`
	Revision    int         `json:"revision"`
	Requirement Requirement `json:"requirement"`
	Tool        string      `json:"tool"`
	// Arguments is the lowercase hex SHA-256 of the call's canonical
	// arguments bytes.
	Arguments string `json:"arguments_sha256"`
	Answer    string `json:"answer"`
	// Expires is the first instant at which the proof is refused, by the
	// store's clock.
	Expires time.Time `json:"expires"`
	// Signature is the base64url (unpadded) ed25519 signature.
	Signature string `json:"signature"`
}

// The reasons of ApprovalRequested.
const (
	AskPolicy             = "policy"
	AskRequirementChanged = "requirement_changed"
	AskRecovery           = "recovery"
)

// The answers of ApprovalAnswered.
const (
	AnswerApprove = "approve"
	AnswerReject  = "reject"
	AnswerExpired = "expired"
)

// RequirementChanged is emitted when an approved action's re-run policy asks
// for a different requirement. The approval that was given stays on the
// action but authorises nothing; an ApprovalRequested with a new revision
// follows in the same decision.
type RequirementChanged struct {
	Action   string      `json:"action"`
	Revision int         `json:"revision"`
	From     Requirement `json:"from"`
	To       Requirement `json:"to"`
}

// ToolConfig is the configuration of a tool that decides an action's
// attempts, recorded when the action is queued and copied onto each fence.
// Timeout is Infinite for no timeout; MaxAttempts is 1..100; SettleWithin
// is zero for a tool that does not settle.
type ToolConfig struct {
	Timeout      Millis `json:"timeout_ms"`
	MaxAttempts  int    `json:"max_attempts"`
	SettleWithin Millis `json:"settle_within_ms,omitempty"`
}

// ActionQueued is emitted when an action may run: the policy allowed it
// (Why "allowed") or allowed it again after an approval (Why "approved").
// It waits for a concurrency slot; Config is the tool's recorded
// configuration, which every attempt of the action uses. A replay does not
// queue again: AttemptLost with Next "replay" puts the action back in line.
type ActionQueued struct {
	Action string     `json:"action"`
	Why    string     `json:"why"`
	Config ToolConfig `json:"config"`
}

// The reasons of ActionQueued.
const (
	QueuedAllowed  = "allowed"
	QueuedApproved = "approved"
)

// AttemptFenced is emitted when an attempt of an action is about to start.
// No tool body starts before its fence is committed; everything after it may
// have touched the world. The tool's timeout, replay budget and settle
// window are recorded here so that any runner decides a loss the same way.
type AttemptFenced struct {
	Action       string     `json:"action"`
	Tool         string     `json:"tool"`
	Attempt      int        `json:"attempt"`
	Incarnation  int        `json:"incarnation"`
	Timeout      Millis     `json:"timeout_ms"`
	MaxAttempts  int        `json:"max_attempts"`
	SettleWithin Millis     `json:"settle_within_ms,omitempty"`
	Deadline     *time.Time `json:"deadline,omitempty"`
}

// AttemptReported is emitted when the current attempt's body returned and a
// worker reported it, while the action was running or waiting for its
// settlement (the body's own result wins): Outcome "output" (Content, the
// encoded output: action succeeded), "explain" (Message, a definite
// failure: tool_failed, the model sees {"error": Message}), "uncertain"
// (Evidence: never replayed) or "oversize" (Bytes over the run's max result
// bytes: action faulted, run failed(output_encoding_failed), or cancelled
// when a cancellation is stopping the run; the effect did happen). The
// bound is on the encoded result the model would read: an output's
// encoding or an explain's {"error": Message}; a report of either over it
// is recorded as oversize with Bytes that encoded size.
type AttemptReported struct {
	Action   string          `json:"action"`
	Attempt  int             `json:"attempt"`
	Outcome  string          `json:"outcome"`
	Content  json.RawMessage `json:"content,omitempty"`
	Message  string          `json:"message,omitempty"`
	Evidence string          `json:"evidence,omitempty"`
	Bytes    int64           `json:"bytes,omitempty"`
}

// The outcomes of AttemptReported and SettlementAccepted.
const (
	OutcomeOutput    = "output"
	OutcomeExplain   = "explain"
	OutcomeUncertain = "uncertain"
	OutcomeOversize  = "oversize"
)

// AttemptLost is emitted when an attempt ended without a result of its own:
// Cause "timed_out", "crashed", "worker_lost", "runner_lost" or "stopped"
// (cancellation, or the run finished while the body ran). Next is what the
// fence's recorded budget decided: "replay" (attempts left: the action is
// queued again and a new fence follows when a slot is free), "reapprove"
// (attempts left, but an approved action lost its runner: an
// ApprovalRequested follows), "settle" (a settling tool stopped by a timeout
// or a cancellation waits until SettleBy for its settlement; the body's own
// report still wins) or "uncertain" (the effect may have happened; a person
// reconciles).
type AttemptLost struct {
	Action   string     `json:"action"`
	Attempt  int        `json:"attempt"`
	Cause    string     `json:"cause"`
	Evidence string     `json:"evidence"`
	Next     string     `json:"next"`
	SettleBy *time.Time `json:"settle_by,omitempty"`
}

// The causes and next steps of AttemptLost.
const (
	CauseTimedOut   = "timed_out"
	CauseCrashed    = "crashed"
	CauseWorkerLost = "worker_lost"
	CauseRunnerLost = "runner_lost"
	CauseStopped    = "stopped"

	NextReplay    = "replay"
	NextReapprove = "reapprove"
	NextSettle    = "settle"
	NextUncertain = "uncertain"
)

// ReportRefused is emitted when a worker's report does not match the
// action's current attempt: Reason "foreign" (no such action, or an
// attempt that was never fenced: premature), "stale" (an earlier
// attempt), "duplicate" (the attempt already has its outcome),
// "not_running" (the action has no attempt in flight), "run_finished" or
// "result_too_large" (a late report of the attempt that made the action
// uncertain, whose encoded result is over the run's max result bytes: it
// cannot settle the action, which stays uncertain for a person to
// reconcile). It changes nothing but the audit trail.
type ReportRefused struct {
	Action  string `json:"action"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
}

// The reasons of ReportRefused.
const (
	RefusedForeign     = "foreign"
	RefusedStale       = "stale"
	RefusedDuplicate   = "duplicate"
	RefusedNotRunning  = "not_running"
	RefusedRunFinished = "run_finished"
	// RefusedResultTooLarge is the reason of a late report, on an
	// uncertain action, whose encoded result is over max result bytes.
	RefusedResultTooLarge = "result_too_large"
)

// ActionUncertain is emitted when a settling tool's settle window closed
// without a settlement: the effect may or may not have happened and the run
// waits for a person. It is also emitted (SEMANTICS.md §5: an attempted
// action is never reported as not having happened) for an action waiting
// to start again after a fenced attempt that ended without a result of its
// own — queued for its replay or re-asking its approval — when a path would
// otherwise end it as if it never started: the run is cancelled or
// finishes (instead of ActionsNotStarted), or its re-asked approval is
// rejected, expires or is denied by the re-run policy (right after the
// ApprovalAnswered or PolicyDecided). Evidence names the path and the
// attempt that may have acted.
type ActionUncertain struct {
	Action   string `json:"action"`
	Evidence string `json:"evidence"`
}

// SettlementAccepted is emitted when a settlement was recorded: while the
// run waited for it after a stop (Outcome "output", "explain" or
// "uncertain", which makes the action uncertain), or as the one definite
// settlement of an uncertain action on a live run (Late; Outcome "output"
// or "explain"; the action ends reconciled). A worker's late definite
// report of the attempt that became uncertain is recorded the same way.
type SettlementAccepted struct {
	Action  string          `json:"action"`
	Attempt int             `json:"attempt"`
	Outcome string          `json:"outcome"`
	Content json.RawMessage `json:"content,omitempty"`
	Message string          `json:"message,omitempty"`
	Summary string          `json:"summary,omitempty"`
	Late    bool            `json:"late,omitempty"`
}

// SettlementRefused is emitted when a settlement is refused not_awaited (an
// uncertain settlement of an uncertain action, a settlement for an action
// that never ran, output content over the run's max result bytes, or any
// settlement on a finished run): a person must
// reconcile, and Summary is what they need. A settlement refused
// already_recorded (the action has its result) is not recorded: nothing was
// lost.
type SettlementRefused struct {
	Action  string `json:"action"`
	Reason  string `json:"reason"`
	Summary string `json:"summary,omitempty"`
}

// Reconciled is emitted when a person recorded what happened to an
// uncertain action. Kind is "output", "error" or "unconfirmed"; Content is
// what the model reads. Stored marks the stored-run form on a finished run,
// which resumes nothing.
type Reconciled struct {
	Action  string          `json:"action"`
	Kind    string          `json:"kind"`
	Content json.RawMessage `json:"content"`
	By      string          `json:"by,omitempty"`
	Stored  bool            `json:"stored,omitempty"`
}

// The kinds of Reconciled.
const (
	ReconciledOutput      = "output"
	ReconciledError       = "error"
	ReconciledUnconfirmed = "unconfirmed"
)

// ActionsNotStarted is emitted when actions end without ever starting:
// Reason "policy_failed", "budget_exhausted", "cancelled" or
// "run_finished". It never names an action that had a fenced attempt
// (such an action ends ActionUncertain instead).
type ActionsNotStarted struct {
	Actions []string `json:"actions"`
	Reason  string   `json:"reason"`
}

// The reasons of ActionsNotStarted.
const (
	NotStartedPolicyFailed    = "policy_failed"
	NotStartedBudgetExhausted = "budget_exhausted"
	NotStartedCancelled       = "cancelled"
	NotStartedRunFinished     = "run_finished"
)

// CancelRequested is emitted when a run is cancelled. An in-flight model
// call is abandoned (its late reply is refused run_ended); requested,
// queued and awaiting-approval actions end not_started in the same decision
// (ActionsNotStarted); running bodies are stopped (AttemptLost, cause
// "stopped": uncertain, or "settle" for a settling tool); the run finishes
// cancelled (RunFinished) as soon as no settle window is open.
type CancelRequested struct {
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RunHandedOff is emitted when a draining runner gives a run up after its
// running bodies and in-flight model reply finished or the drain window
// closed: any runner may take it over (RunRecovered, cause "handed_off").
// Uncalled is the requested turn whose model call the draining runner never
// started (0 for none): the next runner makes that call under the same
// turn instead of spending another.
type RunHandedOff struct {
	Runner      string `json:"runner"`
	Incarnation int    `json:"incarnation"`
	Uncalled    int64  `json:"uncalled_turn,omitempty"`
}

// RunRecovered is emitted when a runner takes over a run that nobody drives
// (Cause "runner_lost" or "handed_off": handed_off exactly when the last
// incarnation ended with RunHandedOff). It bumps the incarnation: reports
// and replies of older incarnations are refused. Only a loss re-asks
// approvals (AttemptLost "reapprove", ApprovalRequested "recovery"); a
// hand-off keeps every recorded approval.
type RunRecovered struct {
	Runner      string `json:"runner"`
	Incarnation int    `json:"incarnation"`
	Previous    string `json:"previous,omitempty"`
	Cause       string `json:"cause"`
}

// The causes of RunRecovered.
const (
	RecoveredRunnerLost = "runner_lost"
	RecoveredHandedOff  = "handed_off"
)

// Outcome is how a run finished (SEMANTICS.md §6). Kind is one of the
// Outcome* constants; the other fields are set as the kind needs.
type Outcome struct {
	Kind    string          `json:"kind"`
	Reason  string          `json:"reason,omitempty"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	Raw     string          `json:"raw,omitempty"`
	Partial string          `json:"partial,omitempty"`
	Limit   int64           `json:"limit,omitempty"`
	Used    int64           `json:"used,omitempty"`
	Turn    int64           `json:"turn,omitempty"`
	Action  string          `json:"action,omitempty"`
	Setting string          `json:"setting,omitempty"`
}

// The kinds of Outcome and the reasons of the budget and failed kinds.
const (
	OutcomeCompleted          = "completed"
	OutcomeAnswerInvalid      = "answer_invalid"
	OutcomeRefused            = "refused"
	OutcomeOutputLimited      = "output_limited"
	OutcomeBudgetExhausted    = "budget_exhausted"
	OutcomeBudgetUnverifiable = "budget_unverifiable"
	OutcomeCancelled          = "cancelled"
	OutcomeFailed             = "failed"

	ReasonTurnLimit              = "turn_limit"
	ReasonTokenLimit             = "token_limit"
	ReasonFamilyLimit            = "family_limit"
	ReasonPolicyFailed           = "policy_failed"
	ReasonOutputEncodingFailed   = "output_encoding_failed"
	ReasonToolChanged            = "tool_changed"
	ReasonModelFailed            = "model_failed"
	ReasonModelProtocolViolation = "model_protocol_violation"
)

// RunFinished is emitted when a run reaches its outcome. Actions that never
// started end not_started and running bodies are stopped in the same
// decision, before it. Only stored-form reconciliations (Reconciled with
// Stored), refused settlements and refused reports follow it.
type RunFinished struct {
	Outcome Outcome `json:"outcome"`
}

func (RunStarted) EventName() Name         { return NameRunStarted }
func (ModelRequested) EventName() Name     { return NameModelRequested }
func (ModelReplied) EventName() Name       { return NameModelReplied }
func (ModelFailed) EventName() Name        { return NameModelFailed }
func (AnswerRejected) EventName() Name     { return NameAnswerRejected }
func (CallValidated) EventName() Name      { return NameCallValidated }
func (PolicyDecided) EventName() Name      { return NamePolicyDecided }
func (ApprovalRequested) EventName() Name  { return NameApprovalRequested }
func (ApprovalAnswered) EventName() Name   { return NameApprovalAnswered }
func (RequirementChanged) EventName() Name { return NameRequirementChanged }
func (ActionQueued) EventName() Name       { return NameActionQueued }
func (AttemptFenced) EventName() Name      { return NameAttemptFenced }
func (AttemptReported) EventName() Name    { return NameAttemptReported }
func (AttemptLost) EventName() Name        { return NameAttemptLost }
func (ReportRefused) EventName() Name      { return NameReportRefused }
func (ActionUncertain) EventName() Name    { return NameActionUncertain }
func (SettlementAccepted) EventName() Name { return NameSettlementAccepted }
func (SettlementRefused) EventName() Name  { return NameSettlementRefused }
func (Reconciled) EventName() Name         { return NameReconciled }
func (ActionsNotStarted) EventName() Name  { return NameActionsNotStarted }
func (CancelRequested) EventName() Name    { return NameCancelRequested }
func (RunHandedOff) EventName() Name       { return NameRunHandedOff }
func (RunRecovered) EventName() Name       { return NameRunRecovered }
func (RunFinished) EventName() Name        { return NameRunFinished }

// All event types are at schema version 1.
func (RunStarted) SchemaVersion() int         { return 1 }
func (ModelRequested) SchemaVersion() int     { return 1 }
func (ModelReplied) SchemaVersion() int       { return 1 }
func (ModelFailed) SchemaVersion() int        { return 1 }
func (AnswerRejected) SchemaVersion() int     { return 1 }
func (CallValidated) SchemaVersion() int      { return 1 }
func (PolicyDecided) SchemaVersion() int      { return 1 }
func (ApprovalRequested) SchemaVersion() int  { return 1 }
func (ApprovalAnswered) SchemaVersion() int   { return 1 }
func (RequirementChanged) SchemaVersion() int { return 1 }
func (ActionQueued) SchemaVersion() int       { return 1 }
func (AttemptFenced) SchemaVersion() int      { return 1 }
func (AttemptReported) SchemaVersion() int    { return 1 }
func (AttemptLost) SchemaVersion() int        { return 1 }
func (ReportRefused) SchemaVersion() int      { return 1 }
func (ActionUncertain) SchemaVersion() int    { return 1 }
func (SettlementAccepted) SchemaVersion() int { return 1 }
func (SettlementRefused) SchemaVersion() int  { return 1 }
func (Reconciled) SchemaVersion() int         { return 1 }
func (ActionsNotStarted) SchemaVersion() int  { return 1 }
func (CancelRequested) SchemaVersion() int    { return 1 }
func (RunHandedOff) SchemaVersion() int       { return 1 }
func (RunRecovered) SchemaVersion() int       { return 1 }
func (RunFinished) SchemaVersion() int        { return 1 }
func (ChildStarted) SchemaVersion() int       { return 1 }
func (ChildSettled) SchemaVersion() int       { return 1 }

func (RunStarted) isEvent()         {}
func (ModelRequested) isEvent()     {}
func (ModelReplied) isEvent()       {}
func (ModelFailed) isEvent()        {}
func (AnswerRejected) isEvent()     {}
func (CallValidated) isEvent()      {}
func (PolicyDecided) isEvent()      {}
func (ApprovalRequested) isEvent()  {}
func (ApprovalAnswered) isEvent()   {}
func (RequirementChanged) isEvent() {}
func (ActionQueued) isEvent()       {}
func (AttemptFenced) isEvent()      {}
func (AttemptReported) isEvent()    {}
func (AttemptLost) isEvent()        {}
func (ReportRefused) isEvent()      {}
func (ActionUncertain) isEvent()    {}
func (SettlementAccepted) isEvent() {}
func (SettlementRefused) isEvent()  {}
func (Reconciled) isEvent()         {}
func (ActionsNotStarted) isEvent()  {}
func (CancelRequested) isEvent()    {}
func (RunHandedOff) isEvent()       {}
func (RunRecovered) isEvent()       {}
func (RunFinished) isEvent()        {}
func (ChildStarted) isEvent()       {}
func (ChildSettled) isEvent()       {}

// Resolved is emitted when a person recorded the final truth of an open
// question: an action reconciled as unconfirmed ({"unconfirmed": note}),
// whose effect the run went on without knowing. Kind is "output" (the
// effect happened; Content is the tool's encoded output) or "error" (it did
// not; Content is {"error": message}). It is audit only: nothing resumes
// and nothing of the run changes (the model already read the note, and a
// finished run stays finished), so it may follow RunFinished. An action is
// resolved at most once.
type Resolved struct {
	Action  string          `json:"action"`
	Kind    string          `json:"kind"`
	Content json.RawMessage `json:"content"`
	By      string          `json:"by,omitempty"`
}

// EventName returns "resolved".
func (Resolved) EventName() Name { return NameResolved }

// SchemaVersion returns 1.
func (Resolved) SchemaVersion() int { return 1 }

func (Resolved) isEvent() {}

func (ChildStarted) EventName() Name { return NameChildStarted }
func (ChildSettled) EventName() Name { return NameChildSettled }
