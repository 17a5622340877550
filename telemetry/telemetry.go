// Package telemetry is Weft's observation side: OpenTelemetry spans for
// runs, turns, model calls (GenAI semantic-convention attributes), policy
// evaluations, approval waits and tool attempts; the docs/semantics.md §11
// telemetry names as span events, log records and Handler calls; and trace
// propagation to workers through NATS message headers.
//
// Telemetry is observation, never authority: it is emitted after the
// commit it describes and may be missing after a crash. Metadata carries
// ids and closed enums only — never arguments, results or model text.
// Nothing here is required to run: without exporter.Setup (package
// telemetry/exporter), spans go to the global (no-op by default) tracer
// provider.
//
// # Spans
//
//   - "weft.run" (weft.run, gen_ai.agent.name): a run's start command.
//   - "chat <model>" (client; gen_ai.operation.name=chat,
//     gen_ai.request.model, weft.run, weft.turn; at its end
//     gen_ai.response.finish_reasons, gen_ai.usage.input_tokens,
//     gen_ai.usage.output_tokens or error.type): one model call, one turn.
//   - "weft.policy" (weft.run, weft.action): one policy evaluation.
//   - "weft.approval_wait" (weft.run, weft.action, weft.revision,
//     weft.answer): from approval_requested to its answer.
//   - "publish weft.task.<agent>.<version>.<tool>" (producer; messaging.system=nats,
//     messaging.operation.name=publish, messaging.destination.name,
//     gen_ai.tool.name, weft.run, weft.action, weft.attempt): the runner's
//     dispatch of a fenced attempt (StartDispatch).
//   - "execute_tool <tool>" (gen_ai.operation.name=execute_tool,
//     gen_ai.tool.name, weft.run, weft.action, weft.attempt): one tool
//     attempt in a worker, a child of the dispatching span through the
//     traceparent header that Inject writes on the task message and
//     Extract reads.
//
// Every span of a run belongs to the run's one trace, whose ids are derived
// from the run id (RunContext), on every runner and worker and across
// restarts, unless the caller's ctx already carries a span.
//
// The §11 names are events on the current span with "weft.<key>"
// attributes, debug log records and Handler calls (Emit).
//
// # Exporting
//
// Package telemetry/exporter installs an exporter (stdout or OTLP/HTTP)
// from environment variables; it is a separate package so that a program
// that embeds the runner without exporting spans does not link, nor
// require, the OTLP exporter and its gRPC dependencies.
package telemetry

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/model"
)

// Name is a docs/semantics.md §11 telemetry name.
type Name string

// The telemetry names of docs/semantics.md §11.
const (
	// RunStarted is emitted when a run was created.
	RunStarted Name = "run_started"
	// RunRecovered is emitted when a runner recovered a run nobody drove.
	RunRecovered Name = "run_recovered"
	// RunHandedOff is emitted when a draining runner handed a run off.
	RunHandedOff Name = "run_handed_off"
	// RunTakenOver is emitted when this runner took over a run whose driver was gone.
	RunTakenOver Name = "run_taken_over"
	// LeaseLost is emitted when this runner found another runner driving a run it held.
	LeaseLost Name = "lease_lost"
	// ModelTurn is emitted when a model turn ended (result: tool_request, final_answer, …).
	ModelTurn Name = "model_turn"
	// ApprovalRequested is emitted when an action waits for approval.
	ApprovalRequested Name = "approval_requested"
	// ApprovalAnswered is emitted when an approval request got its answer (approved, rejected, expired).
	ApprovalAnswered Name = "approval_answered"
	// ToolDispatched is emitted when a fenced attempt was published to workers.
	ToolDispatched Name = "tool_dispatched"
	// ToolSettled is emitted when an attempt ended (model_visible, effect_uncertain, host_failure, withdrawn).
	ToolSettled Name = "tool_settled"
	// ChildStarted is emitted when a sub-agent delegation started its child
	// run (the parent's committed child_started event): run, action, child
	// (the child run id) and depth.
	ChildStarted Name = "child_started"
	// ChildSettled is emitted when a delegation got its child's outcome (the
	// parent's committed child_settled event): run, action, child and
	// result (the child's outcome kind, or detached when the parent
	// finished first).
	ChildSettled Name = "child_settled"
	// SettlementRefused is emitted when a settlement was refused not_awaited; carries its summary.
	SettlementRefused Name = "settlement_refused"
	// RunCancelled is emitted when a run was cancelled.
	RunCancelled Name = "run_cancelled"
	// RunFinished is emitted when a run reached its outcome.
	RunFinished Name = "run_finished"
	// Drain is emitted when a runner began draining.
	Drain Name = "drain"
)

