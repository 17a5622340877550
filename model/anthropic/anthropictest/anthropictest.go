// Package anthropictest is a fake Anthropic Messages server for tests: a
// loopback httptest server that speaks the real wire JSON, records every
// request and answers with scripted replies in order. The adapter's own
// tests and the runtime's end-to-end tests use it the same way:
//
//	srv := anthropictest.NewFakeServer(t)
//	srv.Enqueue(
//		anthropictest.ToolUses(model.ToolCall{ID: "toolu_1", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)}),
//		anthropictest.Text("done"),
//	)
//	m := srv.Model("claude-sonnet-4-5") // an *anthropic.Model pointed at the fake
//
// Once the script is used up, a Responder set with Respond answers; without
// one, the request fails the test.
package anthropictest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic"
	"github.com/weftrun/weft/model/internal/fakeserver"
)

// Response is one scripted HTTP answer (status, headers, body, or a
// connection reset or hang).
type Response = fakeserver.Response

// Request is one request the fake received (method, path, headers, body).
type Request = fakeserver.Request

// Responder computes an answer from a request once the script is empty.
type Responder = fakeserver.Responder

// Path is the endpoint the adapter posts to.
const Path = "/v1/messages"

// Server is a fake Messages server.
type Server struct {
	*fakeserver.Server
}

// NewFakeServer starts a fake server that is closed when t ends.
func NewFakeServer(t testing.TB) *Server {
	return &Server{Server: fakeserver.Start(t)}
}

// BaseURL returns the base URL to give anthropic.WithBaseURL.
func (s *Server) BaseURL() string { return s.URL() }

// Model returns an adapter for the model name pointed at this server, with
// a test API key.
func (s *Server) Model(name string, opts ...anthropic.Option) *anthropic.Model {
	base := []anthropic.Option{anthropic.WithBaseURL(s.BaseURL()), anthropic.WithAPIKey("test-key")}
	return anthropic.New(name, append(base, opts...)...)
}

// Usage returns the usage that Text and ToolUses report.
func Usage() model.Usage { return model.Usage{InputTokens: 10, OutputTokens: 5} }

// Block is one content block of a reply, as raw JSON. The builders below
// write the fields in the order the API does (type first).
type Block = json.RawMessage

// TextBlock is a text block.
func TextBlock(text string) Block {
	return mustJSON(struct {
		Type      string `json:"type"`
		Text      string `json:"text"`
		Citations []any  `json:"citations"`
	}{"text", text, nil})
}

// ToolUseBlock is a tool_use block for call.
func ToolUseBlock(call model.ToolCall) Block {
	return mustJSON(struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}{"tool_use", call.ID, call.Name, call.Arguments})
}

// ThinkingBlock is a thinking block with its signature.
func ThinkingBlock(thinking, signature string) Block {
	return mustJSON(struct {
		Type      string `json:"type"`
		Thinking  string `json:"thinking"`
		Signature string `json:"signature"`
	}{"thinking", thinking, signature})
}

// RedactedThinkingBlock is a redacted_thinking block.
func RedactedThinkingBlock(data string) Block {
	return mustJSON(struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}{"redacted_thinking", data})
}

// Message describes a Messages API reply.
type Message struct {
	// Content is the reply's blocks, in order.
	Content []Block
	// StopReason defaults to "tool_use" when a tool_use block is present
	// and "end_turn" otherwise.
	StopReason string
	// StopDetails is sent as stop_details when set (for refusals).
	StopDetails json.RawMessage
	// Usage is reported when set.
	Usage *model.Usage
}

// Body returns the message's JSON as Anthropic sends it.
func (m Message) Body() []byte {
	stop := m.StopReason
	if stop == "" {
		stop = "end_turn"
		for _, b := range m.Content {
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(b, &t) == nil && t.Type == "tool_use" {
				stop = "tool_use"
			}
		}
	}
	content := m.Content
	if content == nil {
		content = []Block{}
	}
	body := map[string]any{
		"id":            "msg_fake",
		"type":          "message",
		"role":          "assistant",
		"model":         "fake-model",
		"content":       content,
		"stop_reason":   stop,
		"stop_sequence": nil,
	}
	if m.StopDetails != nil {
		body["stop_details"] = m.StopDetails
	}
	if m.Usage != nil {
		body["usage"] = map[string]any{
			"input_tokens":                m.Usage.InputTokens,
			"output_tokens":               m.Usage.OutputTokens,
			"cache_creation_input_tokens": 0,
			"cache_read_input_tokens":     0,
		}
	}
	return mustJSON(body)
}

// Response returns the message as a 200 response.
func (m Message) Response() Response { return Response{Body: m.Body()} }

// Text is a final answer with one text block and Usage().
func Text(text string) Response {
	u := Usage()
	return Message{Content: []Block{TextBlock(text)}, Usage: &u}.Response()
}

// ToolUses is a tool request with one tool_use block per call and Usage().
func ToolUses(calls ...model.ToolCall) Response {
	u := Usage()
	m := Message{Usage: &u}
	for _, c := range calls {
		m.Content = append(m.Content, ToolUseBlock(c))
	}
	return m.Response()
}

// Error is an error response in Anthropic's {"type":"error","error":{...}}
// shape. A non-zero retryAfter sets the retry-after header in seconds.
func Error(status int, typ, message string, retryAfter int) Response {
	body := mustJSON(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": message}})
	r := Response{Status: status, Body: body, Header: http.Header{}}
	r.Header.Set("Request-Id", "req_fake")
	if retryAfter > 0 {
		r.Header.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	return r
}

// Reset closes the connection without a response.
func Reset() Response { return Response{Reset: true} }

// Hang answers nothing until the client gives up.
func Hang() Response { return Response{Hang: true} }

// MessagesRequest is the part of a Messages request body tests check.
type MessagesRequest struct {
	Model        string          `json:"model"`
	MaxTokens    int64           `json:"max_tokens"`
	System       json.RawMessage `json:"system"`
	Messages     []WireMessage   `json:"messages"`
	Tools        []WireTool      `json:"tools"`
	OutputConfig json.RawMessage `json:"output_config"`
	Thinking     json.RawMessage `json:"thinking"`
	ToolChoice   json.RawMessage `json:"tool_choice"`
	Stream       *bool           `json:"stream"`
}

// WireMessage is one message of a request.
type WireMessage struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

// WireTool is one tool of a request.
type WireTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Decode decodes a recorded request's body.
func Decode(r Request) (MessagesRequest, error) {
	var m MessagesRequest
	if err := json.Unmarshal(r.Body, &m); err != nil {
		return m, fmt.Errorf("anthropictest: request body: %w", err)
	}
	return m, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("anthropictest: %v", err))
	}
	return b
}
