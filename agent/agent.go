// Package agent defines agents: a name and version, a model, tools, a
// mandatory policy, approvers, an optional typed final answer and the limits
// of docs/semantics.md §2.
//
// New collects a definition; Build checks all of it at once and returns an
// *Agent or a *BuildError listing every problem in a stable order, each
// naming the option, the value and the allowed range. Building starts
// nothing: an Agent is an immutable value the runtime runs.
//
// A run records its agent's name and version (Ref) and the limits it started
// with (Limits, stored in events.RunStarted), and only continues under the
// same name and version: bump the version whenever a change to the tools,
// the policy or the prompt would make an old run's history mean something
// else.
//
// Delegate makes a sub-agent a tool of another agent (docs/semantics.md §1):
// the
// model calls it with {"input": text} and the runtime runs a child run of
// the sub-agent, bounded by the delegating run's max children and max depth
// and by the family turn budget (docs/adr/0007).
//
// The limits, their defaults and their ranges:
//
//	option                 default   range
//	WithMaxTurns           8         1..2^53-1
//	WithMaxConcurrency     4         1..2^31-1
//	WithTokenBudget        none      1..2^53-1
//	WithModelTimeout       600 s     1 ms..2^32-1 ms, or tools.Infinity()
//	WithModelRetryDelay    200 ms    0..(2^32-1)/64 ms
//	WithToolTimeout        60 s      1 ms..2^32-1 ms, or tools.Infinity()
//	WithMaxResultBytes     1 MiB     1..2^53-1
//	WithPolicyTimeout      5 s       1 ms..2^32-1 ms
//	WithCommandTimeout     5 s       1 ms..2^32-1 ms
//	WithApprovalExpiry     7 days    1 ms..2^53-1 ms, or tools.Infinity()
//	WithAnswerAttempts     2         1..100
//	WithMaxChildren        4         0..999
//	WithMaxDepth           1         0..16
package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// The defaults of the limits (docs/semantics.md §2).
const (
	DefaultVersion         = "1"                    // DefaultVersion is the version of an agent without WithVersion.
	DefaultMaxTurns        = 8                      // DefaultMaxTurns is the default of WithMaxTurns.
	DefaultMaxConcurrency  = 4                      // DefaultMaxConcurrency is the default of WithMaxConcurrency.
	DefaultModelTimeout    = 600 * time.Second      // DefaultModelTimeout is the default of WithModelTimeout.
	DefaultModelRetryDelay = 200 * time.Millisecond // DefaultModelRetryDelay is the default of WithModelRetryDelay.
	DefaultToolTimeout     = 60 * time.Second       // DefaultToolTimeout is the default of WithToolTimeout.
	DefaultMaxResultBytes  = 1 << 20                // DefaultMaxResultBytes is the default of WithMaxResultBytes.
	DefaultPolicyTimeout   = 5 * time.Second        // DefaultPolicyTimeout is the default of WithPolicyTimeout.
	DefaultCommandTimeout  = 5 * time.Second        // DefaultCommandTimeout is the default of WithCommandTimeout.
	DefaultApprovalExpiry  = 7 * 24 * time.Hour     // DefaultApprovalExpiry is the default of WithApprovalExpiry.
	DefaultAnswerAttempts  = 2                      // DefaultAnswerAttempts is the default of WithAnswerAttempts.
	DefaultMaxChildren     = 4                      // DefaultMaxChildren is the default of WithMaxChildren.
	DefaultMaxDepth        = 1                      // DefaultMaxDepth is the default of WithMaxDepth.
)

// The bounds of the ranges.
const (
	// MaxSafeInteger is 2^53-1, the largest integer every JSON reader keeps
	// exact.
	MaxSafeInteger = 1<<53 - 1
	// MaxTimer is 2^32-1 ms, the longest timer the runtime sets.
	MaxTimer = (1<<32 - 1) * time.Millisecond
	// MaxRetryDelay is (2^32-1)/64 ms: the retry delay doubles up to 64
	// times its value and must stay a valid timer.
	MaxRetryDelay = (1<<32 - 1) * time.Millisecond / 64
	// MaxToolAttempts is the most starts WithReplay allows.
	MaxToolAttempts = 100
)

