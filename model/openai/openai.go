// Package openai is the model adapter for OpenAI's Chat Completions API and
// the servers that speak it (vLLM, Ollama, LM Studio), built on the official
// SDK github.com/openai/openai-go/v3.
//
// One Complete is one POST /chat/completions, with the SDK's own retries
// turned off: the runtime owns retries and budgets (docs/semantics.md §2). The
// request is rebuilt from model.Request every turn:
//
//   - Request.System becomes a system message, then the transcript follows in
//     order: user messages, assistant turns, and one tool message per result
//     in the order given (the runtime gives them in call order).
//   - An assistant turn this adapter produced is replayed from its
//     Message.ProviderData, which holds the assistant message exactly as the
//     provider sent it (content and tool_calls with their ids and argument
//     strings), so a run resumed elsewhere continues the same conversation.
//   - Request.Tools become function tools; Request.AnswerSchema becomes
//     response_format json_schema named "final_answer". A schema whose root is
//     not an object is wrapped as {"answer": …} and the reply unwrapped.
//
// Replies: tool_calls → model.ReplyToolRequest; finish_reason length →
// model.ReplyTruncated (partial calls dropped, partial text as Reason);
// finish_reason content_filter or a refusal → model.ReplyRefusal; otherwise
// model.ReplyFinalAnswer. Usage is reported only when the reply carries it.
// Every failure is a *model.Error classified by model/internal/httperr.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/internal/answer"
	"github.com/weftrun/weft/model/internal/httperr"
)

// Provider is the provider name used in model names and provider data.
const Provider = "openai"

// DefaultBaseURL is the OpenAI API's base URL.
const DefaultBaseURL = "https://api.openai.com/v1"

// AnswerSchemaName is the json_schema name of a typed final answer.
const AnswerSchemaName = "final_answer"

// Model is a model.Model backed by one OpenAI (or compatible) model.
type Model struct {
	client    oai.Client
	model     string
	baseURL   string
	maxTokens int64
	strict    bool
}

var _ model.Model = (*Model)(nil)

type config struct {
	apiKey     string
	baseURL    string
	httpClient *http.Client
	maxTokens  int64
	strict     bool
}

// Option configures New.
type Option func(*config)

// WithAPIKey sets the API key. Without it the SDK's default applies (the
// OPENAI_API_KEY environment variable, if set).
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithBaseURL points the adapter at another server speaking the Chat
// Completions API, such as http://localhost:11434/v1 for Ollama or a vLLM
// server's /v1. The default is DefaultBaseURL.
func WithBaseURL(url string) Option { return func(c *config) { c.baseURL = url } }

// WithHTTPClient sets the HTTP client the SDK uses.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.httpClient = hc } }

// WithMaxTokens sets max_completion_tokens for every turn; zero (the
// default) leaves it to the server.
func WithMaxTokens(n int64) Option { return func(c *config) { c.maxTokens = n } }

// WithStrictAnswers sends the answer schema with strict: true, so OpenAI
// enforces it. Strict mode accepts only a subset of JSON Schema (every
// property required, additionalProperties false); a schema outside it is
// refused as invalid_request. Off by default: the runtime validates the
// answer and asks for a correction either way.
func WithStrictAnswers(strict bool) Option { return func(c *config) { c.strict = strict } }

// New returns the adapter for the model named name (such as "gpt-4.1").
func New(name string, opts ...Option) *Model {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.baseURL == "" {
		c.baseURL = DefaultBaseURL
	}
	ropts := []option.RequestOption{
		option.WithBaseURL(c.baseURL),
		option.WithMaxRetries(0),
		option.WithMiddleware(httperr.Middleware),
	}
	if c.apiKey != "" {
		ropts = append(ropts, option.WithAPIKey(c.apiKey))
	}
	if c.httpClient != nil {
		ropts = append(ropts, option.WithHTTPClient(c.httpClient))
	}
	return &Model{
		client:    oai.NewClient(ropts...),
		model:     name,
		baseURL:   c.baseURL,
		maxTokens: c.maxTokens,
		strict:    c.strict,
	}
}

// Name returns "openai:<model>".
func (m *Model) Name() string { return Provider + ":" + m.model }

// Describe says which model and server are in use, for logs and `weft dev`.
func (m *Model) Describe() string {
	return fmt.Sprintf("%s (Chat Completions at %s)", m.Name(), m.baseURL)
}

