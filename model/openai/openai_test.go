package openai_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/internal/adaptertest"
	"github.com/weftrun/weft/model/internal/fakeserver"
	"github.com/weftrun/weft/model/openai"
	"github.com/weftrun/weft/model/openai/openaitest"
)

// start points the adapter at a fresh fake server.
func start(t *testing.T) (model.Model, *fakeserver.Server) {
	srv := openaitest.NewFakeServer(t)
	return srv.Model("gpt-test"), srv.Server
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Harness{
		Start: start,
		ModelAt: func(url string) model.Model {
			return openai.New("gpt-test", openai.WithBaseURL(url+"/v1"), openai.WithAPIKey("k"))
		},
		Error: func(status int, typ, msg string) fakeserver.Response {
			return openaitest.Error(status, typ, msg, 0)
		},
		Text: openaitest.Text,
		TextNoUsage: func(text string) fakeserver.Response {
			return openaitest.Completion{Content: text}.Response()
		},
	})
}

func decode(t *testing.T, srv *openaitest.Server, i int) openaitest.ChatRequest {
	t.Helper()
	r := adaptertest.Recorded(t, srv.Server, i, openaitest.Path)
	if got := r.Header.Get("Authorization"); got != "Bearer test-key" {
		t.Errorf("Authorization = %q", got)
	}
	c, err := openaitest.Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func compact(t *testing.T, b []byte) string { return adaptertest.RawJSON(t, b) }

// TestScenario3_ToolCallsAndResultsInCallOrder checks the first request field
// by field, a two-call tool request, and the second request: the assistant
// turn replayed verbatim and the results in call order.
func TestScenario3_ToolCallsAndResultsInCallOrder(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	calls := []model.ToolCall{
		{ID: "call_A", Name: "lookup", Arguments: json.RawMessage(`{"id": "p-1"}`)},
		{ID: "call_B", Name: "refund", Arguments: json.RawMessage(`{"id":"p-1","cents":500}`)},
	}
	srv.Enqueue(openaitest.ToolCalls(calls...), openaitest.Text("Refunded."))
	m := srv.Model("gpt-test")
	if m.Name() != "openai:gpt-test" {
		t.Errorf("Name = %q", m.Name())
	}
	if d := m.Describe(); !strings.Contains(d, "openai:gpt-test") || !strings.Contains(d, srv.BaseURL()) {
		t.Errorf("Describe = %q", d)
	}
	req := adaptertest.BaseRequest()
	r, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	first := decode(t, srv, 0)
	if first.Model != "gpt-test" {
		t.Errorf("model = %q", first.Model)
	}
	if first.Stream != nil && *first.Stream {
		t.Errorf("stream requested")
	}
	if len(first.Messages) != 2 || first.Messages[0].Role != "system" || first.Messages[0].Text() != req.System ||
		first.Messages[1].Role != "user" || first.Messages[1].Text() != "refund p-1" {
		t.Fatalf("messages = %+v", first.Messages)
	}
	if len(first.Tools) != 2 {
		t.Fatalf("tools = %+v", first.Tools)
	}
	for i, tool := range first.Tools {
		spec := req.Tools[i]
		if tool.Type != "function" || tool.Function.Name != spec.Name || tool.Function.Description != spec.Description ||
			compact(t, tool.Function.Parameters) != compact(t, spec.InputSchema) || tool.Function.Strict != nil {
			t.Errorf("tool %d = %+v, want %+v", i, tool, spec)
		}
	}
	if first.ResponseFormat != nil {
		t.Errorf("response_format = %s without an answer schema", first.ResponseFormat)
	}

	if r.Kind != model.ReplyToolRequest || len(r.Turn.Calls) != 2 {
		t.Fatalf("reply = %+v", r)
	}
	for i, c := range r.Turn.Calls {
		if c.ID != calls[i].ID || c.Name != calls[i].Name || string(c.Arguments) != string(calls[i].Arguments) {
			t.Errorf("call %d = %+v (%s), want %+v", i, c, c.Arguments, calls[i])
		}
	}
	if r.Usage == nil || *r.Usage != openaitest.Usage() {
		t.Errorf("usage = %v", r.Usage)
	}
	if len(r.Turn.ProviderData) == 0 {
		t.Fatal("no provider data")
	}

	// The runtime stores the turn in the log and rebuilds the request,
	// possibly on another runner: round-trip the message through JSON.
	var stored model.Message
	b, _ := json.Marshal(r.Turn)
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	req.Turn = 2
	req.Transcript = append(req.Transcript, stored, model.Message{Role: model.RoleTool, Results: []model.ToolResult{
		{CallID: "call_A", Name: "lookup", Content: json.RawMessage(`{"status":"settled"}`)},
		{CallID: "call_B", Name: "refund", Content: json.RawMessage(`{"error":"denied","detail":"over limit"}`)},
	}})
	r2, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Kind != model.ReplyFinalAnswer || r2.Turn.Text != "Refunded." {
		t.Fatalf("second reply = %+v", r2)
	}
	second := decode(t, srv, 1)
	msgs := second.Messages
	if len(msgs) != 5 {
		t.Fatalf("second request has %d messages: %+v", len(msgs), msgs)
	}
	if msgs[2].Role != "assistant" || string(msgs[2].Content) != "null" {
		t.Errorf("assistant message = %+v", msgs[2])
	}
	var sent struct {
		Choices []struct {
			Message struct {
				ToolCalls json.RawMessage `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(openaitest.ToolCalls(calls...).Body, &sent); err != nil {
		t.Fatal(err)
	}
	if string(msgs[2].ToolCalls) != string(sent.Choices[0].Message.ToolCalls) {
		t.Errorf("tool_calls replayed as\n%s\nwant byte for byte\n%s", msgs[2].ToolCalls, sent.Choices[0].Message.ToolCalls)
	}
	for i, want := range []struct{ id, content string }{{"call_A", `{"status":"settled"}`}, {"call_B", `{"error":"denied","detail":"over limit"}`}} {
		got := msgs[3+i]
		if got.Role != "tool" || got.ToolCallID != want.id || got.Text() != want.content {
			t.Errorf("tool message %d = %+v (%q), want %s %s", i, got, got.Text(), want.id, want.content)
		}
	}
}

// TestMalformedArgumentsReplayedByteForByte: arguments that are not JSON
// reach the runtime as a JSON string (so validation reports them to the
// model) and go back to the provider exactly as it sent them.
func TestMalformedArgumentsReplayedByteForByte(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	bad := `{"id": "p-1",`
	u := openaitest.Usage()
	srv.Enqueue(openaitest.Completion{Null: true, Usage: &u,
		Calls:        []model.ToolCall{{ID: "call_1", Name: "lookup"}, {ID: "call_2", Name: "lookup"}},
		RawArguments: map[int]string{0: bad, 1: ""},
	}.Response(), openaitest.Text("ok"))
	m := srv.Model("gpt-test")
	req := adaptertest.BaseRequest()
	r, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(r.Turn.Calls[0].Arguments, &s); err != nil || s != bad {
		t.Errorf("malformed arguments = %s, want the text as a JSON string", r.Turn.Calls[0].Arguments)
	}
	if string(r.Turn.Calls[1].Arguments) != `{}` {
		t.Errorf("empty arguments = %s, want {}", r.Turn.Calls[1].Arguments)
	}
	req.Transcript = append(req.Transcript, r.Turn, model.Message{Role: model.RoleTool, Results: []model.ToolResult{
		{CallID: "call_1", Name: "lookup", Content: json.RawMessage(`{"error":"invalid_arguments"}`)},
		{CallID: "call_2", Name: "lookup", Content: json.RawMessage(`{"error":"invalid_arguments"}`)},
	}})
	if _, err := m.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	var calls []struct {
		Function struct {
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	if err := json.Unmarshal(decode(t, srv, 1).Messages[2].ToolCalls, &calls); err != nil {
		t.Fatal(err)
	}
	if calls[0].Function.Arguments != bad || calls[1].Function.Arguments != "" {
		t.Errorf("replayed arguments %q %q, want %q and \"\"", calls[0].Function.Arguments, calls[1].Function.Arguments, bad)
	}
}

// TestAssistantTurnWithoutProviderData rebuilds a turn recorded by another
// model (the scripted one) from its text and calls.
func TestAssistantTurnWithoutProviderData(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Text("ok"))
	req := adaptertest.BaseRequest()
	req.Transcript = append(req.Transcript,
		model.Message{Role: model.RoleAssistant, Text: "Looking.", Calls: []model.ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)}},
			ProviderData: json.RawMessage(`{"provider":"anthropic","content":[]}`)},
		model.Message{Role: model.RoleTool, Results: []model.ToolResult{{CallID: "c1", Name: "lookup", Content: json.RawMessage(`{"ok":true}`)}}},
		model.Message{Role: model.RoleUser, Text: "and now?"},
	)
	if _, err := srv.Model("gpt-test").Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs := decode(t, srv, 0).Messages
	if len(msgs) != 5 || msgs[2].Role != "assistant" || msgs[2].Text() != "Looking." || msgs[3].Role != "tool" || msgs[4].Role != "user" {
		t.Fatalf("messages = %+v", msgs)
	}
	want := `[{"function":{"arguments":"{\"id\":\"p-1\"}","name":"lookup"},"id":"c1","type":"function"}]`
	if got := compact(t, msgs[2].ToolCalls); got != want {
		t.Errorf("tool_calls = %s, want %s", got, want)
	}
}

// TestScenario14_TypedAnswerObjectSchema sends an object answer schema as
// structured output unchanged and returns the answer's JSON.
func TestScenario14_TypedAnswerObjectSchema(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Text(`{"refunded":true}`))
	req := adaptertest.BaseRequest()
	req.AnswerSchema = json.RawMessage(`{"type":"object","properties":{"refunded":{"type":"boolean"}},"required":["refunded"]}`)
	r, err := srv.Model("gpt-test").Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyFinalAnswer || r.Turn.Text != `{"refunded":true}` {
		t.Fatalf("reply = %+v", r)
	}
	want := `{"json_schema":{"name":"final_answer","schema":` + compact(t, req.AnswerSchema) + `},"type":"json_schema"}`
	if got := compact(t, decode(t, srv, 0).ResponseFormat); got != want {
		t.Errorf("response_format = %s\nwant %s", got, want)
	}
}

// TestScenario14_TypedAnswerWrapped wraps a non-object schema (hoisting its
// $defs) and unwraps the answer; strict is sent when asked for.
func TestScenario14_TypedAnswerWrapped(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Text(`{"answer": [{"id":"p-1"}]}`), openaitest.Text(`[1]`))
	req := adaptertest.BaseRequest()
	req.AnswerSchema = json.RawMessage(`{"type":"array","items":{"$ref":"#/$defs/item"},"$defs":{"item":{"type":"object"}}}`)
	m := srv.Model("gpt-test", openai.WithStrictAnswers(true), openai.WithMaxTokens(321))
	r, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyFinalAnswer || r.Turn.Text != `[{"id":"p-1"}]` {
		t.Fatalf("reply = %+v (%q)", r, r.Turn.Text)
	}
	first := decode(t, srv, 0)
	want := `{"json_schema":{"name":"final_answer","schema":{"$defs":{"item":{"type":"object"}},"additionalProperties":false,` +
		`"properties":{"answer":{"items":{"$ref":"#/$defs/item"},"type":"array"}},"required":["answer"],"type":"object"},"strict":true},"type":"json_schema"}`
	if got := compact(t, first.ResponseFormat); got != want {
		t.Errorf("response_format = %s\nwant %s", got, want)
	}
	if first.MaxCompletionTokens == nil || *first.MaxCompletionTokens != 321 {
		t.Errorf("max_completion_tokens = %v", first.MaxCompletionTokens)
	}
	// An answer that is not wrapped is passed on as written, for the
	// runtime's decoder to reject with a corrective turn.
	r, err = m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Turn.Text != `[1]` {
		t.Errorf("unwrapped answer = %q", r.Turn.Text)
	}
}

func TestRefusals(t *testing.T) {
	u := openaitest.Usage()
	cases := []struct {
		name   string
		reply  openaitest.Completion
		reason string
	}{
		{"refusal field", openaitest.Completion{Null: true, Refusal: "I can't help with that.", Usage: &u}, "I can't help with that."},
		{"content_filter", openaitest.Completion{Content: "partial", FinishReason: "content_filter", Usage: &u}, "content_filter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := openaitest.NewFakeServer(t)
			srv.Enqueue(c.reply.Response())
			r, err := srv.Model("gpt-test").Complete(context.Background(), adaptertest.BaseRequest())
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != model.ReplyRefusal || r.Reason != c.reason || len(r.Turn.Calls) != 0 {
				t.Errorf("reply = %+v, want refusal %q", r, c.reason)
			}
			if r.Usage == nil {
				t.Errorf("usage dropped on a refusal")
			}
		})
	}
}

// TestTruncatedDropsPartialCalls: finish_reason length is a truncated reply
// whose calls are dropped, partial text kept as the reason.
func TestTruncatedDropsPartialCalls(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	u := openaitest.Usage()
	srv.Enqueue(openaitest.Completion{Content: "I will look", FinishReason: "length", Usage: &u,
		Calls:        []model.ToolCall{{ID: "call_1", Name: "lookup"}},
		RawArguments: map[int]string{0: `{"id": "p-`},
	}.Response())
	r, err := srv.Model("gpt-test").Complete(context.Background(), adaptertest.BaseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyTruncated || len(r.Turn.Calls) != 0 || r.Reason != "I will look" || r.Usage == nil {
		t.Errorf("reply = %+v", r)
	}
}

// TestScenario7_EmptyToolBatchPassedOn: finish_reason tool_calls without
// calls is passed on as a tool request with no calls, for the runtime to
// record as a protocol violation.
func TestScenario7_EmptyToolBatchPassedOn(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(openaitest.Completion{Null: true, FinishReason: "tool_calls"}.Response())
	r, err := srv.Model("gpt-test").Complete(context.Background(), adaptertest.BaseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyToolRequest || len(r.Turn.Calls) != 0 {
		t.Errorf("reply = %+v", r)
	}
}

func TestMissingFieldsAreInvalidReplies(t *testing.T) {
	adaptertest.InvalidReplies(t, start, []adaptertest.Body{
		{Name: "no choices", JSON: `{"id":"x","object":"chat.completion","choices":[]}`},
		{Name: "no message", JSON: `{"id":"x","choices":[{"index":0,"finish_reason":"stop"}]}`},
		{Name: "no finish_reason", JSON: `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`},
		{Name: "call without id", JSON: `{"id":"x","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"lookup","arguments":"{}"}}]}}]}`},
	})
}

func TestBadRequestsFailBeforeSending(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	req := adaptertest.BaseRequest()
	req.Tools[0].InputSchema = json.RawMessage(`[1]`)
	adaptertest.FailsBeforeSending(t, srv.Model("gpt-test"), srv.Server, req)
}

// TestArgumentsAsObject accepts a compatible server that sends arguments as
// a JSON object instead of a string.
func TestArgumentsAsObject(t *testing.T) {
	srv := openaitest.NewFakeServer(t)
	srv.Enqueue(fakeserver.Response{Body: []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"finish_reason":"tool_calls",` +
		`"message":{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":{"id":"p-1"}}}]}}]}`)})
	r, err := srv.Model("gpt-test").Complete(context.Background(), adaptertest.BaseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyToolRequest || len(r.Turn.Calls) != 1 || string(r.Turn.Calls[0].Arguments) != `{"id":"p-1"}` {
		t.Errorf("reply = %+v", r)
	}
	if r.Usage != nil {
		t.Errorf("usage = %+v without usage in the reply", r.Usage)
	}
}
