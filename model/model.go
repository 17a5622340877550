// Package model is the port between Weft and a language model: the request
// the runtime sends for one turn, the reply it expects and the typed errors a
// model adapter reports. Adapters (model/openai, model/anthropic) implement
// Model against a provider's official SDK; Scripted answers offline for tests
// and the demo.
//
// An adapter does no retries, keeps no conversation state and reads no clock
// for decisions: the runtime owns retries, budgets and timeouts, and rebuilds
// every Request from the run's log. Whatever an adapter needs to continue a
// conversation (provider call ids, reasoning signatures) it returns in
// Message.ProviderData, which the runtime stores in the assistant-turn event
// and hands back byte for byte on later turns.
package model

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Model is implemented by model adapters. Complete performs one turn: one
// call to the provider. It returns a Reply, or an *Error whose Kind tells the
// runtime whether to retry. It must honour ctx (the runtime's model timeout).
type Model interface {
	// Name identifies the model for telemetry, such as "openai:gpt-4.1".
	Name() string
	// Complete performs one model turn.
	Complete(ctx context.Context, req Request) (Reply, error)
}

// Role is the author of a transcript message.
type Role string

// The roles of transcript messages.
const (
	// RoleUser marks the run's input, or a corrective prompt.
	RoleUser Role = "user"
	// RoleAssistant marks a model turn: text and tool calls.
	RoleAssistant Role = "assistant"
	// RoleTool marks tool results, in call order.
	RoleTool Role = "tool"
)

// Message is one entry of a run's transcript.
type Message struct {
	// Role says who wrote the message.
	Role Role `json:"role"`
	// Text is the user's text, or the assistant's visible text.
	Text string `json:"text,omitempty"`
	// Calls are the tool calls of an assistant turn, in the order the model
	// made them.
	Calls []ToolCall `json:"calls,omitempty"`
	// ProviderData is opaque state an adapter needs to continue the
	// conversation after this assistant turn (reasoning blocks, signatures,
	// response ids). It is replayed byte for byte.
	ProviderData json.RawMessage `json:"provider_data,omitempty"`
	// Results are tool results (role tool), in call order.
	Results []ToolResult `json:"results,omitempty"`
}

// ToolCall is one tool call the model asked for.
type ToolCall struct {
	// ID is the provider-assigned call id; unique within one reply.
	ID string `json:"id"`
	// Name is the tool name the model called.
	Name string `json:"name"`
	// Arguments is the JSON the model sent, exactly as sent.
	Arguments json.RawMessage `json:"arguments"`
}

// ToolResult is what the model sees for one tool call.
type ToolResult struct {
	// CallID is the ToolCall.ID it answers.
	CallID string `json:"call_id"`
	// Name is the tool name of the call.
	Name string `json:"name"`
	// Content is the JSON the model reads: the encoded output, or an object
	// such as {"error": "denied", "detail": "..."}.
	Content json.RawMessage `json:"content"`
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	// Name is the tool's name.
	Name string `json:"name"`
	// Description is what the model reads about the tool.
	Description string `json:"description"`
	// InputSchema is the JSON Schema of the tool's arguments.
	InputSchema json.RawMessage `json:"input_schema"`
}

// Request is everything one model turn is given.
type Request struct {
	// Run is the run id; Turn the 1-based turn number; Correlation the
	// caller's correlation id. Adapters may pass them as request metadata.
	Run         string `json:"run"`
	Turn        int    `json:"turn"`
	Correlation string `json:"correlation,omitempty"`
	// System is the agent's system prompt.
	System string `json:"system,omitempty"`
	// Transcript is the conversation so far, oldest first. It always starts
	// with the run's input as a user message.
	Transcript []Message `json:"transcript"`
	// Tools are the tools the model may call.
	Tools []ToolSpec `json:"tools,omitempty"`
	// AnswerSchema, when set, is the JSON Schema the final answer must
	// satisfy (a typed final answer).
	AnswerSchema json.RawMessage `json:"answer_schema,omitempty"`
}

// ReplyKind is the closed set of successful model replies.
type ReplyKind string

// The kinds of reply.
const (
	// ReplyFinalAnswer means Turn.Text (or Answer) is the final answer.
	ReplyFinalAnswer ReplyKind = "final_answer"
	// ReplyToolRequest means Turn.Calls lists the calls the model asks for.
	ReplyToolRequest ReplyKind = "tool_request"
	// ReplyRefusal means the model or its provider refused; Reason says why.
	ReplyRefusal ReplyKind = "refusal"
	// ReplyTruncated means the reply hit the output limit; partial calls are
	// dropped.
	ReplyTruncated ReplyKind = "truncated"
)

// Usage is the token usage a provider reported for one turn.
type Usage struct {
	// InputTokens is the number of prompt tokens the provider counted.
	InputTokens int64 `json:"input_tokens"`
	// OutputTokens is the number of tokens the model generated.
	OutputTokens int64 `json:"output_tokens"`
}

// Total returns input plus output tokens.
func (u Usage) Total() int64 { return u.InputTokens + u.OutputTokens }

// Reply is a successful model turn.
type Reply struct {
	// Kind says what the model did.
	Kind ReplyKind `json:"kind"`
	// Turn is the assistant message: its text, its calls (for a tool
	// request) and its provider data. For a final answer Turn.Text is the
	// answer; for a typed answer it is the answer's JSON.
	Turn Message `json:"turn"`
	// Reason explains a refusal; for a truncated reply it is the partial
	// text.
	Reason string `json:"reason,omitempty"`
	// Usage is the reported usage; nil when the provider reported none.
	// Never report zero for missing usage.
	Usage *Usage `json:"usage,omitempty"`
}

// ErrorKind is the closed set of model failures.
type ErrorKind string

// The kinds of model failure. The first four are retryable.
const (
	// ErrUnreachable is a connection refused or reset, or a DNS failure.
	ErrUnreachable ErrorKind = "unreachable"
	// ErrTimedOut means the model timeout stopped the call.
	ErrTimedOut ErrorKind = "timed_out"
	// ErrRateLimited is an HTTP 429; RetryAfter comes from the provider.
	ErrRateLimited ErrorKind = "rate_limited"
	// ErrOverloaded is an HTTP 5xx, including 529.
	ErrOverloaded ErrorKind = "overloaded"
	// ErrRejected is an HTTP 401 or 403: authentication or permission.
	ErrRejected ErrorKind = "rejected"
	// ErrInvalidRequest is an HTTP 400, 404 or 422: the request was malformed.
	ErrInvalidRequest ErrorKind = "invalid_request"
	// ErrInvalidReply means the provider's reply could not be read.
	ErrInvalidReply ErrorKind = "invalid_reply"
	// ErrCrashed means the adapter panicked.
	ErrCrashed ErrorKind = "crashed"
	// ErrOther is any other failure.
	ErrOther ErrorKind = "other"
)

// Retryable reports whether the runtime retries a failure of this kind.
func (k ErrorKind) Retryable() bool {
	switch k {
	case ErrUnreachable, ErrTimedOut, ErrRateLimited, ErrOverloaded:
		return true
	}
	return false
}

// Error is a model failure. Adapters return *Error for every failure.
type Error struct {
	// Kind classifies the failure.
	Kind ErrorKind
	// RetryAfter is the provider's requested delay, zero when none.
	RetryAfter time.Duration
	// Status is the HTTP status, zero when there was no response.
	Status int
	// Message describes the failure; it never carries prompt text.
	Message string
}

// Error returns "model kind: message".
func (e *Error) Error() string {
	return fmt.Sprintf("model %s: %s", e.Kind, e.Message)
}
