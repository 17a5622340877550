package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
)

// Definition is a tool's contract with the model: its name, its
// description, the codec of its arguments (the JSON Schema the model is told
// and the decoder of what it sends) and the codec of its result. It holds no
// behaviour: Bind and BindSettling attach a handler, and a policy matches
// actions on it with Input. A Definition is immutable and safe to share.
type Definition[In, Out any] struct {
	name        string
	description string
	input       *Codec[In]
	output      *Codec[Out]
}

// Define returns the Definition of a tool called name that the model reads
// about in description, with input type In and output type Out. Define never
// fails: a name outside the grammar (see ValidName) or a type without a JSON
// Schema is reported by agent.Build with every other problem of the agent.
func Define[In, Out any](name, description string) *Definition[In, Out] {
	return &Definition[In, Out]{
		name:        name,
		description: description,
		input:       CodecFor[In](),
		output:      CodecFor[Out](),
	}
}

// Name returns the name the model calls the tool by.
func (d *Definition[In, Out]) Name() string { return d.name }

// Description returns the description the model reads.
func (d *Definition[In, Out]) Description() string { return d.description }

// Input returns the codec of the tool's arguments: its JSON Schema is what
// the model is told, and it decodes what the model sends.
func (d *Definition[In, Out]) Input() *Codec[In] { return d.input }

// Output returns the codec of the tool's result, as the model reads it.
func (d *Definition[In, Out]) Output() *Codec[Out] { return d.output }

// Spec returns the description of the tool a model adapter sends to the
// model. InputSchema is nil when the input type has no schema.
func (d *Definition[In, Out]) Spec() model.ToolSpec {
	return model.ToolSpec{Name: d.name, Description: d.description, InputSchema: d.input.Schema()}
}

// Call is the invocation a handler answers: which run and action it belongs
// to, which attempt of the action this is, and the caller's correlation id.
// Run and Action stay the same across every attempt, replay and recovery of
// the action; Attempt counts from 1.
type Call struct {
	// Run is the run id.
	Run string
	// Action is the action id, "<turn>/<call id>".
	Action string
	// Attempt is the 1-based attempt number; replays increase it.
	Attempt int
	// Correlation is the correlation id the run was started with. It is
	// for tracing only: it is not part of the idempotency key.
	Correlation string
}

// IdempotencyKey returns IdempotencyKey(c).
func (c Call) IdempotencyKey() string { return IdempotencyKey(c) }

// idempotencyDomain separates Weft's keys from other hashes of the same parts
// and versions the key format.
const idempotencyDomain = "weft.idempotency.v1"

