// Package anthropic is the model adapter for Anthropic's Messages API, built
// on the official SDK github.com/anthropics/anthropic-sdk-go/v2.
//
// One Complete is one POST /v1/messages, with the SDK's own retries turned
// off (the runtime owns retries and budgets, docs/semantics.md §2) and no
// credentials or settings read from the environment: configuration is
// explicit (model/provider reads the environment). The request is rebuilt
// from model.Request every turn:
//
//   - Request.System becomes the system prompt; the transcript follows in
//     order. Tool results become one user message of tool_result blocks in
//     the order given (the runtime gives them in call order); a user message
//     that follows tool results joins the same user message.
//   - An assistant turn this adapter produced is replayed from its
//     Message.ProviderData, which holds the turn's content blocks: thinking
//     and redacted_thinking blocks (with their signatures) exactly as
//     received, text blocks, and tool_use blocks with their provider ids and
//     inputs. Anthropic refuses a conversation whose thinking blocks were
//     changed, so they are never rebuilt.
//   - Request.Tools become client tools. Request.AnswerSchema becomes
//     structured output (output_config.format json_schema); a schema whose
//     root is not an object is wrapped as {"answer": …} and the reply
//     unwrapped. WithPromptedAnswers puts the schema in the system prompt
//     instead, for models without structured output.
//
// Replies: tool_use blocks → model.ReplyToolRequest; stop_reason max_tokens
// or model_context_window_exceeded → model.ReplyTruncated (tool_use blocks
// dropped, partial text as Reason); stop_reason refusal →
// model.ReplyRefusal; otherwise model.ReplyFinalAnswer. Usage (input tokens
// including cache reads and writes, output tokens) is reported only when the
// reply carries it. Every failure is a *model.Error classified by
// model/internal/httperr.
package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	ant "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/internal/answer"
	"github.com/weftrun/weft/model/internal/httperr"
)

// Provider is the provider name used in model names and provider data.
const Provider = "anthropic"

// DefaultBaseURL is the Anthropic API's base URL.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is max_tokens when WithMaxTokens is not given; the
// Messages API requires a value.
const DefaultMaxTokens = 4096

// Model is a model.Model backed by one Anthropic model.
type Model struct {
	client   ant.Client
	model    string
	baseURL  string
	max      int64
	thinking int64
	prompted bool
}

var _ model.Model = (*Model)(nil)

type config struct {
	apiKey     string
	baseURL    string
	httpClient *http.Client
	maxTokens  int64
	thinking   int64
	prompted   bool
}

// Option configures New.
type Option func(*config)

// WithAPIKey sets the API key (sent as x-api-key).
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithBaseURL points the adapter at another server speaking the Messages
// API (a proxy or gateway). The default is DefaultBaseURL.
func WithBaseURL(url string) Option { return func(c *config) { c.baseURL = url } }

// WithHTTPClient sets the HTTP client the SDK uses.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithMaxTokens sets max_tokens for every turn (default DefaultMaxTokens).
func WithMaxTokens(n int64) Option { return func(c *config) { c.maxTokens = n } }

// WithThinking turns on extended thinking with the given token budget
// (which must be below max_tokens). Thinking blocks are kept in provider
// data and replayed unchanged.
func WithThinking(budget int64) Option { return func(c *config) { c.thinking = budget } }

// WithPromptedAnswers gives the answer schema in the system prompt instead
// of as structured output, for models that do not support structured
// output. The answer is then not enforced by the provider; the runtime
// validates it and asks for a correction.
func WithPromptedAnswers() Option { return func(c *config) { c.prompted = true } }

// New returns the adapter for the model named name (such as
// "claude-sonnet-4-5").
func New(name string, opts ...Option) *Model {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.baseURL == "" {
		c.baseURL = DefaultBaseURL
	}
	if c.maxTokens <= 0 {
		c.maxTokens = DefaultMaxTokens
	}
	ropts := []option.RequestOption{
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(c.baseURL),
		option.WithMaxRetries(0),
		option.WithMiddleware(httperr.Middleware),
		option.WithOpenTelemetryTracesContentMode(option.OpenTelemetryContentModeMetadataOnly),
	}
	if c.apiKey != "" {
		ropts = append(ropts, option.WithAPIKey(c.apiKey))
	}
	if c.httpClient != nil {
		ropts = append(ropts, option.WithHTTPClient(c.httpClient))
	}
	return &Model{
		client:   ant.NewClient(ropts...),
		model:    name,
		baseURL:  c.baseURL,
		max:      c.maxTokens,
		thinking: c.thinking,
		prompted: c.prompted,
	}
}

// Name returns "anthropic:<model>".
func (m *Model) Name() string { return Provider + ":" + m.model }

