package anthropic_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic"
	"github.com/weftrun/weft/model/anthropic/anthropictest"
	"github.com/weftrun/weft/model/internal/adaptertest"
	"github.com/weftrun/weft/model/internal/fakeserver"
)

// start points the adapter at a fresh fake server.
func start(t *testing.T) (model.Model, *fakeserver.Server) {
	srv := anthropictest.NewFakeServer(t)
	return srv.Model("claude-test"), srv.Server
}

func TestConformance(t *testing.T) {
	adaptertest.Run(t, adaptertest.Harness{
		Start: start,
		ModelAt: func(url string) model.Model {
			return anthropic.New("claude-test", anthropic.WithBaseURL(url), anthropic.WithAPIKey("k"))
		},
		Error: func(status int, typ, msg string) fakeserver.Response {
			return anthropictest.Error(status, typ, msg, 0)
		},
		Text: anthropictest.Text,
		TextNoUsage: func(text string) fakeserver.Response {
			return anthropictest.Message{Content: []anthropictest.Block{anthropictest.TextBlock(text)}}.Response()
		},
	})
}

func decode(t *testing.T, srv *anthropictest.Server, i int) anthropictest.MessagesRequest {
	t.Helper()
	r := adaptertest.Recorded(t, srv.Server, i, anthropictest.Path)
	if r.Header.Get("Anthropic-Version") == "" {
		t.Errorf("no anthropic-version header")
	}
	if !strings.Contains(r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"), "test-key") {
		t.Errorf("API key not sent: %v", r.Header)
	}
	m, err := anthropictest.Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func compact(t *testing.T, b []byte) string { return adaptertest.RawJSON(t, b) }

// TestScenario3_ThinkingReplayedAndResultsInCallOrder checks the request
// field by field, a tool request carrying thinking and redacted thinking,
// and the next request: the assistant blocks replayed unchanged (signatures
// included) and both results in one user message, in call order.
func TestScenario3_ThinkingReplayedAndResultsInCallOrder(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	calls := []model.ToolCall{
		{ID: "toolu_A", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)},
		{ID: "toolu_B", Name: "refund", Arguments: json.RawMessage(`{"id":"p-1","cents":500}`)},
	}
	thinking := anthropictest.ThinkingBlock("The user wants a refund.", "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
	redacted := anthropictest.RedactedThinkingBlock("EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP")
	u := anthropictest.Usage()
	srv.Enqueue(anthropictest.Message{Usage: &u, Content: []anthropictest.Block{
		thinking, redacted, anthropictest.TextBlock("Let me check."),
		anthropictest.ToolUseBlock(calls[0]), anthropictest.ToolUseBlock(calls[1]),
	}}.Response(), anthropictest.Text("Refunded."))
	m := srv.Model("claude-test", anthropic.WithThinking(1024), anthropic.WithMaxTokens(2048))
	if m.Name() != "anthropic:claude-test" || !strings.Contains(m.Describe(), srv.BaseURL()) {
		t.Errorf("Name = %q, Describe = %q", m.Name(), m.Describe())
	}
	req := adaptertest.BaseRequest()
	r, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	first := decode(t, srv, 0)
	if first.Model != "claude-test" || first.MaxTokens != 2048 {
		t.Errorf("model = %q, max_tokens = %d", first.Model, first.MaxTokens)
	}
	if got := compact(t, first.Thinking); got != `{"budget_tokens":1024,"type":"enabled"}` {
		t.Errorf("thinking = %s", got)
	}
	if got := compact(t, first.System); got != `[{"text":"You are the payment desk.","type":"text"}]` {
		t.Errorf("system = %s", got)
	}
	if len(first.Messages) != 1 || first.Messages[0].Role != "user" || len(first.Messages[0].Content) != 1 ||
		compact(t, first.Messages[0].Content[0]) != `{"text":"refund p-1","type":"text"}` {
		t.Errorf("messages = %+v", first.Messages)
	}
	if len(first.Tools) != 2 {
		t.Fatalf("tools = %+v", first.Tools)
	}
	for i, tool := range first.Tools {
		spec := req.Tools[i]
		if tool.Name != spec.Name || tool.Description != spec.Description || string(tool.InputSchema) != string(spec.InputSchema) {
			t.Errorf("tool %d = %+v (%s), want %+v", i, tool, tool.InputSchema, spec)
		}
	}
	if first.OutputConfig != nil || first.ToolChoice != nil || (first.Stream != nil && *first.Stream) {
		t.Errorf("unexpected output_config %s / tool_choice %s / stream", first.OutputConfig, first.ToolChoice)
	}

	if r.Kind != model.ReplyToolRequest || r.Turn.Text != "Let me check." || len(r.Turn.Calls) != 2 {
		t.Fatalf("reply = %+v", r)
	}
	for i, c := range r.Turn.Calls {
		if c.ID != calls[i].ID || c.Name != calls[i].Name || string(c.Arguments) != string(calls[i].Arguments) {
			t.Errorf("call %d = %+v, want %+v", i, c, calls[i])
		}
	}
	if r.Usage == nil || *r.Usage != anthropictest.Usage() {
		t.Errorf("usage = %v", r.Usage)
	}

	var stored model.Message
	b, _ := json.Marshal(r.Turn)
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	req.Turn = 2
	req.Transcript = append(req.Transcript, stored, model.Message{Role: model.RoleTool, Results: []model.ToolResult{
		{CallID: "toolu_A", Name: "lookup", Content: json.RawMessage(`{"status":"settled"}`)},
		{CallID: "toolu_B", Name: "refund", Content: json.RawMessage(`{"error":"denied","detail":"over limit"}`)},
	}})
	r2, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Kind != model.ReplyFinalAnswer || r2.Turn.Text != "Refunded." {
		t.Fatalf("second reply = %+v", r2)
	}
	second := decode(t, srv, 1)
	if len(second.Messages) != 3 {
		t.Fatalf("second request messages = %+v", second.Messages)
	}
	asst := second.Messages[1]
	if asst.Role != "assistant" || len(asst.Content) != 5 {
		t.Fatalf("assistant message = %+v", asst)
	}
	if string(asst.Content[0]) != string(thinking) || string(asst.Content[1]) != string(redacted) {
		t.Errorf("thinking blocks replayed as\n%s\n%s\nwant byte for byte\n%s\n%s", asst.Content[0], asst.Content[1], thinking, redacted)
	}
	if got := compact(t, asst.Content[2]); got != `{"text":"Let me check.","type":"text"}` {
		t.Errorf("text block = %s", got)
	}
	for i, c := range calls {
		want := `{"id":"` + c.ID + `","input":` + compact(t, c.Arguments) + `,"name":"` + c.Name + `","type":"tool_use"}`
		if got := compact(t, asst.Content[3+i]); got != want {
			t.Errorf("tool_use %d = %s, want %s", i, got, want)
		}
	}
	results := second.Messages[2]
	if results.Role != "user" || len(results.Content) != 2 {
		t.Fatalf("results message = %+v", results)
	}
	for i, want := range []string{
		`{"content":[{"text":"{\"status\":\"settled\"}","type":"text"}],"tool_use_id":"toolu_A","type":"tool_result"}`,
		`{"content":[{"text":"{\"error\":\"denied\",\"detail\":\"over limit\"}","type":"text"}],"tool_use_id":"toolu_B","type":"tool_result"}`,
	} {
		if got := compact(t, results.Content[i]); got != want {
			t.Errorf("tool_result %d = %s\nwant %s", i, got, want)
		}
	}
}

// TestCorrectionJoinsToolResults: a user message after tool results goes
// into the same user message, after the tool_result blocks; a turn without
// provider data is rebuilt from its text and calls.
func TestCorrectionJoinsToolResults(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	srv.Enqueue(anthropictest.Text("ok"))
	req := adaptertest.BaseRequest()
	req.Transcript = append(req.Transcript,
		model.Message{Role: model.RoleAssistant, Text: "Looking.", Calls: []model.ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)}},
			ProviderData: json.RawMessage(`{"provider":"openai","message":{}}`)},
		model.Message{Role: model.RoleTool, Results: []model.ToolResult{{CallID: "c1", Name: "lookup", Content: json.RawMessage(`{"ok":true}`)}}},
		model.Message{Role: model.RoleUser, Text: "your final answer could not be read"},
	)
	if _, err := srv.Model("claude-test").Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	msgs := decode(t, srv, 0).Messages
	if len(msgs) != 3 || msgs[1].Role != "assistant" || msgs[2].Role != "user" || len(msgs[2].Content) != 2 {
		t.Fatalf("messages = %+v", msgs)
	}
	if got := compact(t, msgs[1].Content[1]); got != `{"id":"c1","input":{"id":"p-1"},"name":"lookup","type":"tool_use"}` {
		t.Errorf("rebuilt tool_use = %s", got)
	}
	if !strings.Contains(string(msgs[2].Content[0]), `"tool_result"`) || !strings.Contains(string(msgs[2].Content[1]), "could not be read") {
		t.Errorf("user content = %s / %s", msgs[2].Content[0], msgs[2].Content[1])
	}
}