// Event is one emitted telemetry record: a name and its metadata as
// key/value pairs (ids and closed enums only).
type Event struct {
	Name  Name
	Attrs []attribute.KeyValue
}

// Handler receives every emitted Event, synchronously; keep it fast.
type Handler func(ctx context.Context, e Event)

// Telemetry emits spans, names and logs.
type Telemetry struct {
	tracer   trace.Tracer
	log      *slog.Logger
	handlers []Handler
	prop     propagation.TextMapPropagator
}

// Option configures a Telemetry.
type Option func(*Telemetry)

// WithLogger logs every name at debug level.
func WithLogger(l *slog.Logger) Option { return func(t *Telemetry) { t.log = l } }

// WithHandler adds a handler called for every name.
func WithHandler(h Handler) Option { return func(t *Telemetry) { t.handlers = append(t.handlers, h) } }

// WithTracerProvider sets the tracer provider (default: otel's global).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(t *Telemetry) { t.tracer = tp.Tracer("github.com/weftrun/weft") }
}

// New returns a Telemetry.
func New(opts ...Option) *Telemetry {
	t := &Telemetry{prop: propagation.TraceContext{}}
	for _, o := range opts {
		o(t)
	}
	if t.tracer == nil {
		t.tracer = otel.GetTracerProvider().Tracer("github.com/weftrun/weft")
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	return t
}

// Emit records name with its metadata (alternating keys and values): as an
// event on the span in ctx, a debug log record and a Handler call.
func (t *Telemetry) Emit(ctx context.Context, name Name, kv ...string) {
	attrs := make([]attribute.KeyValue, 0, len(kv)/2)
	largs := make([]any, 0, len(kv))
	for i := 0; i+1 < len(kv); i += 2 {
		attrs = append(attrs, attribute.String("weft."+kv[i], kv[i+1]))
		largs = append(largs, kv[i], kv[i+1])
	}
	trace.SpanFromContext(ctx).AddEvent(string(name), trace.WithAttributes(attrs...))
	t.log.Debug(string(name), largs...)
	for _, h := range t.handlers {
		h(ctx, Event{Name: name, Attrs: attrs})
	}
}

// StartRun starts the span of a run's start (in the run's trace, see
// RunContext, unless ctx carries a span).
func (t *Telemetry) StartRun(ctx context.Context, run, agentName string) (context.Context, trace.Span) {
	return t.tracer.Start(RunContext(ctx, run), "weft.run", trace.WithAttributes(attribute.String("weft.run", run), attribute.String("gen_ai.agent.name", agentName)))
}

// RunContext returns ctx carrying the run's own trace context: a sampled,
// remote parent whose trace id and span id are derived from the run id
// alone (the SHA-256 of "weft.run/" + run). A run lives longer than any
// span and moves between runners; a span started from RunContext — the
// run's start, a model call, a policy evaluation, a dispatch whose task
// carries it to a worker (Inject) — joins the run's one trace on every
// runner, after restarts too, with nothing stored. StartRun, StartModel,
// StartPolicy, ApprovalWait and StartAttempt apply it themselves; call it
// where a run's work without a span of its own reaches another process, as
// in Inject(RunContext(ctx, run), h) before publishing a task. A ctx that
// already carries a valid span is returned unchanged.
func RunContext(ctx context.Context, run string) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	sum := sha256.Sum256([]byte("weft.run/" + run))
	var tid trace.TraceID
	var sid trace.SpanID
	copy(tid[:], sum[:16])
	copy(sid[:], sum[16:24])
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
}