// Option configures a definition; see the package documentation for the
// defaults and ranges. Out-of-range values are not refused by the option but
// by Build, with every other problem.
type Option func(*config)

type answerSpec struct {
	schema json.RawMessage
	err    error
	decode func(json.RawMessage) (json.RawMessage, error)
}

type config struct {
	version        string
	system         string
	approvers      []*approvers.Approver
	maxTurns       int64
	maxConcurrency int
	tokenBudget    int64
	tokenBudgetSet bool
	modelTimeout   tools.Timeout
	retryDelay     time.Duration
	toolTimeout    tools.Timeout
	maxResultBytes int64
	policyTimeout  time.Duration
	commandTimeout time.Duration
	approvalExpiry tools.Timeout
	answerAttempts int
	maxChildren    int
	maxDepth       int
	answer         *answerSpec
}

// WithVersion sets the agent's version (default "1"): 1 to 64 ASCII
// letters, digits, '.', '_' or '-'.
func WithVersion(version string) Option { return func(c *config) { c.version = version } }

// WithSystem sets the system prompt the model is given on every turn.
func WithSystem(prompt string) Option { return func(c *config) { c.system = prompt } }

// WithApprovers sets the approvers whose proofs may approve the agent's
// actions. Without approvers every approval is refused
// (proof_refused(no_approvers)); rejections and expiries still work.
func WithApprovers(list ...*approvers.Approver) Option {
	return func(c *config) { c.approvers = append([]*approvers.Approver(nil), list...) }
}

// WithMaxTurns sets how many model attempts a run may make (default 8,
// range 1..2^53-1). Every attempt counts: continuations, retries and
// corrective turns.
func WithMaxTurns(n int64) Option { return func(c *config) { c.maxTurns = n } }

// WithMaxConcurrency sets how many tool bodies of one run may be in flight
// at once (default 4, range 1..2^31-1). Waiting approvals hold no slot.
func WithMaxConcurrency(n int) Option { return func(c *config) { c.maxConcurrency = n } }

// WithTokenBudget sets the most input plus output tokens a run may use
// (default none, range 1..2^53-1). Under a budget, a reply without usage
// ends the run budget_unverifiable.
func WithTokenBudget(n int64) Option {
	return func(c *config) { c.tokenBudget, c.tokenBudgetSet = n, true }
}

// WithModelTimeout bounds each model call (default 600 s; range 1 ms..2^32-1
// ms, or tools.Infinity()). A call still running is stopped and retried as
// timed_out; it spends its turn.
func WithModelTimeout(t tools.Timeout) Option { return func(c *config) { c.modelTimeout = t } }

// WithModelRetryDelay sets the delay before retrying a retryable model
// failure (default 200 ms, range 0..(2^32-1)/64 ms). It doubles with every
// consecutive failure, up to 64 times; a longer provider retry-after wins.
func WithModelRetryDelay(d time.Duration) Option { return func(c *config) { c.retryDelay = d } }

// WithToolTimeout bounds the body of every tool without its own timeout
// (default 60 s; range 1 ms..2^32-1 ms, or tools.Infinity()).
func WithToolTimeout(t tools.Timeout) Option { return func(c *config) { c.toolTimeout = t } }

// WithMaxResultBytes sets the largest encoded tool result (default 1 MiB,
// range 1..2^53-1). A larger result faults its action and fails the run
// output_encoding_failed; the effect did happen.
func WithMaxResultBytes(n int64) Option { return func(c *config) { c.maxResultBytes = n } }

// WithPolicyTimeout bounds each policy decision (default 5 s, range 1
// ms..2^32-1 ms). A policy past it fails the run closed (policy_failed).
func WithPolicyTimeout(d time.Duration) Option { return func(c *config) { c.policyTimeout = d } }

// WithCommandTimeout sets how long approve, reject and reconcile wait to be
// applied before answering runner_busy (default 5 s, range 1 ms..2^32-1 ms).
// A command answered runner_busy is never applied later.
func WithCommandTimeout(d time.Duration) Option { return func(c *config) { c.commandTimeout = d } }

