package events

import (
	"encoding/json"
	"math"
	"time"
)

// The durable names of the event types. Never rename or reuse one; retire a
// name by moving it to the reserved list below.
const (
	// NameRunStarted is the stored name of RunStarted, every run's first event.
	NameRunStarted Name = "run_started"
	// NameModelRequested is the stored name of ModelRequested, a turn about to call the model.
	NameModelRequested Name = "model_requested"
	// NameModelReplied is the stored name of ModelReplied, the reply of the awaited turn.
	NameModelReplied Name = "model_replied"
	// NameModelFailed is the stored name of ModelFailed, a failed or timed-out turn.
	NameModelFailed Name = "model_failed"
	// NameAnswerRejected is the stored name of AnswerRejected, an undecodable typed final answer.
	NameAnswerRejected Name = "answer_rejected"
	// NameCallValidated is the stored name of CallValidated, one call checked against its tool.
	NameCallValidated Name = "call_validated"
	// NamePolicyDecided is the stored name of PolicyDecided, the policy's answer for an action.
	NamePolicyDecided Name = "policy_decided"
	// NameApprovalRequested is the stored name of ApprovalRequested, an action waiting for a person.
	NameApprovalRequested Name = "approval_requested"
	// NameApprovalAnswered is the stored name of ApprovalAnswered, the one answer to an approval request.
	NameApprovalAnswered Name = "approval_answered"
	// NameRequirementChanged is the stored name of RequirementChanged, a re-run policy asking for another requirement.
	NameRequirementChanged Name = "requirement_changed"
	// NameActionQueued is the stored name of ActionQueued, an action allowed to run.
	NameActionQueued Name = "action_queued"
	// NameAttemptFenced is the stored name of AttemptFenced, the fence committed before a body starts.
	NameAttemptFenced Name = "attempt_fenced"
	// NameAttemptReported is the stored name of AttemptReported, a body's own result.
	NameAttemptReported Name = "attempt_reported"
	// NameAttemptLost is the stored name of AttemptLost, an attempt that ended without a result of its own.
	NameAttemptLost Name = "attempt_lost"
	// NameReportRefused is the stored name of ReportRefused, a report that matched no current attempt.
	NameReportRefused Name = "report_refused"
	// NameActionUncertain is the stored name of ActionUncertain, an action whose effect may have happened.
	NameActionUncertain Name = "action_uncertain"
	// NameSettlementAccepted is the stored name of SettlementAccepted, a recorded settlement.
	NameSettlementAccepted Name = "settlement_accepted"
	// NameSettlementRefused is the stored name of SettlementRefused, a settlement refused not_awaited.
	NameSettlementRefused Name = "settlement_refused"
	// NameReconciled is the stored name of Reconciled, a person's account of an uncertain action.
	NameReconciled Name = "reconciled"
	// NameActionsNotStarted is the stored name of ActionsNotStarted, actions that end without starting.
	NameActionsNotStarted Name = "actions_not_started"
	// NameCancelRequested is the stored name of CancelRequested, a run being cancelled.
	NameCancelRequested Name = "cancel_requested"
	// NameRunHandedOff is the stored name of RunHandedOff, a draining runner giving a run up.
	NameRunHandedOff Name = "run_handed_off"
	// NameRunRecovered is the stored name of RunRecovered, a takeover that bumps the incarnation.
	NameRunRecovered Name = "run_recovered"
	// NameRunFinished is the stored name of RunFinished, a run reaching its outcome.
	NameRunFinished Name = "run_finished"
	// NameChildStarted is the stored name of ChildStarted, a sub-agent delegation allowed to start.
	NameChildStarted Name = "child_started"
	// NameChildSettled is the stored name of ChildSettled, a delegation that ended.
	NameChildSettled Name = "child_settled"
	// NameResolved is the stored name of Resolved, the final truth of an unconfirmed reconciliation.
	NameResolved Name = "resolved"
	// NameAttemptClosed is the stored name of AttemptClosed, an attempt whose claim the runtime closed before any worker took it (or found its worker's claim, marked not started or not).
	NameAttemptClosed Name = "attempt_closed"
	// NameAttemptNotStarted is the stored name of AttemptNotStarted, a claim found by a close and marked not started by its worker afterwards.
	NameAttemptNotStarted Name = "attempt_not_started"
)