// Complete performs one turn: one Chat Completions call.
func (m *Model) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	params, schema, err := m.params(req)
	if err != nil {
		return model.Reply{}, err
	}
	var httpResp *http.Response
	resp, err := m.client.Chat.Completions.New(ctx, params, option.WithResponseInto(&httpResp))
	if err != nil {
		return model.Reply{}, httperr.Classify(Provider, err, httpResp)
	}
	return reply(resp, schema.Wrapped)
}

// providerData is the adapter's Message.ProviderData: the assistant message
// exactly as it is sent back on later turns.
type providerData struct {
	Provider string          `json:"provider"`
	Message  json.RawMessage `json:"message"`
}

func (m *Model) params(req model.Request) (oai.ChatCompletionNewParams, answer.Schema, error) {
	p := oai.ChatCompletionNewParams{Model: shared.ChatModel(m.model)}
	if m.maxTokens > 0 {
		p.MaxCompletionTokens = param.NewOpt(m.maxTokens)
	}
	if req.System != "" {
		p.Messages = append(p.Messages, oai.SystemMessage(req.System))
	}
	for i, msg := range req.Transcript {
		switch msg.Role {
		case model.RoleUser:
			p.Messages = append(p.Messages, oai.UserMessage(msg.Text))
		case model.RoleAssistant:
			p.Messages = append(p.Messages, assistantMessage(msg))
		case model.RoleTool:
			for _, r := range msg.Results {
				p.Messages = append(p.Messages, oai.ToolMessage(string(r.Content), r.CallID))
			}
		default:
			return p, answer.Schema{}, &model.Error{Kind: model.ErrInvalidRequest,
				Message: fmt.Sprintf("openai: transcript message %d has unknown role %q", i, msg.Role)}
		}
	}
	for _, t := range req.Tools {
		var params map[string]any
		if err := json.Unmarshal(t.InputSchema, &params); err != nil || params == nil {
			return p, answer.Schema{}, &model.Error{Kind: model.ErrInvalidRequest,
				Message: fmt.Sprintf("openai: tool %s: input schema is not a JSON object", t.Name)}
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: params}
		if t.Description != "" {
			fn.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, oai.ChatCompletionFunctionTool(fn))
	}
	var schema answer.Schema
	if len(req.AnswerSchema) > 0 {
		var err error
		schema, err = answer.Wrap(req.AnswerSchema)
		if err != nil {
			return p, schema, &model.Error{Kind: model.ErrInvalidRequest, Message: "openai: " + err.Error()}
		}
		js := shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: AnswerSchemaName, Schema: schema.Object}
		if m.strict {
			js.Strict = param.NewOpt(true)
		}
		p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{
			OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{JSONSchema: js},
		}
	}
	return p, schema, nil
}

// assistantMessage replays an assistant turn: verbatim from provider data
// when this adapter wrote it, else rebuilt from its text and calls (a turn
// recorded by another adapter or by the scripted model).
func assistantMessage(msg model.Message) oai.ChatCompletionMessageParamUnion {
	var pd providerData
	if len(msg.ProviderData) > 0 && json.Unmarshal(msg.ProviderData, &pd) == nil &&
		pd.Provider == Provider && len(pd.Message) > 0 {
		raw := param.Override[oai.ChatCompletionAssistantMessageParam](pd.Message)
		return oai.ChatCompletionMessageParamUnion{OfAssistant: &raw}
	}
	a := oai.ChatCompletionAssistantMessageParam{}
	if msg.Text != "" || len(msg.Calls) == 0 {
		a.Content.OfString = param.NewOpt(msg.Text)
	}
	for _, c := range msg.Calls {
		a.ToolCalls = append(a.ToolCalls, oai.ChatCompletionMessageToolCallUnionParam{
			OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
				ID: c.ID,
				Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
					Name:      c.Name,
					Arguments: string(c.Arguments),
				},
			},
		})
	}
	return oai.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

func invalidReply(format string, args ...any) *model.Error {
	return &model.Error{Kind: model.ErrInvalidReply, Status: http.StatusOK, Message: "openai: " + fmt.Sprintf(format, args...)}
}

