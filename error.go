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
	CodeInvalidJSON     Code = "invalid_json"      // the body is not valid JSON
	CodeInvalidRequest  Code = "invalid_request"   // a field is missing, of the wrong type or out of range
	CodePayloadTooLarge Code = "payload_too_large" // the body or a field is over its size limit
	CodeInvalidName     Code = "invalid_name"      // a run id, tool or agent name breaks its grammar
	CodeUnknownRun      Code = "unknown_run"       // no run has this id
	CodeUnknownAgent    Code = "unknown_agent"     // no runner serves this agent name and version
	CodeUnknownTool     Code = "unknown_tool"      // no tool has this name
	CodeBadFilter       Code = "bad_filter"        // a query filter is malformed
	CodeBadCursor       Code = "bad_cursor"        // a paging cursor is malformed or stale

	// Run and action state: the command does not apply to the run as it is.
	CodeAlreadyStarted    Code = "already_started"    // a run with this id exists (see SameInput)
	CodeKeyReused         Code = "key_reused"         // an idempotency key was used before with another input (MCP serve)
	CodeWrongReference    Code = "wrong_reference"    // the action does not exist in this run
	CodeStaleReference    Code = "stale_reference"    // the revision or requirement was superseded
	CodeAlreadyAnswered   Code = "already_answered"   // the approval request has an answer
	CodeApprovalExpired   Code = "approval_expired"   // the approval request expired before the answer
	CodeRunEnded          Code = "run_ended"          // the run has finished
	CodeProofRefused      Code = "proof_refused"      // the approval proof was refused (see Reason)
	CodeNotReconcilable   Code = "not_reconcilable"   // the action is not uncertain
	CodeAlreadyRecorded   Code = "already_recorded"   // the action already has its result
	CodeNotAwaited        Code = "not_awaited"        // nobody waits for this settlement any more
	CodeSettleUnconfirmed Code = "settle_unconfirmed" // the store outcome of a settlement is unknown
	CodeOutcomeUnknown    Code = "outcome_unknown"    // a forwarded command got no answer in time: it may or may not have been applied
	CodeInvalidContent    Code = "invalid_content"    // reconciliation content has the wrong shape
	CodeRunActive         Code = "run_active"         // the stored-run form was used on a live run
	CodeRunNotEnded       Code = "run_not_ended"      // reserved
	CodeNotResolvable     Code = "not_resolvable"     // the action is no open question (not reconciled as unconfirmed)
	CodeAlreadyResolved   Code = "already_resolved"   // the open question has its final truth already

	// Runtime conditions: the command may succeed when retried.
	CodeRunnerBusy  Code = "runner_busy" // the command was not applied within the command timeout
	CodeContended   Code = "contended"   // concurrent writers kept winning; nothing was applied
	CodeConflict    Code = "conflict"    // an append lost its optimistic-concurrency check
	CodeUnavailable Code = "unavailable" // NATS or another dependency did not answer
	CodeInternal    Code = "internal"    // a bug; the message says where
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