// TestScenario14_TypedAnswerStructuredOutput sends the schema as
// output_config.format, wrapping a non-object schema, and unwraps the answer.
func TestScenario14_TypedAnswerStructuredOutput(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	srv.Enqueue(anthropictest.Text(`{"answer": ["p-1","p-2"]}`), anthropictest.Text(`{"refunded":true}`))
	req := adaptertest.BaseRequest()
	req.AnswerSchema = json.RawMessage(`{"type":"array","items":{"type":"string"}}`)
	m := srv.Model("claude-test")
	r, err := m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyFinalAnswer || r.Turn.Text != `["p-1","p-2"]` {
		t.Fatalf("reply = %+v", r)
	}
	want := `{"format":{"schema":{"additionalProperties":false,"properties":{"answer":{"items":{"type":"string"},"type":"array"}},"required":["answer"],"type":"object"},"type":"json_schema"}}`
	if got := compact(t, decode(t, srv, 0).OutputConfig); got != want {
		t.Errorf("output_config = %s\nwant %s", got, want)
	}
	req.AnswerSchema = json.RawMessage(`{"type":"object","properties":{"refunded":{"type":"boolean"}}}`)
	r, err = m.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Turn.Text != `{"refunded":true}` {
		t.Errorf("object answer = %q", r.Turn.Text)
	}
	want = `{"format":{"schema":` + compact(t, req.AnswerSchema) + `,"type":"json_schema"}}`
	if got := compact(t, decode(t, srv, 1).OutputConfig); got != want {
		t.Errorf("output_config = %s\nwant %s", got, want)
	}
}