// StartModel starts the span of one model call (a turn), with the GenAI
// semantic-convention attributes.
func (t *Telemetry) StartModel(ctx context.Context, run string, turn int64, modelName string) (context.Context, trace.Span) {
	return t.tracer.Start(RunContext(ctx, run), "chat "+modelName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.request.model", modelName),
		attribute.String("weft.run", run),
		attribute.Int64("weft.turn", turn),
	))
}

// EndModel ends a model span with its result: the reply kind and usage, or
// the failure kind.
func EndModel(span trace.Span, kind string, usage *model.Usage, failure string) {
	if kind != "" {
		span.SetAttributes(attribute.StringSlice("gen_ai.response.finish_reasons", []string{kind}))
	}
	if usage != nil {
		span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", usage.InputTokens), attribute.Int64("gen_ai.usage.output_tokens", usage.OutputTokens))
	}
	if failure != "" {
		span.SetAttributes(attribute.String("error.type", failure))
	}
	span.End()
}

// StartPolicy starts the span of one policy evaluation.
func (t *Telemetry) StartPolicy(ctx context.Context, run, action string) (context.Context, trace.Span) {
	return t.tracer.Start(RunContext(ctx, run), "weft.policy", trace.WithAttributes(attribute.String("weft.run", run), attribute.String("weft.action", action)))
}

// ApprovalWait records the span of an approval wait that started at
// since and ended now with answer (approved, rejected, expired).
func (t *Telemetry) ApprovalWait(ctx context.Context, run, action string, revision int, answer string, since, now time.Time) {
	_, span := t.tracer.Start(RunContext(ctx, run), "weft.approval_wait", trace.WithTimestamp(since), trace.WithAttributes(
		attribute.String("weft.run", run), attribute.String("weft.action", action),
		attribute.Int("weft.revision", revision), attribute.String("weft.answer", answer)))
	span.End(trace.WithTimestamp(now))
}

// StartDispatch starts the producer span of publishing a fenced attempt
// as a task on subject (weft.task.<agent>.<version>.<tool>). Inject the returned context into
// the task's headers before publishing and end the span after: the
// worker's attempt span becomes its child.
func (t *Telemetry) StartDispatch(ctx context.Context, run, action, tool string, attempt int, subject string) (context.Context, trace.Span) {
	return t.tracer.Start(RunContext(ctx, run), "publish "+subject, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.destination.name", subject),
		attribute.String("gen_ai.tool.name", tool),
		attribute.String("weft.run", run), attribute.String("weft.action", action), attribute.Int("weft.attempt", attempt)))
}

// StartAttempt starts the span of a tool attempt (in the worker).
func (t *Telemetry) StartAttempt(ctx context.Context, run, action, tool string, attempt int) (context.Context, trace.Span) {
	return t.tracer.Start(RunContext(ctx, run), "execute_tool "+tool, trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", tool),
		attribute.String("weft.run", run), attribute.String("weft.action", action), attribute.Int("weft.attempt", attempt)))
}

// Inject writes the trace context of ctx into NATS message headers, so
// that a worker's attempt span joins the run's trace. The header is the
// W3C "traceparent" (and "tracestate" when set), spelled in lower case as
// the W3C specifies: NATS header names are case-sensitive, and a non-Go
// worker reads exactly that name. Nothing is written when ctx carries no
// valid span.
func (t *Telemetry) Inject(ctx context.Context, h nats.Header) {
	t.prop.Inject(ctx, headerCarrier(h))
}

// Extract returns ctx with the trace context found in NATS headers (the
// lower-case W3C names, or their canonical MIME spelling "Traceparent" as
// Go's http.Header writes them).
func (t *Telemetry) Extract(ctx context.Context, h nats.Header) context.Context {
	return t.prop.Extract(ctx, headerCarrier(h))
}

// headerCarrier adapts NATS headers to a propagation.TextMapCarrier
// without http.Header's canonicalisation of names.
type headerCarrier nats.Header

// Get returns the value of key, tried as given and then in canonical MIME
// form.
func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	if v := c[http.CanonicalHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key, spelled exactly as given.
func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys returns the header names, sorted.
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
