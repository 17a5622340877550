package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/telemetry"
)

// The trace context crosses a real NATS message's headers: the worker's
// attempt span is a child of the span that published the task, in the same
// trace; a task without the header still joins the run's trace, under its
// derived root (RunContext) rather than the publisher's span. The header
// is spelled "traceparent" as the W3C says, since NATS header names are
// case-sensitive and a non-Go worker reads exactly that name.
func TestTraceContextCrossesNATSHeaders(t *testing.T) {
	s := natstest.Start(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tel := telemetry.New(telemetry.WithTracerProvider(tp))

	sub, err := s.Conn.SubscribeSync("weft.task.pay")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	ctx, run := tel.StartRun(context.Background(), "r1", "desk")
	withHeader := nats.NewMsg("weft.task.pay")
	withHeader.Data = []byte(`{}`)
	tel.Inject(ctx, withHeader.Header)
	bare := nats.NewMsg("weft.task.pay")
	bare.Data = []byte(`{}`)
	for _, m := range []*nats.Msg{withHeader, bare} {
		if err := s.Conn.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	run.End()

	var spans []trace.SpanContext
	var parents []trace.SpanContext
	for i := range 2 {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && len(m.Header["traceparent"]) != 1 {
			t.Fatalf("no lower-case W3C traceparent header on the received task: %v", m.Header)
		}
		wctx := tel.Extract(context.Background(), m.Header)
		_, a := tel.StartAttempt(wctx, "r1", "1/c1", "pay", i+1)
		a.End()
	}
	for _, sp := range exp.GetSpans() {
		if sp.Name == "execute_tool pay" {
			spans = append(spans, sp.SpanContext)
			parents = append(parents, sp.Parent)
		}
	}
	if len(spans) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(spans))
	}
	rc := run.SpanContext()
	if parents[0].SpanID() != rc.SpanID() || spans[0].TraceID() != rc.TraceID() || !parents[0].IsRemote() {
		t.Errorf("attempt parent %v (remote %v) trace %v; want run span %v trace %v", parents[0].SpanID(), parents[0].IsRemote(), spans[0].TraceID(), rc.SpanID(), rc.TraceID())
	}
	canon := tel.Extract(context.Background(), nats.Header{"Traceparent": withHeader.Header["traceparent"]})
	if sc := trace.SpanContextFromContext(canon); sc.SpanID() != rc.SpanID() {
		t.Errorf("Extract of the canonical Traceparent spelling: span %v, want %v", sc.SpanID(), rc.SpanID())
	}
	root := trace.SpanContextFromContext(telemetry.RunContext(context.Background(), "r1"))
	if parents[1].SpanID() != root.SpanID() || spans[1].TraceID() != root.TraceID() {
		t.Errorf("attempt from a task without traceparent: parent %v trace %v; want the run's derived root %v trace %v", parents[1].SpanID(), spans[1].TraceID(), root.SpanID(), root.TraceID())
	}
}

// Emit records a §11 name as a span event, a debug log record and a
// Handler call, with its metadata as weft.* attributes.
func TestEmit(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	var logs bytes.Buffer
	var got []telemetry.Event
	tel := telemetry.New(telemetry.WithTracerProvider(tp),
		telemetry.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		telemetry.WithHandler(func(_ context.Context, e telemetry.Event) { got = append(got, e) }))
	ctx, span := tel.StartRun(context.Background(), "r1", "desk")
	tel.Emit(ctx, telemetry.ToolSettled, "run", "r1", "action", "1/c1", "result", "effect_uncertain")
	span.End()

	if len(got) != 1 || got[0].Name != telemetry.ToolSettled || len(got[0].Attrs) != 3 || got[0].Attrs[2].Key != "weft.result" || got[0].Attrs[2].Value.AsString() != "effect_uncertain" {
		t.Errorf("handler got %v", got)
	}
	if l := logs.String(); !strings.Contains(l, "msg=tool_settled") || !strings.Contains(l, "result=effect_uncertain") || !strings.Contains(l, "level=DEBUG") {
		t.Errorf("log %q", l)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || len(spans[0].Events) != 1 || spans[0].Events[0].Name != "tool_settled" || len(spans[0].Events[0].Attributes) != 3 {
		t.Fatalf("spans %v", spans)
	}
}

// RunContext gives every span of a run, started anywhere without a span of
// its own, the run's one trace, derived from the run id alone; a span in
// ctx wins.
func TestRunContext(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tel := telemetry.New(telemetry.WithTracerProvider(tp))
	a1 := trace.SpanContextFromContext(telemetry.RunContext(context.Background(), "r1"))
	a2 := trace.SpanContextFromContext(telemetry.RunContext(context.Background(), "r1"))
	b := trace.SpanContextFromContext(telemetry.RunContext(context.Background(), "r2"))
	if !a1.IsValid() || !a1.IsSampled() || !a1.Equal(a2) || a1.TraceID() == b.TraceID() {
		t.Fatalf("r1 %v / %v, r2 %v", a1, a2, b)
	}
	// A model call in its own goroutine (Start* apply RunContext) and a
	// dispatch on another runner both land in r1's trace; the worker's
	// attempt is the dispatch's child.
	_, m := tel.StartModel(context.Background(), "r1", 1, "scripted:s")
	m.End()
	h := nats.Header{}
	tel.Inject(telemetry.RunContext(context.Background(), "r1"), h)
	_, att := tel.StartAttempt(tel.Extract(context.Background(), h), "r1", "1/c1", "pay", 1)
	att.End()
	for _, sp := range exp.GetSpans() {
		if sp.SpanContext.TraceID() != a1.TraceID() || sp.Parent.SpanID() != a1.SpanID() {
			t.Errorf("span %s in trace %v parent %v; want trace %v parent %v", sp.Name, sp.SpanContext.TraceID(), sp.Parent.SpanID(), a1.TraceID(), a1.SpanID())
		}
	}
	ctx, own := tel.StartRun(context.Background(), "r1", "desk")
	if got := trace.SpanContextFromContext(telemetry.RunContext(ctx, "r1")); !got.Equal(own.SpanContext()) {
		t.Errorf("RunContext replaced the span in ctx: %v, want %v", got, own.SpanContext())
	}
	own.End()
}

// The dispatch span is the producer of a task: injected into the task's
// headers, it becomes the parent of the worker's attempt span, in the
// run's trace.
func TestDispatchSpanParentsTheAttempt(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tel := telemetry.New(telemetry.WithTracerProvider(tp))
	dctx, d := tel.StartDispatch(context.Background(), "r1", "1/c1", "pay", 2, "weft.task.pay")
	h := nats.Header{}
	tel.Inject(dctx, h)
	d.End()
	_, a := tel.StartAttempt(tel.Extract(context.Background(), h), "r1", "1/c1", "pay", 2)
	a.End()
	spans := exp.GetSpans()
	if len(spans) != 2 || spans[0].Name != "publish weft.task.pay" || spans[0].SpanKind != trace.SpanKindProducer {
		t.Fatalf("spans %v", spans)
	}
	root := trace.SpanContextFromContext(telemetry.RunContext(context.Background(), "r1"))
	if spans[0].SpanContext.TraceID() != root.TraceID() || spans[1].Parent.SpanID() != spans[0].SpanContext.SpanID() {
		t.Errorf("dispatch trace %v (want %v); attempt parent %v (want %v)", spans[0].SpanContext.TraceID(), root.TraceID(), spans[1].Parent.SpanID(), spans[0].SpanContext.SpanID())
	}
}
