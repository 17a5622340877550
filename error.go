// Package weft is the root of the Weft module: a durable runtime for LLM
// agents that take real actions, event-sourced over NATS JetStream.
//
// This package holds what every other package shares: the one coded error
// type whose codes are the protocol's error codes (docs/protocol.md). The
// runtime itself lives in the sub-packages: events (the log's catalogue),
// aggregate (the pure decision core), tools, agent, policy, approvers, model,
// eventlog, runner, worker and projections.
package weft

import (
	"errors"
	"fmt"
)

// Code is a stable protocol error code. Codes are part of the wire protocol:
// they are never renamed or reused, and each one is documented in
// docs/protocol.md.
type Code string

// The closed set of protocol error codes.
const (
	// Input problems: the request was refused and nothing was written.

	// CodeInvalidJSON means the body is not valid JSON.
	CodeInvalidJSON Code = "invalid_json"
	// CodeInvalidRequest means a field is missing, of the wrong type or out of range.
	CodeInvalidRequest Code = "invalid_request"
	// CodePayloadTooLarge means the body or a field is over its size limit.
	CodePayloadTooLarge Code = "payload_too_large"
	// CodeInvalidName means a run id, tool or agent name breaks its grammar.
	CodeInvalidName Code = "invalid_name"
	// CodeUnknownRun means no run has this id.
	CodeUnknownRun Code = "unknown_run"
	// CodeUnknownAgent means no runner serves this agent name and version.
	CodeUnknownAgent Code = "unknown_agent"
	// CodeUnknownTool means no tool has this name.
	CodeUnknownTool Code = "unknown_tool"
	// CodeBadFilter means a query filter is malformed.
	CodeBadFilter Code = "bad_filter"
	// CodeBadCursor means a paging cursor is malformed or stale.
	CodeBadCursor Code = "bad_cursor"

	// Run and action state: the command does not apply to the run as it is.

	// CodeAlreadyStarted means a run with this id exists (see SameInput).
	CodeAlreadyStarted Code = "already_started"
	// CodeKeyReused means an idempotency key was used before with another input (MCP serve).
	CodeKeyReused Code = "key_reused"
	// CodeWrongReference means the action does not exist in this run.
	CodeWrongReference Code = "wrong_reference"
	// CodeStaleReference means the revision or requirement was superseded.
	CodeStaleReference Code = "stale_reference"
	// CodeAlreadyAnswered means the approval request has an answer.
	CodeAlreadyAnswered Code = "already_answered"
	// CodeApprovalExpired means the approval request expired before the answer.
	CodeApprovalExpired Code = "approval_expired"
	// CodeRunEnded means the run has finished.
	CodeRunEnded Code = "run_ended"
	// CodeProofRefused means the approval proof was refused (see Reason).
	CodeProofRefused Code = "proof_refused"
	// CodeNotReconcilable means the action is not uncertain.
	CodeNotReconcilable Code = "not_reconcilable"
	// CodeAlreadyRecorded means the action already has its result.
	CodeAlreadyRecorded Code = "already_recorded"
	// CodeNotAwaited means nobody waits for this settlement any more.
	CodeNotAwaited Code = "not_awaited"
	// CodeSettleUnconfirmed means the store outcome of a settlement is unknown.
	CodeSettleUnconfirmed Code = "settle_unconfirmed"
	// CodeOutcomeUnknown means a forwarded command got no answer in time, or a command's append got no
	// acknowledgement and the run could not be read: it may or may not have been applied.
	CodeOutcomeUnknown Code = "outcome_unknown"
	// CodeInvalidContent means reconciliation content has the wrong shape,
	// or an approve's edited arguments do not fit the tool's input schema.
	CodeInvalidContent Code = "invalid_content"
	// CodeRunActive means the stored-run form was used on a live run.
	CodeRunActive Code = "run_active"
	// CodeRunNotEnded is reserved: never sent today, kept so that it is never reused.
	CodeRunNotEnded Code = "run_not_ended"
	// CodeNotResolvable means the action is no open question (not reconciled as unconfirmed).
	CodeNotResolvable Code = "not_resolvable"
	// CodeAlreadyResolved means the open question has its final truth already.
	CodeAlreadyResolved Code = "already_resolved"
	// CodeRunNotFinished means a restart named a run that has not finished
	// (docs/semantics.md §14): only a finished run is restarted.
	CodeRunNotFinished Code = "run_not_finished"
	// CodeUncertainActions means a restart's fork point has actions before
	// it whose outcome nobody knows (uncertain, or reconciled unconfirmed
	// and not resolved): reconcile or resolve them first. Actions names them.
	CodeUncertainActions Code = "uncertain_actions"
	// CodePermissionDenied means the NATS server refused the caller's user
	// the subject the request needs (its credentials lack the permission):
	// nothing was sent to Weft, and trying again with the same
	// credentials cannot help.
	CodePermissionDenied Code = "permission_denied"
	// CodeIdentityRequired means the deployment requires every person's
	// command to say who made it and why, and this one does not: Reason
	// "no_identity" (no signed proof where the deployment has person
	// keys, else no name) or "no_reason".
	CodeIdentityRequired Code = "identity_required"
	// CodeEditRefused means an approve with edited arguments was refused:
	// the policy would not allow the edited call under the request being
	// answered, or the call already started (an attempt, a child run)
	// with other arguments (docs/semantics.md §4, "Approving narrower
	// arguments").
	CodeEditRefused Code = "edit_refused"
	// CodeQuarantined means the run's log holds a message no reader can
	// fold; nothing acts on the run until it is repaired (weft repair).
	CodeQuarantined Code = "quarantined"

	// Runtime conditions: the command may succeed when retried.

	// CodeRunnerBusy means the command was not applied within the command timeout.
	CodeRunnerBusy Code = "runner_busy"
	// CodeContended means concurrent writers kept winning; nothing was applied.
	CodeContended Code = "contended"
	// CodeConflict means an append lost its optimistic-concurrency check.
	CodeConflict Code = "conflict"
	// CodeUnavailable means NATS or another dependency did not answer.
	CodeUnavailable Code = "unavailable"
	// CodeInternal means a bug; the message says where.
	CodeInternal Code = "internal"
)