// WithApprovalExpiry sets how long an approval request waits for an answer
// (default 7 days; range 1 ms..2^53-1 ms, or tools.Infinity()). The deadline is
// absolute, stored with the request and judged by the store's clock.
func WithApprovalExpiry(t tools.Timeout) Option { return func(c *config) { c.approvalExpiry = t } }

// WithAnswerAttempts sets how many attempts a typed final answer gets,
// corrective turns included (default 2, range 1..100).
func WithAnswerAttempts(n int) Option { return func(c *config) { c.answerAttempts = n } }

// WithMaxChildren sets how many sub-agent runs a run may start (default 4,
// range 0..999).
func WithMaxChildren(n int) Option { return func(c *config) { c.maxChildren = n } }

// WithMaxDepth sets how deep sub-agent delegation may nest (default 1, range
// 0..16).
func WithMaxDepth(n int) Option { return func(c *config) { c.maxDepth = n } }

// WithTypedAnswer makes the agent's final answer a JSON value of type T: the
// model is given T's JSON Schema (see tools.Codec), an answer that does not
// decode gets a corrective turn (WithAnswerAttempts), and a run completes
// with the normalized answer JSON.
func WithTypedAnswer[T any]() Option {
	codec := tools.CodecFor[T]()
	spec := &answerSpec{
		schema: codec.Schema(),
		err:    codec.Err(),
		decode: func(data json.RawMessage) (json.RawMessage, error) {
			_, norm, err := codec.Normalize(data)
			return norm, err
		},
	}
	return func(c *config) { c.answer = spec }
}

// Definition is an agent definition before Build checked it. It is made by
// New and only read by Build.
type Definition struct {
	name   string
	model  model.Model
	tools  []tools.Tool
	policy policy.Policy
	opts   []Option
}

// New returns the definition of an agent called name (1 to 64 ASCII letters,
// digits, '_' or '-') that thinks with m, may call the tools in list
// (their order is the order the model is shown them) and decides on every
// action with p. Nothing is checked until Build.
func New(name string, m model.Model, list []tools.Tool, p policy.Policy, opts ...Option) *Definition {
	return &Definition{
		name:   name,
		model:  m,
		tools:  append([]tools.Tool(nil), list...),
		policy: p,
		opts:   append([]Option(nil), opts...),
	}
}