// reply turns a completion into a model.Reply.
func reply(resp *oai.ChatCompletion, wrapped bool) (model.Reply, error) {
	if resp == nil || !resp.JSON.Choices.Valid() || len(resp.Choices) == 0 {
		return model.Reply{}, invalidReply("reply has no choices")
	}
	choice := resp.Choices[0]
	if !choice.JSON.Message.Valid() {
		return model.Reply{}, invalidReply("reply choice has no message")
	}
	if !choice.JSON.FinishReason.Valid() {
		return model.Reply{}, invalidReply("reply choice has no finish_reason")
	}
	msg := choice.Message
	out := model.Reply{Usage: usage(resp)}
	switch {
	case choice.FinishReason == "content_filter":
		out.Kind = model.ReplyRefusal
		out.Reason = "content_filter"
		if msg.Refusal != "" {
			out.Reason += ": " + msg.Refusal
		}
		out.Turn = model.Message{Role: model.RoleAssistant}
		return out, nil
	case msg.Refusal != "":
		out.Kind = model.ReplyRefusal
		out.Reason = msg.Refusal
		out.Turn = model.Message{Role: model.RoleAssistant}
		return out, nil
	case choice.FinishReason == "length":
		out.Kind = model.ReplyTruncated
		out.Reason = msg.Content
		out.Turn = model.Message{Role: model.RoleAssistant, Text: msg.Content}
		return out, nil
	}
	pd, err := json.Marshal(providerData{Provider: Provider, Message: replayMessage(msg)})
	if err != nil {
		return model.Reply{}, invalidReply("reply message cannot be kept: %v", err)
	}
	out.Turn = model.Message{Role: model.RoleAssistant, Text: msg.Content, ProviderData: pd}
	if len(msg.ToolCalls) > 0 || choice.FinishReason == "tool_calls" {
		out.Kind = model.ReplyToolRequest
		for i, tc := range msg.ToolCalls {
			if tc.Type != "" && tc.Type != "function" {
				return model.Reply{}, invalidReply("tool call %d has unsupported type %q", i, tc.Type)
			}
			if tc.ID == "" || tc.Function.Name == "" {
				return model.Reply{}, invalidReply("tool call %d has no id or name", i)
			}
			out.Turn.Calls = append(out.Turn.Calls, model.ToolCall{
				ID:        tc.ID,
				Name:      tc.Function.Name,
				Arguments: arguments(tc.Function.Arguments, tc.Function.JSON.Arguments.Raw()),
			})
		}
		return out, nil
	}
	out.Kind = model.ReplyFinalAnswer
	out.Turn.Text = answer.Unwrap(msg.Content, wrapped)
	return out, nil
}

// replayMessage is the assistant message as it is sent back: role, the
// content and tool_calls exactly as the provider returned them.
func replayMessage(msg oai.ChatCompletionMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteString(`{"role":"assistant","content":`)
	if raw := msg.JSON.Content.Raw(); raw != "" {
		b.WriteString(raw)
	} else {
		b.WriteString(`null`)
	}
	if raw := msg.JSON.ToolCalls.Raw(); raw != "" && raw != "null" {
		b.WriteString(`,"tool_calls":`)
		b.WriteString(raw)
	}
	b.WriteString(`}`)
	var compact bytes.Buffer
	if json.Compact(&compact, b.Bytes()) != nil {
		return b.Bytes()
	}
	return compact.Bytes()
}

// arguments returns a tool call's arguments as JSON: the string the model
// sent when it is valid JSON, {} when it is empty (some compatible servers
// send "" for a call without arguments), and otherwise the text encoded as a
// JSON string, so the runtime's validation reports invalid_arguments to the
// model instead of the whole reply being lost. A server that sends the
// arguments as a JSON object instead of a string (raw) has it used as is.
// Provider data keeps the original either way.
func arguments(s, raw string) json.RawMessage {
	if r := strings.TrimSpace(raw); strings.HasPrefix(r, "{") && json.Valid([]byte(r)) {
		return json.RawMessage(r)
	}
	switch {
	case strings.TrimSpace(s) == "":
		return json.RawMessage(`{}`)
	case json.Valid([]byte(s)):
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(s)
	return b
}

// usage returns the reported usage, nil when the reply carries none.
func usage(resp *oai.ChatCompletion) *model.Usage {
	if !resp.JSON.Usage.Valid() || !resp.Usage.JSON.PromptTokens.Valid() || !resp.Usage.JSON.CompletionTokens.Valid() {
		return nil
	}
	return &model.Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}
}