// Error is the one coded domain error of Weft. Every refusal the runtime
// gives — by the aggregate, the command API or the CLI — is an *Error whose
// Code is a protocol error code. Compare with errors.As or Is, never by
// message.
type Error struct {
	// Code is the stable protocol code.
	Code Code `json:"code"`
	// Reason is a closed sub-code where the protocol defines one, such as
	// proof_refused's no_approvers or a run's finished outcome.
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable detail; it may change between versions.
	Message string `json:"message,omitempty"`
	// SameInput is set for already_started: whether the existing run has
	// the same agent and original input.
	SameInput *bool `json:"same_input,omitempty"`
	// Actions names the actions a refusal is about, for uncertain_actions.
	Actions []string `json:"actions,omitempty"`
}

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Error returns "code(reason): message".
func (e *Error) Error() string {
	s := string(e.Code)
	if e.Reason != "" {
		s += "(" + e.Reason + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, &weft.Error{Code: weft.CodeRunEnded}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) {
		return false
	}
	return t.Code == e.Code && (t.Reason == "" || t.Reason == e.Reason)
}

// UnknownRun returns the unknown_run refusal for run. Every part of Weft
// (runner, aggregate, query service, CLI) words it the same way:
// `no run "pay-7"`.
func UnknownRun(run string) *Error {
	return &Error{Code: CodeUnknownRun, Message: fmt.Sprintf("no run %q", run)}
}

// ErrorCode returns the protocol code of err, CodeInternal when err carries
// none, and "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// Retryable reports whether an answer with code c says "not applied, try
// again": a client that sends the same command again, with the same
// command id, after a backoff, may see it applied. This is the one table
// of retryable codes; every part of Weft that asks (the command API's
// reply cache, the first-party clients: client, api.Client, the weft CLI,
// the console, weft mcp serve) asks it here, and docs/protocol.md ("Retry
// rules") lists the same codes (a test keeps them equal).
//
// The retryable codes, and why:
//   - runner_busy: the command was not applied within the command
//     timeout (or its partition had no owner yet, or its runner was
//     draining) and never will be later; a runner applies it next time.
//   - contended: concurrent writers kept winning; nothing was applied.
//   - conflict: an append lost its optimistic-concurrency check while
//     runners took the run over from each other; nothing was applied.
//   - unavailable: NATS, a runner or another dependency did not answer;
//     nothing was written (an append whose acknowledgement was lost is
//     read back first: if it landed the answer is the success).
//   - settle_unconfirmed: whether the settlement was stored is not known;
//     the same command id, sent again, is judged again against the run
//     (a settlement stored meanwhile answers already_recorded).
//
// Every other code is not retryable: the answer is definite and kept for
// the command id (the same command id gets it again, byte for byte), or it
// needs a person (quarantined: the run's log is repaired first), or it is
// the runtime's own fault (internal), which a client does not retry on its
// own: an internal refusal makes the runner read the run again from its
// log, so the same command id sent again later may be applied; a worker's
// report is sent again (docs/protocol/41-tasks.md). outcome_unknown is not
// retryable either: it is kept for its command id, so a retry with the
// same id answers it again; the client reads the run to learn whether the
// command was applied (docs/protocol.md, "Retry rules").
func (c Code) Retryable() bool {
	switch c {
	case CodeRunnerBusy, CodeContended, CodeConflict, CodeUnavailable, CodeSettleUnconfirmed:
		return true
	}
	return false
}