// Names returns every event name of the catalogue, in the order of this
// file, a fresh slice on each call. Decode knows exactly these names.
func Names() []Name {
	return []Name{
		NameRunStarted, NameModelRequested, NameModelReplied, NameModelFailed, NameAnswerRejected,
		NameCallValidated, NamePolicyDecided, NameApprovalRequested, NameApprovalAnswered,
		NameRequirementChanged, NameActionQueued, NameAttemptFenced, NameAttemptReported,
		NameAttemptLost, NameReportRefused, NameActionUncertain, NameSettlementAccepted,
		NameSettlementRefused, NameReconciled, NameActionsNotStarted, NameCancelRequested,
		NameRunHandedOff, NameRunRecovered, NameRunFinished, NameChildStarted, NameChildSettled,
		NameResolved, NameHeadSigned, NameAttemptClosed,
		NameRunPaused, NameRunResumed, NameRunForked, NameAttemptNotStarted,
	}
}

// Reserved returns the retired names that must never be used again, a
// fresh slice on each call (none so far).
func Reserved() []Name { return []Name{} }

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

// Limits are the limits of docs/semantics.md §2 that bind a run. They are
// recorded
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
	// TurnStart is the first turn of a run, on its input.
	TurnStart = "start"
	// TurnToolResults is a turn that feeds a batch's results back to the model.
	TurnToolResults = "tool_results"
	// TurnRetry is a turn that retries a retryable model failure after its delay.
	TurnRetry = "retry"
	// TurnCorrection is the corrective turn after an undecodable typed final answer.
	TurnCorrection = "correction"
	// TurnRecovery is a turn issued again because the previous call was lost with its runner; the lost turn stays spent.
	TurnRecovery = "recovery"
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
	Turn         int64           `json:"turn"`
	Kind         ReplyKind       `json:"kind"`
	Text         string          `json:"text,omitempty"`
	Calls        []ToolCall      `json:"calls,omitempty"`
	ProviderData json.RawMessage `json:"provider_data,omitempty"`
	Reason       string          `json:"reason,omitempty"`
	Usage        *Usage          `json:"usage,omitempty"`
}

// CreatesActions reports whether the reply is a well-formed tool request,
// the one kind of reply that creates actions: Kind tool_request with at
// least one call and no call id twice. A malformed request creates none
// (the run fails model_protocol_violation in the same decision). The
// aggregate and the read models both ask this event, so the rule is stated
// once.
func (e ModelReplied) CreatesActions() bool {
	if e.Kind != ReplyToolRequest || len(e.Calls) == 0 {
		return false
	}
	for i := range e.Calls {
		for j := range i {
			if e.Calls[i].ID == e.Calls[j].ID {
				return false
			}
		}
	}
	return true
}

// ModelFailed is emitted when the awaited model turn failed or timed out
// (kind timed_out). When the failure is retryable and a turn is left,
// RetryAt is the durable time of the next attempt (the retry delay doubled
// per consecutive failure up to 64x, or the provider's RetryAfter when
// longer, capped at 10 minutes); otherwise the run finishes in the same
// decision.
type ModelFailed struct {
	Turn       int64       `json:"turn"`
	Kind       FailureKind `json:"kind"`
	Status     int         `json:"status,omitempty"`
	Message    string      `json:"message,omitempty"`
	RetryAfter Millis      `json:"retry_after_ms,omitempty"`
	RetryAt    *time.Time  `json:"retry_at,omitempty"`
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
	// CallValid means the tool exists and the arguments decode with its input codec: the call goes on to policy.
	CallValid = "valid"
	// CallUnknownTool means the agent has no tool of that name: the model sees {"error":"unknown_tool"}.
	CallUnknownTool = "unknown_tool"
	// CallInvalidArguments means the arguments do not decode with the tool's input codec; Detail says where and why.
	CallInvalidArguments = "invalid_arguments"
	// CallLimitReached means a delegation over max children, max depth or the family turn budget; Detail names the bound.
	CallLimitReached = "limit_reached"
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
	// PolicyAllow lets the action run (ActionQueued, or ChildStarted for a delegation).
	PolicyAllow = "allow"
	// PolicyDeny ends the action denied; the model sees the Reason.
	PolicyDeny = "deny"
	// PolicyRequireApproval makes the action wait for an approval of Requirement.
	PolicyRequireApproval = "require_approval"
	// PolicyError records a policy error, panic or timeout: the run fails closed (policy_failed).
	PolicyError = "error"
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
	// Identity says whether the deployment vouches for Reviewer: verified
	// (and the key) for an answer with a signed proof by one of the
	// approver's keys; unverified for a name a client chose.
	Identity
	// Proof is the signed approval proof the answer was given with (an
	// approver of signed proofs, approvers.Signed), recorded as presented
	// so that anyone can re-check it offline (package proof, weft audit
	// verify); absent for answers authenticated otherwise.
	Proof *ApprovalProof `json:"proof,omitempty"`
	// Arguments are the approved arguments of an approve that narrowed the
	// call (docs/semantics.md §4, "Approving narrower arguments"): the
	// edited arguments as the approver sent them (compacted), which the
	// attempts and the body use instead of the model's (recorded with the
	// call, CallValidated.Normalized or ModelReplied). Absent for an answer
	// that approves the call as asked.
	Arguments json.RawMessage `json:"arguments,omitempty"`
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
	// Approved is, for an approve with edited arguments, the lowercase hex
	// SHA-256 of the approved arguments' canonical bytes (the proof then
	// covers both: the call as asked and what is approved instead); empty
	// for an answer to the call as asked.
	Approved string `json:"approved_sha256,omitempty"`
	Answer   string `json:"answer"`
	// Reason is, for a reject signed with its reason, the reason the
	// answer gives (the proof then covers it: package proof's v3 digest);
	// empty for a proof that states none (an approve, or a proof signed
	// before proofs stated reasons).
	Reason string `json:"reason,omitempty"`
	// Expires is the first instant at which the proof is refused, by the
	// store's clock.
	Expires time.Time `json:"expires"`
	// Signature is the base64url (unpadded) ed25519 signature.
	Signature string `json:"signature"`
}