// Build checks the definition and returns the Agent, or a *BuildError with
// every problem, in this order: the name and version (InvalidIdentity), the
// model and the policy (MissingPart), the limits in the order max turns,
// max concurrency, token budget, max children, max depth, policy timeout,
// model timeout, model retry delay, tool timeout, command timeout, approval
// expiry, max result bytes, answer attempts (InvalidLimit), the typed
// answer's schema (AnswerSchemaUnavailable), the approvers (InvalidApprover),
// then each tool in list order: nil (NilTool), name (InvalidToolName,
// DuplicateToolName), schema (ToolSchemaUnavailable), replay, timeout and
// settle window (InvalidToolLimit). Build starts nothing.
func (d *Definition) Build() (*Agent, error) {
	c := config{
		version:        DefaultVersion,
		maxTurns:       DefaultMaxTurns,
		maxConcurrency: DefaultMaxConcurrency,
		modelTimeout:   tools.After(DefaultModelTimeout),
		retryDelay:     DefaultModelRetryDelay,
		toolTimeout:    tools.After(DefaultToolTimeout),
		maxResultBytes: DefaultMaxResultBytes,
		policyTimeout:  DefaultPolicyTimeout,
		commandTimeout: DefaultCommandTimeout,
		approvalExpiry: tools.After(DefaultApprovalExpiry),
		answerAttempts: DefaultAnswerAttempts,
		maxChildren:    DefaultMaxChildren,
		maxDepth:       DefaultMaxDepth,
	}
	for _, o := range d.opts {
		if o != nil {
			o(&c)
		}
	}
	var problems []error
	add := func(err error) { problems = append(problems, err) }

	if !validToken(d.name, false) {
		add(&InvalidIdentity{Field: "name", Value: d.name, Rule: "1-64 ASCII letters, digits, '_' or '-'"})
	}
	if !validToken(c.version, true) {
		add(&InvalidIdentity{Field: "version", Value: c.version, Rule: "1-64 ASCII letters, digits, '.', '_' or '-'"})
	}
	if d.model == nil {
		add(&MissingPart{Part: "model"})
	}
	if d.policy == nil {
		add(&MissingPart{Part: "policy"})
	}

	intRange := func(option string, v, lo, hi int64) {
		if v < lo || v > hi {
			add(&InvalidLimit{Option: option, Value: strconv.FormatInt(v, 10), Range: fmt.Sprintf("%d..%d", lo, hi)})
		}
	}
	intRange("WithMaxTurns", c.maxTurns, 1, MaxSafeInteger)
	intRange("WithMaxConcurrency", int64(c.maxConcurrency), 1, 1<<31-1)
	if c.tokenBudgetSet {
		intRange("WithTokenBudget", c.tokenBudget, 1, MaxSafeInteger)
	}
	intRange("WithMaxChildren", int64(c.maxChildren), 0, 999)
	intRange("WithMaxDepth", int64(c.maxDepth), 0, 16)
	if !durationIn(c.policyTimeout, time.Millisecond, MaxTimer) {
		add(&InvalidLimit{Option: "WithPolicyTimeout", Value: c.policyTimeout.String(), Range: "1ms..4294967295ms"})
	}
	if !timeoutIn(c.modelTimeout, MaxTimer) {
		add(&InvalidLimit{Option: "WithModelTimeout", Value: c.modelTimeout.String(), Range: "1ms..4294967295ms or infinity"})
	}
	if !durationIn(c.retryDelay, 0, MaxRetryDelay) {
		add(&InvalidLimit{Option: "WithModelRetryDelay", Value: c.retryDelay.String(), Range: "0ms..67108863ms"})
	}
	if !timeoutIn(c.toolTimeout, MaxTimer) {
		add(&InvalidLimit{Option: "WithToolTimeout", Value: c.toolTimeout.String(), Range: "1ms..4294967295ms or infinity"})
	}
	if !durationIn(c.commandTimeout, time.Millisecond, MaxTimer) {
		add(&InvalidLimit{Option: "WithCommandTimeout", Value: c.commandTimeout.String(), Range: "1ms..4294967295ms"})
	}
	// 2^53-1 ms is longer than any time.Duration, so only the lower bound
	// can be broken.
	if !timeoutIn(c.approvalExpiry, math.MaxInt64) {
		add(&InvalidLimit{Option: "WithApprovalExpiry", Value: c.approvalExpiry.String(), Range: "1ms..9007199254740991ms or infinity"})
	}
	intRange("WithMaxResultBytes", c.maxResultBytes, 1, MaxSafeInteger)
	intRange("WithAnswerAttempts", int64(c.answerAttempts), 1, 100)

	if c.answer != nil && c.answer.err != nil {
		add(&AnswerSchemaUnavailable{Err: c.answer.err})
	}

	seenApprover := map[string]bool{}
	for i, a := range c.approvers {
		switch {
		case a == nil:
			add(&InvalidApprover{Index: i, Problem: "nil"})
		case a.Name() == "":
			add(&InvalidApprover{Index: i, Problem: "unnamed"})
		case seenApprover[a.Name()]:
			add(&InvalidApprover{Index: i, Name: a.Name(), Problem: "duplicate"})
		default:
			seenApprover[a.Name()] = true
		}
	}

	firstIndex := map[string]int{}
	byName := map[string]tools.Tool{}
	for i, t := range d.tools {
		if t == nil {
			add(&NilTool{Index: i})
			continue
		}
		name := t.Name()
		if !tools.ValidName(name) {
			add(&InvalidToolName{Index: i, Name: name})
		} else if first, dup := firstIndex[name]; dup {
			add(&DuplicateToolName{Name: name, First: first, Second: i})
		} else {
			firstIndex[name] = i
			byName[name] = t
		}
		if err := t.SchemaErr(); err != nil {
			add(&ToolSchemaUnavailable{Tool: name, Err: err})
		}
		if n := t.MaxAttempts(); n < 1 || n > MaxToolAttempts {
			add(&InvalidToolLimit{Tool: name, Option: "tools.WithReplay", Value: strconv.Itoa(n), Range: "1..100"})
		}
		if to := t.Timeout(); !to.IsZero() && !timeoutIn(to, MaxTimer) {
			add(&InvalidToolLimit{Tool: name, Option: "tools.WithTimeout", Value: to.String(), Range: "1ms..4294967295ms or infinity"})
		}
		if t.Settling() && !durationIn(t.SettleWithin(), time.Millisecond, MaxTimer) {
			add(&InvalidToolLimit{Tool: name, Option: "tools.BindSettling", Value: t.SettleWithin().String(), Range: "1ms..4294967295ms"})
		}
	}

	if len(problems) > 0 {
		return nil, &BuildError{Agent: d.name, Problems: problems}
	}
	a := &Agent{
		name:      d.name,
		version:   c.version,
		model:     d.model,
		tools:     d.tools,
		byName:    byName,
		policy:    d.policy,
		approvers: c.approvers,
		system:    c.system,
		answer:    c.answer,
		limits: events.Limits{
			MaxTurns:        c.maxTurns,
			MaxConcurrency:  c.maxConcurrency,
			ModelTimeout:    c.modelTimeout.Millis(),
			ModelRetryDelay: events.MillisOf(c.retryDelay),
			ToolTimeout:     c.toolTimeout.Millis(),
			MaxResultBytes:  c.maxResultBytes,
			PolicyTimeout:   events.MillisOf(c.policyTimeout),
			CommandTimeout:  events.MillisOf(c.commandTimeout),
			ApprovalExpiry:  c.approvalExpiry.Millis(),
			AnswerAttempts:  c.answerAttempts,
			MaxChildren:     c.maxChildren,
			MaxDepth:        c.maxDepth,
		},
	}
	if c.tokenBudgetSet {
		a.limits.TokenBudget = c.tokenBudget
	}
	return a, nil
}

