package events

import "encoding/json"

// The types of this file are the log's own record of a model turn. They
// mirror the model port's (package model) on purpose, and are kept apart
// from them on purpose: the model package is an API that adapters and
// applications evolve, the log is a durable format that must read the
// same for ever. The decision core (aggregate) speaks only these; the
// runner converts between the two where it talks to the model port
// (docs/adr/0018, docs/adr/0037); a change to the model package never
// changes what is stored, and a change here is pinned by the golden
// encodings (testdata/encoding).

// ReplyKind is what the model's reply to a turn was, as ModelReplied
// records it.
type ReplyKind string

// The kinds of ModelReplied. A kind the model port reported that is none
// of these is recorded as reported (the run then fails
// model_protocol_violation).
const (
	// ReplyFinalAnswer is a final answer: Text (or the typed answer decoded
	// from it) ends the run.
	ReplyFinalAnswer ReplyKind = "final_answer"
	// ReplyToolRequest is an assistant turn with Calls: one action per call.
	ReplyToolRequest ReplyKind = "tool_request"
	// ReplyRefusal is a refusal by the model or its provider; Reason says
	// why and the run finishes refused.
	ReplyRefusal ReplyKind = "refusal"
	// ReplyTruncated is a reply cut at the output limit; Reason holds the
	// partial text, partial calls are dropped and the run finishes
	// output_limited.
	ReplyTruncated ReplyKind = "truncated"
)

// ToolCall is one call of a tool request as the model made it: the
// provider's call id (unique within the reply), the tool name and the
// arguments exactly as sent.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Usage is the token usage a provider reported for one turn. A reply
// without a report records no Usage at all, never zeros.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Total returns input plus output tokens, what a token budget counts.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// FailureKind is the class of a failed model turn, as ModelFailed records
// it (docs/semantics.md §2, model retry delay).
type FailureKind string

// The kinds of ModelFailed. The first four are retryable: the turn is
// tried again after the retry delay while turns are left; the others fail
// the run model_failed.
const (
	// FailureUnreachable is a connection refused or reset, or a DNS failure.
	FailureUnreachable FailureKind = "unreachable"
	// FailureTimedOut is a call the model timeout stopped.
	FailureTimedOut FailureKind = "timed_out"
	// FailureRateLimited is a provider's rate limit (HTTP 429); RetryAfter
	// is its requested delay.
	FailureRateLimited FailureKind = "rate_limited"
	// FailureOverloaded is a provider error or overload (HTTP 5xx, 529).
	FailureOverloaded FailureKind = "overloaded"
	// FailureRejected is an authentication or permission failure (HTTP 401,
	// 403).
	FailureRejected FailureKind = "rejected"
	// FailureInvalidRequest is a request the provider found malformed
	// (HTTP 400, 404, 422).
	FailureInvalidRequest FailureKind = "invalid_request"
	// FailureInvalidReply is a reply that could not be read, or was too
	// large to record.
	FailureInvalidReply FailureKind = "invalid_reply"
	// FailureCrashed is an adapter that panicked.
	FailureCrashed FailureKind = "crashed"
	// FailureOther is any other failure.
	FailureOther FailureKind = "other"
)

// Retryable reports whether a failure of this kind is retried after the
// retry delay (docs/semantics.md §2). It is the rule the recorded history is
// folded with, so it belongs to the log's kinds, not to the model port's.
func (k FailureKind) Retryable() bool {
	switch k {
	case FailureUnreachable, FailureTimedOut, FailureRateLimited, FailureOverloaded:
		return true
	}
	return false
}