// Identity is whether the deployment vouches for who made a person's
// command (an answer, a reconciliation, a resolution, a cancellation),
// embedded in that command's event (its fields are the event's).
// Verified is true only when the command carried a signed proof by a key
// the deployment trusts (an approver's key, or the runner's person keys):
// the recorded name is then the key's named holder and Key its public key.
// Otherwise the name is the one the client typed, recorded unverified
// (docs/security.md, "Who did it").
type Identity struct {
	Verified bool `json:"verified,omitempty"`
	// Key is the public nkey ("U…") of the proof's signer when Verified.
	Key string `json:"key,omitempty"`
}

// CommandProof is a signed command proof: the statement that the holder
// of Key makes exactly one person's command — Command (reconcile,
// reconcile_stored, resolve or cancel) on Run, for Action (empty for a
// cancel), with the SHA-256 of the canonical Content bytes (empty for a
// cancel) and Reason — valid until Expires (whole seconds). Signature is
// the ed25519 signature by Key over the statement's digest (package
// proof: docs/protocol/20-events.md, "Signed command proofs").
type CommandProof struct {
	// Key is the signer's public key, an nkey user key ("U…").
	Key     string `json:"key"`
	Command string `json:"command"`
	Run     string `json:"run"`
	Action  string `json:"action,omitempty"`
	// Content is the lowercase hex SHA-256 of the command's canonical
	// content bytes (reconcile, resolve).
	Content string `json:"content_sha256,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Expires is the first instant at which the proof is refused, by the
	// store's clock.
	Expires time.Time `json:"expires"`
	// Signature is the base64url (unpadded) ed25519 signature.
	Signature string `json:"signature"`
}

// The reasons of ApprovalRequested.
const (
	// AskPolicy is a request the policy asked for at the model's request.
	AskPolicy = "policy"
	// AskRequirementChanged is a request re-asked because the re-run policy wants another requirement.
	AskRequirementChanged = "requirement_changed"
	// AskRecovery is a request re-asked for an approved action that had not started at a loss.
	AskRecovery = "recovery"
)

// The answers of ApprovalAnswered.
const (
	// AnswerApprove approves the request; the policy is re-run before the action may run.
	AnswerApprove = "approve"
	// AnswerReject rejects the request; the policy is not re-run and the action ends rejected.
	AnswerReject = "reject"
	// AnswerExpired is recorded when the request's deadline passed by the store's clock.
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
// configuration, which every attempt of the action uses; a delegation
// allowed on a paused run is queued until the resume records its
// ChildStarted (docs/semantics.md §13). A replay does not
// queue again: AttemptLost with Next "replay" puts the action back in line.
type ActionQueued struct {
	Action string     `json:"action"`
	Why    string     `json:"why"`
	Config ToolConfig `json:"config"`
}

// The reasons of ActionQueued.
const (
	// QueuedAllowed is an action the policy allowed at the model's request.
	QueuedAllowed = "allowed"
	// QueuedApproved is an action allowed by the policy re-run after an approval.
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
	// OutcomeOutput is a body's (or settlement's) encoded output: the action succeeds.
	OutcomeOutput = "output"
	// OutcomeExplain is a definite failure with a message for the model: the action ends tool_failed.
	OutcomeExplain = "explain"
	// OutcomeUncertain is a typed uncertain result: the effect may have happened and it is never replayed.
	OutcomeUncertain = "uncertain"
	// OutcomeOversize is a result over max result bytes: the action is faulted, the effect did happen.
	OutcomeOversize = "oversize"
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
	// CauseTimedOut is a body still running at its timeout.
	CauseTimedOut = "timed_out"
	// CauseCrashed is a body whose worker reported it crashed (a lost report).
	CauseCrashed = "crashed"
	// CauseWorkerLost is a task redelivered after its worker vanished, reported lost.
	CauseWorkerLost = "worker_lost"
	// CauseRunnerLost is a body in flight when its runner was lost (found at recovery).
	CauseRunnerLost = "runner_lost"
	// CauseStopped is a body stopped by a cancellation or by the run finishing.
	CauseStopped = "stopped"

	// NextReplay queues the action again for a new attempt within its recorded budget.
	NextReplay = "replay"
	// NextReapprove asks again for the approval of an approved action whose runner was lost.
	NextReapprove = "reapprove"
	// NextSettle waits until SettleBy for a settling tool's settlement.
	NextSettle = "settle"
	// NextUncertain makes the action uncertain: a person reconciles it.
	NextUncertain = "uncertain"
)

// AttemptClosed is emitted when the runtime closed an attempt's claim
// before any worker claimed it, or found it marked not started by the
// worker that claimed it (NotStarted below; docs/adr/0023-closing-attempts.md,
// docs/semantics.md §8 "Closing an attempt"): the attempt's body never started
// and never will. It is recorded ahead of the events of the decision the
// close was made for, in the same append: a cancel or a run's end
// (ActionsNotStarted then names an action whose every attempt was closed),
// an attempt timer or a takeover (AttemptLost "replay", without spending the
// replay budget and keeping an approval), a rejected, expired or denied
// re-asked approval (which then ends the action as if it was never
// attempted). Attempt and Incarnation are the closed fence's (the action's
// latest); By is the runner that closed it and Why the path: "cancelled",
// "run_ended", "timed_out", "runner_lost", "handed_off" or "reasked". It
// changes no action's state: it marks the attempt as one that did not act.
//
// Claimed (added later; absent means false) records instead a close that
// found a worker's claim: the attempt may have acted (§5's rule stands),
// and no later decision closes it again — a create after that claim
// expired would win over a body that ran. By is then the runner that
// tried the close.
//
// NotStarted (added later; absent when none) records that the close
// found a worker's claim its worker had marked not started
// (api.Claim.NotStarted, docs/adr/0023-closing-attempts.md "Claims
// released as not started"): that worker claimed the attempt and never
// started its body, so it did not act, as if closed unclaimed (Claimed is
// false). By is then the runner that tried the close.
type AttemptClosed struct {
	Action      string `json:"action"`
	Attempt     int    `json:"attempt"`
	Incarnation int    `json:"incarnation"`
	By          string `json:"by"`
	Why         string `json:"why"`
	Claimed     bool   `json:"claimed,omitempty"`
	// ClaimWorker and ClaimToken are the worker and token (api.Claim) of
	// the claim a close with Claimed found; empty otherwise, and in logs
	// written before they were recorded. A late mark (AttemptNotStarted)
	// is accepted only from a claim with this token: a claim created again
	// under the key after this one expired is another claim
	// (docs/adr/0023-closing-attempts.md, "Late evidence: a mark after the
	// decision").
	ClaimWorker string `json:"claim_worker,omitempty"`
	ClaimToken  string `json:"claim_token,omitempty"`
	// NotStarted is the worker whose claim the close found marked not
	// started, and why; nil when the close found none.
	NotStarted *ClosedNotStarted `json:"not_started,omitempty"`
}

// ClosedNotStarted names the worker whose claim a close found marked not
// started (api.Claim.Worker) and why that worker did not start the body
// (api.ClaimNotStarted.Why: "ended", "stopped" or "deadline").
type ClosedNotStarted struct {
	Worker string `json:"worker"`
	Why    string `json:"why"`
}

// AttemptNotStarted is emitted when the worker's claim that a close found
// (AttemptClosed with Claimed: the action was decided uncertain) was marked
// not started by that worker afterwards (api.Claim.NotStarted,
// docs/adr/0023-closing-attempts.md "Late evidence: a mark after the
// decision"): the attempt's body never started and never will. It is
// decided from the claim's value as the runner read it, never from a
// worker's word alone. Attempt and Incarnation are the action's latest
// fence, the attempt the close found claimed; Worker and Why are the mark's
// (the claim's holder, and "ended", "stopped" or "deadline"); By is the
// runner that read the claim. The attempt then counts as closed (it did
// not act). Ended says the uncertain action ends not_started by it: every
// attempt it had is now closed unclaimed or marked not started; on a live
// run the model then reads that the call did not run
// (docs/adr/0023-closing-attempts.md, "A late mark on a live run").
// Otherwise (an earlier attempt may have acted) the action stays uncertain
// and the event is evidence only, for the person who reconciles it. It is recorded only for an action still
// uncertain — a reconciliation or a late settlement recorded first wins —
// also in a finished run.
type AttemptNotStarted struct {
	Action      string `json:"action"`
	Attempt     int    `json:"attempt"`
	Incarnation int    `json:"incarnation"`
	Worker      string `json:"worker"`
	Why         string `json:"why"`
	By          string `json:"by"`
	Ended       bool   `json:"ended,omitempty"`
}

// NotStartedMarked is the detail of an action AttemptNotStarted ended
// not_started.
const NotStartedMarked = "marked_not_started"

// The paths of AttemptClosed (the Why of api.ClaimClose).
const (
	// ClosedCancelled is a close made for a cancellation.
	ClosedCancelled = "cancelled"
	// ClosedRunEnded is a close made for a run finishing otherwise (a final
	// answer, a budget stop, a failure).
	ClosedRunEnded = "run_ended"
	// ClosedTimedOut is a close made when the attempt's deadline timer fired.
	ClosedTimedOut = "timed_out"
	// ClosedRunnerLost is a close made by a takeover after a lost runner.
	ClosedRunnerLost = "runner_lost"
	// ClosedHandedOff is a close made by a takeover after a hand-off past the drain.
	ClosedHandedOff = "handed_off"
	// ClosedReasked is a close made for the answer to a re-asked approval.
	ClosedReasked = "reasked"
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
	// RefusedForeign is a report for no such action or for an attempt never fenced.
	RefusedForeign = "foreign"
	// RefusedStale is a report of an earlier attempt than the current one.
	RefusedStale = "stale"
	// RefusedDuplicate is a second report of an attempt that already has its outcome.
	RefusedDuplicate = "duplicate"
	// RefusedNotRunning is a report for an action with no attempt in flight.
	RefusedNotRunning = "not_running"
	// RefusedRunFinished is a report that arrived after the run finished.
	RefusedRunFinished = "run_finished"
	// RefusedResultTooLarge is the reason of a late report, on an
	// uncertain action, whose encoded result is over max result bytes.
	RefusedResultTooLarge = "result_too_large"
)

// ActionUncertain is emitted when a settling tool's settle window closed
// without a settlement: the effect may or may not have happened and the run
// waits for a person. It is also emitted (docs/semantics.md §5: an attempted
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
	// Reason is why the person recorded it (optional unless the
	// deployment requires one).
	Reason string `json:"reason,omitempty"`
	// Identity says whether the deployment vouches for By (a signed
	// command proof by one of its keys).
	Identity
	// Proof is the signed command proof the reconciliation was made with.
	Proof *CommandProof `json:"proof,omitempty"`
}

// The kinds of Reconciled.
const (
	// ReconciledOutput records that the effect happened; Content is the tool's encoded output.
	ReconciledOutput = "output"
	// ReconciledError records that the effect did not happen; Content is {"error": message}.
	ReconciledError = "error"
	// ReconciledUnconfirmed records that nobody knows yet; Content is {"unconfirmed": note} and the run goes on.
	ReconciledUnconfirmed = "unconfirmed"
)

// ActionsNotStarted is emitted when actions end without ever starting:
// Reason "policy_failed", "budget_exhausted", "cancelled" or
// "run_finished". It never names an action that had a fenced attempt
// (such an action ends ActionUncertain instead) unless every attempt it had
// was closed before any worker claimed it (AttemptClosed) or marked not
// started by that worker (AttemptNotStarted): such an action may be
// running, or uncertain in a log whose late mark on a live run was recorded
// without Ended (before such a mark ended the action) and whose
// AttemptClosed recorded the found claim's token; no body of it started.
type ActionsNotStarted struct {
	Actions []string `json:"actions"`
	Reason  string   `json:"reason"`
}

// The reasons of ActionsNotStarted.
const (
	// NotStartedPolicyFailed ends a batch whose policy failed.
	NotStartedPolicyFailed = "policy_failed"
	// NotStartedBudgetExhausted ends a batch whose results could not be fed to another permitted turn.
	NotStartedBudgetExhausted = "budget_exhausted"
	// NotStartedCancelled ends the actions a cancellation found queued or awaiting approval.
	NotStartedCancelled = "cancelled"
	// NotStartedRunFinished ends the actions still waiting when the run finished otherwise.
	NotStartedRunFinished = "run_finished"
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
	// Identity says whether the deployment vouches for By (a signed
	// command proof by one of its keys).
	Identity
	// Proof is the signed command proof the cancellation was made with.
	Proof *CommandProof `json:"proof,omitempty"`
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
// (Cause "runner_lost", "handed_off" or "idle": handed_off exactly when the
// last incarnation ended with RunHandedOff; idle when the run waited only
// for people, nothing in flight, so nothing is recovered). It bumps the incarnation: reports
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
	// RecoveredRunnerLost is a takeover from a runner that is gone.
	RecoveredRunnerLost = "runner_lost"
	// RecoveredHandedOff is a takeover of a run its draining runner handed off.
	RecoveredHandedOff = "handed_off"
	// RecoveredIdle is a takeover of a run that waited only for people
	// (aggregate.Idle: suspended, nothing in flight, no timer but approval
	// expiries), recorded with the first decision that records something:
	// nothing was in flight, nothing is recovered. The previous runner may
	// be alive: it gave the run's partition up (docs/adr/0019-partitions.md).
	RecoveredIdle = "idle"
)

// Outcome is how a run finished (docs/semantics.md §6). Kind is one of the
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
	// OutcomeCompleted is a run that ended with a final answer (Answer).
	OutcomeCompleted = "completed"
	// OutcomeAnswerInvalid is a typed final answer still undecodable when attempts, turns or tokens ran out (Raw, Reason).
	OutcomeAnswerInvalid = "answer_invalid"
	// OutcomeRefused is a model refusal (Reason).
	OutcomeRefused = "refused"
	// OutcomeOutputLimited is a reply truncated by the provider (Partial).
	OutcomeOutputLimited = "output_limited"
	// OutcomeBudgetExhausted is a run out of turns, tokens or family turns (Reason, Limit, Used).
	OutcomeBudgetExhausted = "budget_exhausted"
	// OutcomeBudgetUnverifiable is a reply without usage under a token budget (Turn).
	OutcomeBudgetUnverifiable = "budget_unverifiable"
	// OutcomeCancelled is a cancelled run.
	OutcomeCancelled = "cancelled"
	// OutcomeFailed is a run that failed (Reason, one of the failed reasons below).
	OutcomeFailed = "failed"

	// ReasonTurnLimit is budget_exhausted by max turns.
	ReasonTurnLimit = "turn_limit"
	// ReasonTokenLimit is budget_exhausted by the token budget.
	ReasonTokenLimit = "token_limit"
	// ReasonFamilyLimit is budget_exhausted by the family turn budget of a child run.
	ReasonFamilyLimit = "family_limit"
	// ReasonPolicyFailed is failed because the policy errored, panicked or timed out.
	ReasonPolicyFailed = "policy_failed"
	// ReasonOutputEncodingFailed is failed because a result was over max result bytes (Setting names it).
	ReasonOutputEncodingFailed = "output_encoding_failed"
	// ReasonToolChanged is failed because the redeployed agent no longer has a tool a live action needs (Action).
	ReasonToolChanged = "tool_changed"
	// ReasonModelFailed is failed by a non-retryable model error.
	ReasonModelFailed = "model_failed"
	// ReasonModelProtocolViolation is failed by an empty call list or duplicate call ids in one reply.
	ReasonModelProtocolViolation = "model_protocol_violation"
)

// RunFinished is emitted when a run reaches its outcome. Actions that never
// started end not_started and running bodies are stopped in the same
// decision, before it. Only stored-form reconciliations (Reconciled with
// Stored), refused settlements and refused reports follow it.
type RunFinished struct {
	Outcome Outcome `json:"outcome"`
}

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
	// Reason is why the person recorded it (optional unless the
	// deployment requires one).
	Reason string `json:"reason,omitempty"`
	// Identity says whether the deployment vouches for By (a signed
	// command proof by one of its keys).
	Identity
	// Proof is the signed command proof the resolution was made with.
	Proof *CommandProof `json:"proof,omitempty"`
}

// EventName returns "resolved".

// SchemaVersion returns 1.

// EventName returns NameRunStarted, the durable name RunStarted is stored under.
func (RunStarted) EventName() Name { return NameRunStarted }

// SchemaVersion returns 1, the version of RunStarted's encoding (docs/protocol.md).
func (RunStarted) SchemaVersion() int { return 1 }

func (RunStarted) isEvent() {}

// EventName returns NameModelRequested, the durable name ModelRequested is stored under.
func (ModelRequested) EventName() Name { return NameModelRequested }

// SchemaVersion returns 1, the version of ModelRequested's encoding (docs/protocol.md).
func (ModelRequested) SchemaVersion() int { return 1 }

func (ModelRequested) isEvent() {}

// EventName returns NameModelReplied, the durable name ModelReplied is stored under.
func (ModelReplied) EventName() Name { return NameModelReplied }

// SchemaVersion returns 1, the version of ModelReplied's encoding (docs/protocol.md).
func (ModelReplied) SchemaVersion() int { return 1 }

func (ModelReplied) isEvent() {}

// EventName returns NameModelFailed, the durable name ModelFailed is stored under.
func (ModelFailed) EventName() Name { return NameModelFailed }

// SchemaVersion returns 1, the version of ModelFailed's encoding (docs/protocol.md).
func (ModelFailed) SchemaVersion() int { return 1 }

func (ModelFailed) isEvent() {}

// EventName returns NameAnswerRejected, the durable name AnswerRejected is stored under.
func (AnswerRejected) EventName() Name { return NameAnswerRejected }

// SchemaVersion returns 1, the version of AnswerRejected's encoding (docs/protocol.md).
func (AnswerRejected) SchemaVersion() int { return 1 }

func (AnswerRejected) isEvent() {}

// EventName returns NameCallValidated, the durable name CallValidated is stored under.
func (CallValidated) EventName() Name { return NameCallValidated }

// SchemaVersion returns 1, the version of CallValidated's encoding (docs/protocol.md).
func (CallValidated) SchemaVersion() int { return 1 }

func (CallValidated) isEvent() {}

// EventName returns NamePolicyDecided, the durable name PolicyDecided is stored under.
func (PolicyDecided) EventName() Name { return NamePolicyDecided }

// SchemaVersion returns 1, the version of PolicyDecided's encoding (docs/protocol.md).
func (PolicyDecided) SchemaVersion() int { return 1 }

func (PolicyDecided) isEvent() {}

// EventName returns NameApprovalRequested, the durable name ApprovalRequested is stored under.
func (ApprovalRequested) EventName() Name { return NameApprovalRequested }

// SchemaVersion returns 1, the version of ApprovalRequested's encoding (docs/protocol.md).
func (ApprovalRequested) SchemaVersion() int { return 1 }

func (ApprovalRequested) isEvent() {}

// EventName returns NameApprovalAnswered, the durable name ApprovalAnswered is stored under.
func (ApprovalAnswered) EventName() Name { return NameApprovalAnswered }

// SchemaVersion returns 1, the version of ApprovalAnswered's encoding (docs/protocol.md).
func (ApprovalAnswered) SchemaVersion() int { return 1 }

func (ApprovalAnswered) isEvent() {}

// EventName returns NameRequirementChanged, the durable name RequirementChanged is stored under.
func (RequirementChanged) EventName() Name { return NameRequirementChanged }

// SchemaVersion returns 1, the version of RequirementChanged's encoding (docs/protocol.md).
func (RequirementChanged) SchemaVersion() int { return 1 }

func (RequirementChanged) isEvent() {}

// EventName returns NameActionQueued, the durable name ActionQueued is stored under.
func (ActionQueued) EventName() Name { return NameActionQueued }

// SchemaVersion returns 1, the version of ActionQueued's encoding (docs/protocol.md).
func (ActionQueued) SchemaVersion() int { return 1 }

func (ActionQueued) isEvent() {}

// EventName returns NameAttemptFenced, the durable name AttemptFenced is stored under.
func (AttemptFenced) EventName() Name { return NameAttemptFenced }

// SchemaVersion returns 1, the version of AttemptFenced's encoding (docs/protocol.md).
func (AttemptFenced) SchemaVersion() int { return 1 }

func (AttemptFenced) isEvent() {}

// EventName returns NameAttemptReported, the durable name AttemptReported is stored under.
func (AttemptReported) EventName() Name { return NameAttemptReported }

// SchemaVersion returns 1, the version of AttemptReported's encoding (docs/protocol.md).
func (AttemptReported) SchemaVersion() int { return 1 }

func (AttemptReported) isEvent() {}

// EventName returns NameAttemptLost, the durable name AttemptLost is stored under.
func (AttemptLost) EventName() Name { return NameAttemptLost }

// SchemaVersion returns 1, the version of AttemptLost's encoding (docs/protocol.md).
func (AttemptLost) SchemaVersion() int { return 1 }

func (AttemptLost) isEvent() {}

// EventName returns NameReportRefused, the durable name ReportRefused is stored under.
func (ReportRefused) EventName() Name { return NameReportRefused }

// SchemaVersion returns 1, the version of ReportRefused's encoding (docs/protocol.md).
func (ReportRefused) SchemaVersion() int { return 1 }

func (ReportRefused) isEvent() {}

// EventName returns NameActionUncertain, the durable name ActionUncertain is stored under.
func (ActionUncertain) EventName() Name { return NameActionUncertain }

// SchemaVersion returns 1, the version of ActionUncertain's encoding (docs/protocol.md).
func (ActionUncertain) SchemaVersion() int { return 1 }

func (ActionUncertain) isEvent() {}

// EventName returns NameSettlementAccepted, the durable name SettlementAccepted is stored under.
func (SettlementAccepted) EventName() Name { return NameSettlementAccepted }

// SchemaVersion returns 1, the version of SettlementAccepted's encoding (docs/protocol.md).
func (SettlementAccepted) SchemaVersion() int { return 1 }

func (SettlementAccepted) isEvent() {}

// EventName returns NameSettlementRefused, the durable name SettlementRefused is stored under.
func (SettlementRefused) EventName() Name { return NameSettlementRefused }

// SchemaVersion returns 1, the version of SettlementRefused's encoding (docs/protocol.md).
func (SettlementRefused) SchemaVersion() int { return 1 }

func (SettlementRefused) isEvent() {}

// EventName returns NameReconciled, the durable name Reconciled is stored under.
func (Reconciled) EventName() Name { return NameReconciled }

// SchemaVersion returns 1, the version of Reconciled's encoding (docs/protocol.md).
func (Reconciled) SchemaVersion() int { return 1 }

func (Reconciled) isEvent() {}

// EventName returns NameActionsNotStarted, the durable name ActionsNotStarted is stored under.
func (ActionsNotStarted) EventName() Name { return NameActionsNotStarted }

// SchemaVersion returns 1, the version of ActionsNotStarted's encoding (docs/protocol.md).
func (ActionsNotStarted) SchemaVersion() int { return 1 }

func (ActionsNotStarted) isEvent() {}

// EventName returns NameCancelRequested, the durable name CancelRequested is stored under.
func (CancelRequested) EventName() Name { return NameCancelRequested }

// SchemaVersion returns 1, the version of CancelRequested's encoding (docs/protocol.md).
func (CancelRequested) SchemaVersion() int { return 1 }

func (CancelRequested) isEvent() {}

// EventName returns NameRunHandedOff, the durable name RunHandedOff is stored under.
func (RunHandedOff) EventName() Name { return NameRunHandedOff }

// SchemaVersion returns 1, the version of RunHandedOff's encoding (docs/protocol.md).
func (RunHandedOff) SchemaVersion() int { return 1 }

func (RunHandedOff) isEvent() {}

// EventName returns NameRunRecovered, the durable name RunRecovered is stored under.
func (RunRecovered) EventName() Name { return NameRunRecovered }

// SchemaVersion returns 1, the version of RunRecovered's encoding (docs/protocol.md).
func (RunRecovered) SchemaVersion() int { return 1 }

func (RunRecovered) isEvent() {}

// EventName returns NameRunFinished, the durable name RunFinished is stored under.
func (RunFinished) EventName() Name { return NameRunFinished }

// SchemaVersion returns 1, the version of RunFinished's encoding (docs/protocol.md).
func (RunFinished) SchemaVersion() int { return 1 }

func (RunFinished) isEvent() {}

// EventName returns NameChildStarted, the durable name ChildStarted is stored under.
func (ChildStarted) EventName() Name { return NameChildStarted }

// SchemaVersion returns 1, the version of ChildStarted's encoding (docs/protocol.md).
func (ChildStarted) SchemaVersion() int { return 1 }

func (ChildStarted) isEvent() {}

// EventName returns NameChildSettled, the durable name ChildSettled is stored under.
func (ChildSettled) EventName() Name { return NameChildSettled }

// SchemaVersion returns 1, the version of ChildSettled's encoding (docs/protocol.md).
func (ChildSettled) SchemaVersion() int { return 1 }

func (ChildSettled) isEvent() {}

// EventName returns NameResolved, the durable name Resolved is stored under.
func (Resolved) EventName() Name { return NameResolved }

// SchemaVersion returns 1, the version of Resolved's encoding (docs/protocol.md).
func (Resolved) SchemaVersion() int { return 1 }

func (Resolved) isEvent() {}

// EventName returns NameAttemptClosed, the durable name AttemptClosed is stored under.
func (AttemptClosed) EventName() Name { return NameAttemptClosed }

// SchemaVersion returns 1, the version of AttemptClosed's encoding (docs/protocol.md).
func (AttemptClosed) SchemaVersion() int { return 1 }

func (AttemptClosed) isEvent() {}

// EventName returns NameAttemptNotStarted, the durable name AttemptNotStarted is stored under.
func (AttemptNotStarted) EventName() Name { return NameAttemptNotStarted }

// SchemaVersion returns 1, the version of AttemptNotStarted's encoding (docs/protocol.md).
func (AttemptNotStarted) SchemaVersion() int { return 1 }

func (AttemptNotStarted) isEvent() {}