// validToken checks the grammar of agent names (and versions, which also
// allow '.').
func validToken(s string, dots bool) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '_', ch == '-':
		case ch == '.' && dots:
		default:
			return false
		}
	}
	return true
}

func durationIn(d, lo, hi time.Duration) bool { return d >= lo && d <= hi }

func timeoutIn(t tools.Timeout, hi time.Duration) bool {
	if t.IsInfinite() {
		return true
	}
	d, ok := t.Duration()
	return ok && durationIn(d, time.Millisecond, hi)
}

// Agent is a built, checked agent definition. It is immutable and safe for
// concurrent use.
type Agent struct {
	name      string
	version   string
	model     model.Model
	tools     []tools.Tool
	byName    map[string]tools.Tool
	policy    policy.Policy
	approvers []*approvers.Approver
	system    string
	answer    *answerSpec
	limits    events.Limits
}

// Name returns the agent's name.
func (a *Agent) Name() string { return a.name }

// Version returns the agent's version.
func (a *Agent) Version() string { return a.version }

// Ref returns the (name, version) pair a run records and continues under.
func (a *Agent) Ref() events.AgentRef { return events.AgentRef{Name: a.name, Version: a.version} }

// Model returns the agent's model.
func (a *Agent) Model() model.Model { return a.model }

// Tools returns the agent's tools in the order the model is shown them. The
// slice is a copy.
func (a *Agent) Tools() []tools.Tool { return append([]tools.Tool(nil), a.tools...) }

// Tool returns the tool called name, and false when the agent has none (the
// action's outcome is then unknown_tool).
func (a *Agent) Tool(name string) (tools.Tool, bool) {
	t, ok := a.byName[name]
	return t, ok
}