// IdempotencyKey returns an external idempotency key for the logical action
// c belongs to: the lowercase hex SHA-256 of the JSON array
// ["weft.idempotency.v1", run, action]. It is stable across attempts,
// replays and recoveries, independent of the attempt and the correlation,
// and its parts are framed, so no two (run, action) pairs share a key even
// when their concatenations are equal. Pass it to a payment gateway or any
// API that deduplicates requests.
func IdempotencyKey(c Call) string {
	b, err := json.Marshal([3]string{idempotencyDomain, c.Run, c.Action})
	if err != nil {
		// Marshalling strings cannot fail; invalid UTF-8 is replaced.
		panic(fmt.Sprintf("tools: idempotency key: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Failure is what a classify function makes of a handler's error: a definite
// failure the model sees (Explain) or an effect that may have happened
// (Uncertain). The zero Failure is neither; an Invoke that gets it records
// the action as uncertain.
type Failure struct {
	set       bool
	uncertain bool
	text      string
}

// Explain returns a definite failure: the effect did not happen, the model
// sees {"error": message} and the run continues. message is shown to the
// model; it must carry no secrets.
func Explain(message string) Failure { return Failure{set: true, text: message} }

// Uncertain returns an effect that may have happened, with evidence of what
// is known (say "gateway timed out after the request was sent"). The action
// blocks the run until a person reconciles it, and it is never replayed.
func Uncertain(evidence string) Failure {
	return Failure{set: true, uncertain: true, text: evidence}
}

// IsUncertain reports whether f is an Uncertain failure.
func (f Failure) IsUncertain() bool { return f.uncertain }

// Text returns the message of an Explain or the evidence of an Uncertain.
func (f Failure) Text() string { return f.text }

func (f Failure) isZero() bool { return !f.set }

// Classify decides what every error a handler returns means. It is
// mandatory: there is no default, because a timeout after a request was sent
// must not look like a clean failure the model could simply retry.
type Classify func(error) Failure

// Handler is a typed tool body. It runs with the run's context, bounded by
// the tool's timeout, and gets the Call it answers and the decoded input.
// It returns the output, or an error that the tool's Classify turns into an
// Explain or an Uncertain. A panic is recorded as Uncertain.
type Handler[In, Out any] func(ctx context.Context, call Call, in In) (Out, error)

// SettlingHandler is a typed tool body that also gets its invocation's
// Settler. When its task is stopped (body timeout, cancellation) the run
// waits up to the tool's settle window for a settlement through the Settler
// before recording an uncertain effect. Its own return value is used
// whenever it returns.
type SettlingHandler[In, Out any] func(ctx context.Context, call Call, in In, s *Settler[Out]) (Out, error)

// Result is what one invocation of a tool produced, as the runtime records
// it. Outcome is events.OutcomeOutput (Content is the encoded output),
// events.OutcomeExplain (Message is the definite failure; Content is
// {"error": Message}, what the model reads) or events.OutcomeUncertain
// (Evidence says what is known; Content is nil). Its JSON form is the one
// docs/protocol (tools section) documents for workers in other languages.
type Result struct {
	// Outcome is "output", "explain" or "uncertain".
	Outcome string `json:"outcome"`
	// Content is what the model reads: the encoded output, or
	// {"error": Message} for explain.
	Content json.RawMessage `json:"content,omitempty"`
	// Message is an explain's definite failure.
	Message string `json:"message,omitempty"`
	// Evidence is what is known about an uncertain effect.
	Evidence string `json:"evidence,omitempty"`
}

// OutputResult returns the Result of an encoded output.
func OutputResult(content json.RawMessage) Result {
	return Result{Outcome: events.OutcomeOutput, Content: content}
}

// FailureResult returns the Result of a classified failure.
func FailureResult(f Failure) Result {
	if f.isZero() {
		return Result{Outcome: events.OutcomeUncertain, Evidence: "the error was classified as neither Explain nor Uncertain"}
	}
	if f.uncertain {
		return Result{Outcome: events.OutcomeUncertain, Evidence: f.text}
	}
	return Result{Outcome: events.OutcomeExplain, Message: f.text, Content: ErrorContent(f.text)}
}

// ErrorContent returns {"error": message}, the content the model reads for a
// definite failure.
func ErrorContent(message string) json.RawMessage {
	b, err := json.Marshal(struct {
		Error string `json:"error"`
	}{message})
	if err != nil {
		panic(fmt.Sprintf("tools: error content: %v", err))
	}
	return b
}

// SettleFunc records a settlement for the runtime. It blocks until the run
// recorded or refused the settlement and returns nil or a *weft.Error with
// code already_recorded, not_awaited or settle_unconfirmed.
type SettleFunc func(ctx context.Context, result Result, summary string) error

// Settlement is the runtime's handle on one invocation of a settling tool:
// the action it settles (run id and action id, the reference a person
// reconciles with when the settlement is refused) and how to record it. The
// runtime builds it with NewSettlement and passes it to Tool.Invoke; the
// handler sees it typed, as a Settler. The zero Settlement settles nothing:
// Settle returns not_awaited.
type Settlement struct {
	run    string
	action string
	settle SettleFunc
}

// NewSettlement returns the Settlement of action in run, recorded by settle.
func NewSettlement(run, action string, settle SettleFunc) Settlement {
	return Settlement{run: run, action: action, settle: settle}
}

// Run returns the run id of the action this settlement settles.
func (s Settlement) Run() string { return s.run }

// Action returns the action id this settlement settles.
func (s Settlement) Action() string { return s.action }

// Settle records result for the action and blocks until the run recorded or
// refused it. It returns nil when the settlement was recorded, or a
// *weft.Error: already_recorded (the action has its result; nothing is
// lost), not_awaited (nobody waits for it any more: a person must reconcile,
// and the refusal is observed as settlement_refused with summary) or
// settle_unconfirmed (whether the store recorded it is unknown). summary is
// what a person needs to reconcile the action; it goes to telemetry, so it
// must carry no secrets.
func (s Settlement) Settle(ctx context.Context, result Result, summary string) error {
	if s.settle == nil {
		return &weft.Error{Code: weft.CodeNotAwaited, Message: "this invocation takes no settlement"}
	}
	return s.settle(ctx, result, summary)
}

// Settler is the typed Settlement a SettlingHandler settles through.
type Settler[Out any] struct {
	settlement Settlement
	output     *Codec[Out]
}

// Run returns the run id of the action this settler settles.
func (s *Settler[Out]) Run() string { return s.settlement.run }

// Action returns the action id this settler settles.
func (s *Settler[Out]) Action() string { return s.settlement.action }

// Settle settles the invocation with out, encoded with the tool's output
// codec, as Settlement.Settle does.
func (s *Settler[Out]) Settle(ctx context.Context, out Out, summary string) error {
	content, err := s.output.Encode(out)
	if err != nil {
		return err
	}
	return s.settlement.Settle(ctx, OutputResult(content), summary)
}

// Fail settles the invocation with a typed failure, Explain (definite) or
// Uncertain, as Settlement.Settle does.
func (s *Settler[Out]) Fail(ctx context.Context, f Failure, summary string) error {
	return s.settlement.Settle(ctx, FailureResult(f), summary)
}

// Timeout bounds a body: After(d) or Infinity(). The zero Timeout means "not
// set": a tool without its own timeout uses the agent's.
type Timeout struct {
	d        time.Duration
	set      bool
	infinite bool
}

// After returns a Timeout of d. agent.Build refuses d under 1 ms or over
// 2^32-1 ms.
func After(d time.Duration) Timeout { return Timeout{d: d, set: true} }

// Infinity returns the Timeout of a body that may run as long as it needs.
func Infinity() Timeout { return Timeout{set: true, infinite: true} }

// IsZero reports whether t is unset.
func (t Timeout) IsZero() bool { return !t.set }

// IsInfinite reports whether t is Infinity().
func (t Timeout) IsInfinite() bool { return t.infinite }

// Duration returns the bound of an After timeout; ok is false for Infinity()
// and for the zero Timeout.
func (t Timeout) Duration() (d time.Duration, ok bool) {
	if !t.set || t.infinite {
		return 0, false
	}
	return t.d, true
}

// Millis returns t as stored in events: events.Infinite for Infinity(), the
// whole milliseconds of an After, 0 for the zero Timeout.
func (t Timeout) Millis() events.Millis {
	switch {
	case !t.set:
		return 0
	case t.infinite:
		return events.Infinite
	}
	return events.MillisOf(t.d)
}

// String returns "infinity", the duration, or "unset".
func (t Timeout) String() string {
	switch {
	case !t.set:
		return "unset"
	case t.infinite:
		return "infinity"
	}
	return t.d.String()
}

// Tool is a bound tool as the runtime sees it: its types erased, its
// settings readable. Bind and BindSettling return one; WithReplay and
// WithTimeout return a copy with a setting changed. Out-of-range settings
// are not refused here but by agent.Build, with every other problem.
type Tool interface {
	// Name returns the name the model calls the tool by.
	Name() string
	// Spec returns what the model is told about the tool.
	Spec() model.ToolSpec
	// SchemaErr returns why the tool's input or output type has no JSON
	// Schema, or nil.
	SchemaErr() error
	// MaxAttempts returns how many starts of the body an action may have
	// (1 unless WithReplay raised it).
	MaxAttempts() int
	// Timeout returns the tool's own body timeout; the zero Timeout means
	// the agent's tool timeout applies.
	Timeout() Timeout
	// Settling reports whether the tool was bound with BindSettling.
	Settling() bool
	// SettleWithin returns how long a stopped body's run waits for a
	// settlement; 0 for a tool that does not settle.
	SettleWithin() time.Duration
	// Validate checks the model's arguments against the input schema and
	// decodes them, once: it returns the normalized arguments JSON (what
	// the log records and the policy sees) with the decoded value, or a
	// *ValidationError.
	Validate(args json.RawMessage) (Arguments, error)
	// Invoke runs the body once for call with arguments Validate accepted
	// (the normalized JSON the log recorded, as a task carries it), which
	// it decodes once and does not validate again. It never panics and
	// never returns an error: a panic becomes an uncertain Result, a
	// handler error is classified, an output is encoded with the output
	// codec. settlement is used by settling tools only.
	Invoke(ctx context.Context, call Call, args json.RawMessage, settlement Settlement) Result
}

// Arguments are a call's arguments as Tool.Validate accepted them: parsed
// once, by the process that validates them, and passed along in that
// process (the policy's typed match reads Value; docs/adr/0022). What
// crosses a process boundary (the log, a task) is JSON.
type Arguments struct {
	// JSON is the normalized arguments JSON: the same value compacted, an
	// empty or null value written as {}. The log records it, the policy
	// sees it (policy.Action.Arguments) and a task carries it to the body.
	JSON json.RawMessage
	// Decoded is JSON decoded into the tool's Go input type, the zero
	// Decoded for a tool without one (an MCP tool). Pass it on as
	// policy.Action.Decoded.
	Decoded policy.Decoded
}

// bound is the one implementation of Tool.
type bound[In, Out any] struct {
	def          *Definition[In, Out]
	handler      SettlingHandler[In, Out]
	classify     Classify
	maxAttempts  int
	timeout      Timeout
	settleWithin time.Duration
	settling     bool
}

// Bind binds a typed handler to def. classify decides, for every error the
// handler returns, whether it is a definite failure (Explain) or an effect
// that may have happened (Uncertain). The tool is not replayable (see
// WithReplay) and uses the agent's tool timeout (see WithTimeout).
func Bind[In, Out any](def *Definition[In, Out], handler Handler[In, Out], classify Classify) Tool {
	return &bound[In, Out]{
		def: def,
		handler: func(ctx context.Context, call Call, in In, _ *Settler[Out]) (Out, error) {
			return handler(ctx, call, in)
		},
		classify:    classify,
		maxAttempts: 1,
	}
}

// BindSettling binds a typed handler that also receives its invocation's
// Settler, and whose stopped run waits up to settleWithin for that
// settlement before recording an uncertain effect. agent.Build refuses a
// settleWithin under 1 ms or over 2^32-1 ms. The handler's own result is
// used when it returns; the settlement matters only once its task was
// stopped. classify is as for Bind.
func BindSettling[In, Out any](def *Definition[In, Out], handler SettlingHandler[In, Out], classify Classify, settleWithin time.Duration) Tool {
	return &bound[In, Out]{
		def:          def,
		handler:      handler,
		classify:     classify,
		maxAttempts:  1,
		settleWithin: settleWithin,
		settling:     true,
	}
}

// WithReplay returns a copy of tool that the runtime may start again, up to
// maxAttempts starts in all, when an attempt ends without a result of its
// own: its body crashed, ran past its timeout, or its worker or runner was
// lost. Without it such an action becomes an uncertain effect a person
// reconciles. Use it only for a read, or a write the handler makes
// idempotent (keyed by IdempotencyKey, stable across attempts). A typed
// failure (Explain, Uncertain) is never replayed, nor is a body stopped by
// cancellation. agent.Build refuses fewer than 1 or more than 100 attempts.
func WithReplay(tool Tool, maxAttempts int) Tool {
	return reconfigure(tool, func(s *settings) { s.maxAttempts = maxAttempts })
}

// WithTimeout returns a copy of tool whose body is bounded by timeout
// instead of the agent's tool timeout: After(d), or Infinity() for a body that
// may run as long as it needs. A body still running at its timeout is
// stopped and its action becomes uncertain unless the tool is replayable.
// agent.Build refuses a timeout under 1 ms or over 2^32-1 ms.
func WithTimeout(tool Tool, timeout Timeout) Tool {
	return reconfigure(tool, func(s *settings) { s.timeout = timeout })
}

type settings struct {
	maxAttempts int
	timeout     Timeout
}

type reconfigurable interface {
	withSettings(func(*settings)) Tool
}

func reconfigure(tool Tool, change func(*settings)) Tool {
	if r, ok := tool.(reconfigurable); ok {
		return r.withSettings(change)
	}
	s := settings{maxAttempts: tool.MaxAttempts(), timeout: tool.Timeout()}
	if w, ok := tool.(*wrapped); ok {
		s = w.s
		tool = w.Tool
	}
	change(&s)
	return &wrapped{Tool: tool, s: s}
}

// wrapped overrides the settings of a Tool implemented outside this package.
type wrapped struct {
	Tool
	s settings
}

func (w *wrapped) MaxAttempts() int { return w.s.maxAttempts }
func (w *wrapped) Timeout() Timeout { return w.s.timeout }

func (b *bound[In, Out]) withSettings(change func(*settings)) Tool {
	s := settings{maxAttempts: b.maxAttempts, timeout: b.timeout}
	change(&s)
	c := *b
	c.maxAttempts, c.timeout = s.maxAttempts, s.timeout
	return &c
}

func (b *bound[In, Out]) Name() string         { return b.def.name }
func (b *bound[In, Out]) Spec() model.ToolSpec { return b.def.Spec() }
func (b *bound[In, Out]) MaxAttempts() int     { return b.maxAttempts }
func (b *bound[In, Out]) Timeout() Timeout     { return b.timeout }

func (b *bound[In, Out]) SettleWithin() time.Duration { return b.settleWithin }
func (b *bound[In, Out]) Settling() bool              { return b.settling }

func (b *bound[In, Out]) SchemaErr() error { return b.def.schemaErr() }

// ValidateOutput checks content against the output schema.
func (b *bound[In, Out]) ValidateOutput(content json.RawMessage) error {
	_, err := b.def.output.Decode(content)
	return err
}

// OutputValidator is implemented by the tools Bind and BindSettling return:
// ValidateOutput checks an encoded output (such as an operator's
// reconciliation content, docs/semantics.md §10) against the tool's output
// schema,
// returning a *ValidationError naming the path and the reason.
type OutputValidator interface {
	ValidateOutput(content json.RawMessage) error
}

// ValidateOutput checks content against t's output schema when t has one
// (it implements OutputValidator, also under WithReplay or WithTimeout),
// returning a *ValidationError; it returns nil for a tool without an output
// codec, such as a delegation.
func ValidateOutput(t Tool, content json.RawMessage) error {
	if w, ok := t.(*wrapped); ok {
		t = w.Tool
	}
	if v, ok := t.(OutputValidator); ok {
		return v.ValidateOutput(content)
	}
	return nil
}

// outputSchemer is implemented by the tools Bind and BindSettling return.
type outputSchemer interface {
	outputSchema() json.RawMessage
}

func (b *bound[In, Out]) outputSchema() json.RawMessage { return b.def.output.Schema() }

// OutputSchema returns the JSON Schema of t's output (generated from its Go
// output type like the input schema, docs/protocol/30-tools.md), also under
// WithReplay or WithTimeout. It returns nil for a tool without an output
// codec, such as a delegation wrapped by another package, and for an output
// type without a schema. Clients use it to build a reconciliation form
// (package catalog serves it).
func OutputSchema(t Tool) json.RawMessage {
	if w, ok := t.(*wrapped); ok {
		t = w.Tool
	}
	if s, ok := t.(outputSchemer); ok {
		return s.outputSchema()
	}
	return nil
}

// schemaErr reports a missing input or output schema, and an input schema
// that is not an object: model providers take only objects as tool
// arguments.
func (d *Definition[In, Out]) schemaErr() error {
	var notObject error
	if d.input.Err() == nil && d.input.schema.Type != "object" {
		notObject = fmt.Errorf("the input type %s is not a struct or a map with string keys: tool arguments are a JSON object", reflect.TypeFor[In]())
	}
	return errors.Join(d.input.Err(), notObject, d.output.Err())
}

func (b *bound[In, Out]) Validate(args json.RawMessage) (Arguments, error) {
	in, norm, err := b.def.input.Normalize(args)
	if err != nil {
		return Arguments{}, err
	}
	return Arguments{JSON: norm, Decoded: policy.DecodedOf(in)}, nil
}

func (b *bound[In, Out]) Invoke(ctx context.Context, call Call, args json.RawMessage, settlement Settlement) (r Result) {
	defer func() {
		if p := recover(); p != nil {
			r = Result{Outcome: events.OutcomeUncertain, Evidence: fmt.Sprintf("the tool body panicked: %v\n%s", p, debug.Stack())}
		}
	}()
	in, err := b.def.input.decodeValidated(args)
	if err != nil {
		// Nothing has run: a definite failure, as invalid_arguments is.
		return FailureResult(Explain("invalid arguments: " + err.Error()))
	}
	settler := &Settler[Out]{settlement: settlement, output: b.def.output}
	out, err := b.handler(ctx, call, in, settler)
	if err != nil {
		if b.classify == nil {
			return Result{Outcome: events.OutcomeUncertain, Evidence: "the tool has no classify function; error: " + err.Error()}
		}
		return FailureResult(b.classifySafely(err))
	}
	content, err := b.def.output.Encode(out)
	if err != nil {
		return Result{Outcome: events.OutcomeUncertain, Evidence: "the body returned but its output could not be encoded: " + err.Error()}
	}
	return OutputResult(content)
}

func (b *bound[In, Out]) classifySafely(err error) (f Failure) {
	defer func() {
		if p := recover(); p != nil {
			f = Uncertain(fmt.Sprintf("classify panicked on %q: %v", err.Error(), p))
		}
	}()
	return b.classify(err)
}

// Input returns the typed input of action when it calls def: the policy's
// typed match on a tool. It returns matched false when the action calls
// another tool. It returns an error when the action names def's tool but its
// arguments do not decode with def's input codec: the definition the policy
// matches on is not the one the agent's tool was bound from. Pass that error
// on as the policy's error, which stops the run: an action the policy cannot
// read is never allowed by a fall-through.
//
// When the action carries the arguments already decoded into In
// (action.Decoded, set by the runtime that just validated them with a codec
// of In, which is the same codec as def's), that value is returned without
// decoding the JSON again.
func Input[In, Out any](def *Definition[In, Out], action policy.Action) (in In, matched bool, err error) {
	var zero In
	if action.Tool != def.name {
		return zero, false, nil
	}
	if v, ok := policy.DecodedAs[In](action.Decoded); ok {
		return v, true, nil
	}
	v, err := def.input.Decode(action.Arguments)
	if err != nil {
		return zero, true, fmt.Errorf("tool %q: arguments of action %s do not decode with this definition: %w", def.name, action.ActionID, err)
	}
	return v, true, nil
}

// Reconciliation returns the content a person records for an uncertain
// action of def: out encoded with def's output codec, exactly as the
// handler's result would have been.
func Reconciliation[In, Out any](def *Definition[In, Out], out Out) (json.RawMessage, error) {
	return def.output.Encode(out)
}

// FailedReconciliation returns the content a person records when an
// uncertain action of a tool definitely failed: {"error": message}, what the
// model sees for an Explain.
func FailedReconciliation(message string) json.RawMessage { return ErrorContent(message) }

// Unconfirmed returns the content a person records when they cannot yet say
// what happened: {"unconfirmed": note}. It tells the model the effect may or
// may not have happened and why, so that it reports the effect neither as
// done nor as failed. The action ends reconciled and the run goes on; the
// application tracks the open question from there.
func Unconfirmed(note string) json.RawMessage {
	b, err := json.Marshal(struct {
		Unconfirmed string `json:"unconfirmed"`
	}{note})
	if err != nil {
		panic(fmt.Sprintf("tools: unconfirmed content: %v", err))
	}
	return b
}

// ValidName reports whether name fits the model providers' shared grammar
// for tool names: 1 to 64 ASCII letters, digits, underscores or hyphens.
func ValidName(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