// Describe says which model and server are in use, for logs and `weft dev`.
func (m *Model) Describe() string {
	return fmt.Sprintf("%s (Messages API at %s)", m.Name(), m.baseURL)
}

// Complete performs one turn: one Messages call.
func (m *Model) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	params, wrapped, err := m.params(req)
	if err != nil {
		return model.Reply{}, err
	}
	var httpResp *http.Response
	resp, err := m.client.Messages.New(ctx, params, option.WithResponseInto(&httpResp))
	if err != nil {
		return model.Reply{}, httperr.Classify(Provider, err, httpResp)
	}
	return m.reply(resp, wrapped)
}

// providerData is the adapter's Message.ProviderData: the assistant turn's
// content blocks exactly as they are sent back on later turns.
type providerData struct {
	Provider string            `json:"provider"`
	Content  []json.RawMessage `json:"content"`
}

func badRequest(format string, args ...any) *model.Error {
	return &model.Error{Kind: model.ErrInvalidRequest, Message: "anthropic: " + fmt.Sprintf(format, args...)}
}

func (m *Model) params(req model.Request) (ant.MessageNewParams, bool, error) {
	p := ant.MessageNewParams{Model: m.model, MaxTokens: m.max}
	if m.thinking > 0 {
		p.Thinking = ant.ThinkingConfigParamOfEnabled(m.thinking)
	}
	system := req.System
	wrapped := false
	if len(req.AnswerSchema) > 0 {
		schema, err := answer.Wrap(req.AnswerSchema)
		if err != nil {
			return p, false, badRequest("%v", err)
		}
		if m.prompted {
			if system != "" {
				system += "\n\n"
			}
			system += PromptedAnswerInstruction + string(req.AnswerSchema)
		} else {
			wrapped = schema.Wrapped
			p.OutputConfig = ant.OutputConfigParam{Format: ant.JSONOutputFormatParam{Schema: schema.Object}}
		}
	}
	if system != "" {
		p.System = []ant.TextBlockParam{{Text: system}}
	}
	var pendingUser []ant.ContentBlockParamUnion // user-side blocks not yet closed into a message
	flush := func() {
		if len(pendingUser) > 0 {
			p.Messages = append(p.Messages, ant.NewUserMessage(pendingUser...))
			pendingUser = nil
		}
	}
	for i, msg := range req.Transcript {
		switch msg.Role {
		case model.RoleUser:
			pendingUser = append(pendingUser, ant.NewTextBlock(msg.Text))
		case model.RoleTool:
			for _, r := range msg.Results {
				pendingUser = append(pendingUser, ant.ContentBlockParamUnion{OfToolResult: &ant.ToolResultBlockParam{
					ToolUseID: r.CallID,
					Content:   []ant.ToolResultBlockParamContentUnion{{OfText: &ant.TextBlockParam{Text: string(r.Content)}}},
				}})
			}
		case model.RoleAssistant:
			flush()
			p.Messages = append(p.Messages, assistantMessage(msg))
		default:
			return p, false, badRequest("transcript message %d has unknown role %q", i, msg.Role)
		}
	}
	flush()
	for _, t := range req.Tools {
		if !json.Valid(t.InputSchema) || !strings.HasPrefix(strings.TrimSpace(string(t.InputSchema)), "{") {
			return p, false, badRequest("tool %s: input schema is not a JSON object", t.Name)
		}
		tp := ant.ToolParam{
			Name:        t.Name,
			InputSchema: param.Override[ant.ToolInputSchemaParam](t.InputSchema),
		}
		if t.Description != "" {
			tp.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, ant.ToolUnionParam{OfTool: &tp})
	}
	return p, wrapped, nil
}

// PromptedAnswerInstruction precedes the answer schema in the system prompt
// under WithPromptedAnswers.
const PromptedAnswerInstruction = "When you give your final answer, reply with only a JSON value, with no other text, that satisfies this JSON Schema:\n"

// assistantMessage replays an assistant turn: its content blocks verbatim
// from provider data when this adapter wrote it, else rebuilt from its text
// and calls (a turn recorded by another adapter or by the scripted model).
func assistantMessage(msg model.Message) ant.MessageParam {
	var pd providerData
	if len(msg.ProviderData) > 0 && json.Unmarshal(msg.ProviderData, &pd) == nil &&
		pd.Provider == Provider && len(pd.Content) > 0 {
		raw, err := json.Marshal(struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		}{"assistant", pd.Content})
		if err == nil {
			a := param.Override[ant.AssistantMessageParam](json.RawMessage(raw))
			return ant.MessageParam{OfAssistant: &a}
		}
	}
	var blocks []ant.ContentBlockParamUnion
	if msg.Text != "" {
		blocks = append(blocks, ant.NewTextBlock(msg.Text))
	}
	for _, c := range msg.Calls {
		blocks = append(blocks, ant.NewToolUseBlock(c.ID, c.Arguments, c.Name))
	}
	return ant.NewAssistantMessage(blocks...)
}