// ValidateCall is the check every call of a tool request gets before any
// policy runs: outcome is events.CallUnknownTool when the agent has no tool
// called name (detail "unknown_tool"), events.CallInvalidArguments when the
// arguments do not fit the tool's input schema (detail "<path>: <reason>",
// what the model reads), or events.CallValid with the validated arguments:
// their normalized JSON and their decoded value (tools.Arguments).
func (a *Agent) ValidateCall(name string, args json.RawMessage) (outcome, detail string, valid tools.Arguments) {
	t, ok := a.byName[name]
	if !ok {
		return events.CallUnknownTool, "unknown_tool", tools.Arguments{}
	}
	valid, err := t.Validate(args)
	if err != nil {
		return events.CallInvalidArguments, err.Error(), tools.Arguments{}
	}
	return events.CallValid, "", valid
}

// ToolConfig returns the configuration the runtime records for an action
// of the tool called name (events.ActionQueued, copied onto every fence):
// the tool's own timeout, or the agent's tool timeout when the tool has
// none; its replay budget; its settle window. It returns false when the
// agent has no such tool.
func (a *Agent) ToolConfig(name string) (events.ToolConfig, bool) {
	t, ok := a.byName[name]
	if !ok {
		return events.ToolConfig{}, false
	}
	timeout := a.limits.ToolTimeout
	if to := t.Timeout(); !to.IsZero() {
		timeout = to.Millis()
	}
	var settle events.Millis
	if t.Settling() {
		settle = events.MillisOf(t.SettleWithin())
	}
	return events.ToolConfig{Timeout: timeout, MaxAttempts: t.MaxAttempts(), SettleWithin: settle}, true
}

// Specs returns what the model is told about the tools, in order.
func (a *Agent) Specs() []model.ToolSpec {
	out := make([]model.ToolSpec, len(a.tools))
	for i, t := range a.tools {
		out[i] = t.Spec()
	}
	return out
}

// Request completes a model request rebuilt from the log (run, turn,
// correlation, transcript) with what the agent contributes to every turn:
// the system prompt, the tool specs in order and, for a typed answer, the
// answer schema.
func (a *Agent) Request(r model.Request) model.Request {
	r.System = a.system
	r.Tools = a.Specs()
	r.AnswerSchema = a.AnswerSchema()
	return r
}

// Policy returns the agent's policy.
func (a *Agent) Policy() policy.Policy { return a.policy }

// Approvers returns the agent's approvers (a copy of the list).
func (a *Agent) Approvers() []*approvers.Approver {
	return append([]*approvers.Approver(nil), a.approvers...)
}

// Limits returns the limits a run of this agent starts with, in the form
// stored in events.RunStarted.
func (a *Agent) Limits() events.Limits { return a.limits }

// System returns the system prompt ("" when none).
func (a *Agent) System() string { return a.system }

// Typed reports whether the agent has a typed final answer.
func (a *Agent) Typed() bool { return a.answer != nil }

// AnswerSchema returns the JSON Schema of the typed final answer, or nil
// when the answer is free text.
func (a *Agent) AnswerSchema() json.RawMessage {
	if a.answer == nil {
		return nil
	}
	return a.answer.schema
}

// DecodeAnswer turns a final answer's text into the run's answer JSON. For a
// free-text agent it is the text as a JSON string. For a typed answer the
// text must be a JSON value (a surrounding Markdown code fence is removed)
// that fits the answer schema; it returns the normalized JSON, or a
// *tools.ValidationError whose text is the reason given to the model in the
// corrective turn.
func (a *Agent) DecodeAnswer(text string) (json.RawMessage, error) {
	if a.answer == nil {
		b, err := json.Marshal(text)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
	body := stripFence(text)
	if len(bytes.TrimSpace([]byte(body))) == 0 {
		return nil, &tools.ValidationError{Reason: "the answer is empty, want a JSON value"}
	}
	return a.answer.decode(json.RawMessage(body))
}

// stripFence removes one surrounding ``` or ```json fence.
func stripFence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") || !strings.HasSuffix(t, "```") || len(t) < 6 {
		return s
	}
	t = strings.TrimSuffix(strings.TrimPrefix(t, "```"), "```")
	if i := strings.IndexByte(t, '\n'); i >= 0 && !strings.ContainsAny(t[:i], "{[\"") {
		t = t[i+1:]
	}
	return t
}