// TestScenario14_PromptedAnswers puts the schema in the system prompt and
// strips a code fence around the answer.
func TestScenario14_PromptedAnswers(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	srv.Enqueue(anthropictest.Text("```json\n[\"p-1\"]\n```"))
	req := adaptertest.BaseRequest()
	req.AnswerSchema = json.RawMessage(`{"type":"array","items":{"type":"string"}}`)
	r, err := srv.Model("claude-test", anthropic.WithPromptedAnswers()).Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Turn.Text != `["p-1"]` {
		t.Errorf("answer = %q", r.Turn.Text)
	}
	first := decode(t, srv, 0)
	if first.OutputConfig != nil {
		t.Errorf("output_config = %s in prompted mode", first.OutputConfig)
	}
	var system []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(first.System, &system); err != nil || len(system) != 1 ||
		!strings.HasPrefix(system[0].Text, req.System+"\n\n"+anthropic.PromptedAnswerInstruction) ||
		!strings.HasSuffix(system[0].Text, string(req.AnswerSchema)) {
		t.Errorf("system = %s", first.System)
	}
}

func TestRefusal(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	u := anthropictest.Usage()
	srv.Enqueue(anthropictest.Message{Usage: &u, StopReason: "refusal",
		StopDetails: json.RawMessage(`{"type":"refusal","category":"cyber","explanation":"not allowed"}`)}.Response())
	r, err := srv.Model("claude-test").Complete(context.Background(), adaptertest.BaseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Kind != model.ReplyRefusal || r.Reason != "refusal (cyber): not allowed" || r.Usage == nil {
		t.Errorf("reply = %+v", r)
	}
}

func TestTruncatedDropsPartialCalls(t *testing.T) {
	for _, stop := range []string{"max_tokens", "model_context_window_exceeded"} {
		t.Run(stop, func(t *testing.T) {
			srv := anthropictest.NewFakeServer(t)
			u := anthropictest.Usage()
			srv.Enqueue(anthropictest.Message{Usage: &u, StopReason: stop, Content: []anthropictest.Block{
				anthropictest.TextBlock("I will look"),
				anthropictest.ToolUseBlock(model.ToolCall{ID: "toolu_1", Name: "lookup", Arguments: json.RawMessage(`{}`)}),
			}}.Response())
			r, err := srv.Model("claude-test").Complete(context.Background(), adaptertest.BaseRequest())
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != model.ReplyTruncated || len(r.Turn.Calls) != 0 || r.Reason != "I will look" || r.Usage == nil {
				t.Errorf("reply = %+v", r)
			}
		})
	}
}

func TestUsageCountsCache(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	srv.Enqueue(fakeserver.Response{Body: []byte(`{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":3,"cache_creation_input_tokens":100,"cache_read_input_tokens":1000,"output_tokens":7}}`)})
	r, err := srv.Model("claude-test").Complete(context.Background(), adaptertest.BaseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if r.Usage == nil || *r.Usage != (model.Usage{InputTokens: 1103, OutputTokens: 7}) {
		t.Errorf("usage = %+v", r.Usage)
	}
}

func TestMissingFieldsAreInvalidReplies(t *testing.T) {
	adaptertest.InvalidReplies(t, start, []adaptertest.Body{
		{Name: "no content", JSON: `{"id":"m","type":"message","role":"assistant","stop_reason":"end_turn"}`},
		{Name: "no stop_reason", JSON: `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}]}`},
		{Name: "tool_use no id", JSON: `{"id":"m","type":"message","role":"assistant","content":[{"type":"tool_use","name":"lookup","input":{}}],"stop_reason":"tool_use"}`},
		{Name: "block no type", JSON: `{"id":"m","type":"message","role":"assistant","content":[{"text":"hi"}],"stop_reason":"end_turn"}`},
		{Name: "pause_turn", JSON: `{"id":"m","type":"message","role":"assistant","content":[],"stop_reason":"pause_turn"}`},
		{Name: "content not list", JSON: `{"id":"m","type":"message","role":"assistant","content":"hi","stop_reason":"end_turn"}`},
	})
}

func TestBadRequestsFailBeforeSending(t *testing.T) {
	srv := anthropictest.NewFakeServer(t)
	req := adaptertest.BaseRequest()
	req.Transcript = append(req.Transcript, model.Message{Role: "system", Text: "x"})
	adaptertest.FailsBeforeSending(t, srv.Model("claude-test"), srv.Server, req)
}