func invalidReply(format string, args ...any) *model.Error {
	return &model.Error{Kind: model.ErrInvalidReply, Status: http.StatusOK, Message: "anthropic: " + fmt.Sprintf(format, args...)}
}

// reply turns a message into a model.Reply.
func (m *Model) reply(resp *ant.Message, wrapped bool) (model.Reply, error) {
	if resp == nil || !resp.JSON.Content.Valid() {
		return model.Reply{}, invalidReply("reply has no content")
	}
	if !resp.JSON.StopReason.Valid() || resp.StopReason == "" {
		return model.Reply{}, invalidReply("reply has no stop_reason")
	}
	out := model.Reply{Usage: usage(resp)}
	var text strings.Builder
	var blocks []json.RawMessage
	var calls []model.ToolCall
	for i, b := range resp.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			raw, err := json.Marshal(struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}{"text", b.Text})
			if err != nil {
				return model.Reply{}, invalidReply("text block %d: %v", i, err)
			}
			blocks = append(blocks, raw)
		case "tool_use":
			if b.ID == "" || b.Name == "" {
				return model.Reply{}, invalidReply("tool_use block %d has no id or name", i)
			}
			input := b.Input
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage(`{}`)
			}
			raw, err := json.Marshal(struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			}{"tool_use", b.ID, b.Name, input})
			if err != nil {
				return model.Reply{}, invalidReply("tool_use block %d: %v", i, err)
			}
			blocks = append(blocks, raw)
			calls = append(calls, model.ToolCall{ID: b.ID, Name: b.Name, Arguments: input})
		case "":
			return model.Reply{}, invalidReply("content block %d has no type", i)
		default:
			// thinking, redacted_thinking and any other block: kept exactly
			// as received, signatures included.
			blocks = append(blocks, json.RawMessage(b.RawJSON()))
		}
	}
	switch resp.StopReason {
	case ant.StopReasonRefusal:
		out.Kind = model.ReplyRefusal
		out.Reason = refusalReason(resp)
		out.Turn = model.Message{Role: model.RoleAssistant, Text: text.String()}
		return out, nil
	case ant.StopReasonMaxTokens, ant.StopReasonModelContextWindowExceeded:
		out.Kind = model.ReplyTruncated
		out.Reason = text.String()
		out.Turn = model.Message{Role: model.RoleAssistant, Text: text.String()}
		return out, nil
	case ant.StopReasonPauseTurn:
		return model.Reply{}, invalidReply("stop_reason pause_turn is not supported (no server tools are offered)")
	}
	pd, err := json.Marshal(providerData{Provider: Provider, Content: blocks})
	if err != nil {
		return model.Reply{}, invalidReply("reply content cannot be kept: %v", err)
	}
	out.Turn = model.Message{Role: model.RoleAssistant, Text: text.String(), Calls: calls, ProviderData: pd}
	if len(calls) > 0 || resp.StopReason == ant.StopReasonToolUse {
		out.Kind = model.ReplyToolRequest
		return out, nil
	}
	out.Kind = model.ReplyFinalAnswer
	if m.prompted {
		out.Turn.Text = stripFence(out.Turn.Text)
	} else {
		out.Turn.Text = answer.Unwrap(out.Turn.Text, wrapped)
	}
	return out, nil
}

// refusalReason names why the model refused, from stop_details when given.
func refusalReason(resp *ant.Message) string {
	d := resp.StopDetails
	switch {
	case d.Explanation != "" && d.Category != "":
		return fmt.Sprintf("refusal (%s): %s", d.Category, d.Explanation)
	case d.Explanation != "":
		return "refusal: " + d.Explanation
	case d.Category != "":
		return fmt.Sprintf("refusal (%s)", d.Category)
	}
	return "refusal"
}

// stripFence removes a Markdown code fence around a prompted answer.
func stripFence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") || !strings.HasSuffix(t, "```") || len(t) < 6 {
		return s
	}
	t = strings.TrimSuffix(t[3:], "```")
	if nl := strings.IndexByte(t, '\n'); nl >= 0 {
		t = t[nl+1:] // drop the info string, such as "json"
	}
	return strings.TrimSpace(t)
}

// usage returns the reported usage, nil when the reply carries none. Input
// tokens include cache reads and cache writes, which Anthropic reports
// apart from input_tokens.
func usage(resp *ant.Message) *model.Usage {
	u := resp.Usage
	if !resp.JSON.Usage.Valid() || !u.JSON.InputTokens.Valid() || !u.JSON.OutputTokens.Valid() {
		return nil
	}
	return &model.Usage{
		InputTokens:  u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens: u.OutputTokens,
	}
}
