// Package openaitest is a fake OpenAI Chat Completions server for tests: a
// loopback httptest server that speaks the real wire JSON, records every
// request and answers with scripted replies in order. The adapter's own
// tests and the runtime's end-to-end tests use it the same way:
//
//	srv := openaitest.NewFakeServer(t)
//	srv.Enqueue(
//		openaitest.ToolCalls(model.ToolCall{ID: "call_1", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)}),
//		openaitest.Text("done"),
//	)
//	m := srv.Model("gpt-4.1") // an *openai.Model pointed at the fake
//
// Once the script is used up, a Responder set with Respond answers; without
// one, the request fails the test.
package openaitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/internal/fakeserver"
	"github.com/weftrun/weft/model/openai"
)

// Response is one scripted HTTP answer (status, headers, body, or a
// connection reset or hang).
type Response = fakeserver.Response

// Request is one request the fake received (method, path, headers, body).
type Request = fakeserver.Request

// Responder computes an answer from a request once the script is empty.
type Responder = fakeserver.Responder

// Path is the endpoint the adapter posts to.
const Path = "/v1/chat/completions"

// Server is a fake Chat Completions server.
type Server struct {
	*fakeserver.Server
}

// NewFakeServer starts a fake server that is closed when t ends.
func NewFakeServer(t testing.TB) *Server {
	return &Server{Server: fakeserver.Start(t)}
}

// BaseURL returns the base URL to give openai.WithBaseURL.
func (s *Server) BaseURL() string { return s.URL() + "/v1" }

// Model returns an adapter for the model name pointed at this server, with
// a test API key.
func (s *Server) Model(name string, opts ...openai.Option) *openai.Model {
	base := []openai.Option{openai.WithBaseURL(s.BaseURL()), openai.WithAPIKey("test-key")}
	return openai.New(name, append(base, opts...)...)
}

// Usage returns the usage that Text and ToolCalls report.
func Usage() model.Usage { return model.Usage{InputTokens: 10, OutputTokens: 5} }

// Completion describes a chat completion reply.
type Completion struct {
	// Content is the assistant's text.
	Content string
	// Null sends "content": null instead of Content.
	Null bool
	// Calls are function tool calls; their Arguments are sent as the
	// arguments string.
	Calls []model.ToolCall
	// RawArguments, when set, replaces the arguments string of the call with
	// the same index (to send malformed arguments).
	RawArguments map[int]string
	// Refusal is the message's refusal text.
	Refusal string
	// FinishReason defaults to "tool_calls" with calls and "stop" otherwise.
	FinishReason string
	// Usage is reported when set.
	Usage *model.Usage
}

// Body returns the completion's JSON as OpenAI sends it.
func (c Completion) Body() []byte {
	type function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type call struct {
		ID       string   `json:"id"`
		Type     string   `json:"type"`
		Function function `json:"function"`
	}
	msg := map[string]any{"role": "assistant", "content": c.Content, "refusal": nil, "annotations": []any{}}
	if c.Null {
		msg["content"] = nil
	}
	if c.Refusal != "" {
		msg["refusal"] = c.Refusal
	}
	if len(c.Calls) > 0 {
		calls := make([]call, len(c.Calls))
		for i, tc := range c.Calls {
			args := string(tc.Arguments)
			if raw, ok := c.RawArguments[i]; ok {
				args = raw
			}
			calls[i] = call{ID: tc.ID, Type: "function", Function: function{Name: tc.Name, Arguments: args}}
		}
		msg["tool_calls"] = calls
	}
	finish := c.FinishReason
	if finish == "" {
		finish = "stop"
		if len(c.Calls) > 0 {
			finish = "tool_calls"
		}
	}
	body := map[string]any{
		"id":      "chatcmpl-fake",
		"object":  "chat.completion",
		"created": 1767225600,
		"model":   "fake-model",
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"logprobs":      nil,
			"finish_reason": finish,
		}},
		"system_fingerprint": "fp_fake",
	}
	if c.Usage != nil {
		body["usage"] = map[string]any{
			"prompt_tokens":     c.Usage.InputTokens,
			"completion_tokens": c.Usage.OutputTokens,
			"total_tokens":      c.Usage.Total(),
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		panic(fmt.Sprintf("openaitest: %v", err))
	}
	return b
}

// Response returns the completion as a 200 response.
func (c Completion) Response() Response { return Response{Body: c.Body()} }

// Text is a final answer with text and Usage().
func Text(text string) Response {
	u := Usage()
	return Completion{Content: text, Usage: &u}.Response()
}

// ToolCalls is a tool request with the calls, null content and Usage().
func ToolCalls(calls ...model.ToolCall) Response {
	u := Usage()
	return Completion{Null: true, Calls: calls, Usage: &u}.Response()
}

// Error is an error response in OpenAI's {"error": {...}} shape. A non-zero
// retryAfterMS sets the retry-after-ms header.
func Error(status int, typ, message string, retryAfterMS int) Response {
	body, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": nil, "code": nil,
	}})
	r := Response{Status: status, Body: body, Header: http.Header{}}
	if retryAfterMS > 0 {
		r.Header.Set("Retry-After-Ms", strconv.Itoa(retryAfterMS))
	}
	return r
}

// Reset closes the connection without a response.
func Reset() Response { return Response{Reset: true} }

// Hang answers nothing until the client gives up.
func Hang() Response { return Response{Hang: true} }

// ChatRequest is the part of a Chat Completions request body tests check.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Tools               []ChatTool      `json:"tools"`
	ResponseFormat      json.RawMessage `json:"response_format"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Stream              *bool           `json:"stream"`
}

// ChatMessage is one message of a request.
type ChatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"tool_call_id"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
}

// Text returns the message's content when it is a JSON string.
func (m ChatMessage) Text() string {
	var s string
	_ = json.Unmarshal(m.Content, &s)
	return s
}

// ChatTool is one tool of a request.
type ChatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// Decode decodes a recorded request's body.
func Decode(r Request) (ChatRequest, error) {
	var c ChatRequest
	if err := json.Unmarshal(r.Body, &c); err != nil {
		return c, fmt.Errorf("openaitest: request body: %w", err)
	}
	return c, nil
}
