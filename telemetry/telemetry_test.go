package telemetry_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/telemetry"
)

// collector is a fake OTLP/HTTP collector speaking the real wire format:
// it decodes each protobuf ExportTraceServiceRequest it receives.
type collector struct {
	mu    sync.Mutex
	paths []string
	types []string
	spans []*tracepb.Span
	svc   []string
	errs  []string
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paths = append(c.paths, r.Method+" "+r.URL.Path)
	c.types = append(c.types, r.Header.Get("Content-Type"))
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(r.Body)
		if err != nil {
			c.errs = append(c.errs, err.Error())
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	b, err := io.ReadAll(body)
	if err == nil && len(b) == 0 {
		err = io.ErrUnexpectedEOF
	}
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		c.errs = append(c.errs, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				c.svc = append(c.svc, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) span(t *testing.T, name string) *tracepb.Span {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, s := range c.spans {
		if s.GetName() == name {
			return s
		}
		names = append(names, s.GetName())
	}
	t.Fatalf("no span %q among %v", name, names)
	return nil
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// emitAll produces one span of every kind the runtime records, the attempt
// span continued from headers as a worker would.
func emitAll(tel *telemetry.Telemetry) {
	ctx, run := tel.StartRun(context.Background(), "r1", "desk")
	tel.Emit(ctx, telemetry.RunStarted, "run", "r1")
	_, m := tel.StartModel(ctx, "r1", 1, "scripted:s")
	telemetry.EndModel(m, "tool_request", &model.Usage{InputTokens: 12, OutputTokens: 3}, "")
	_, p := tel.StartPolicy(ctx, "r1", "1/c1")
	p.End()
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tel.ApprovalWait(ctx, "r1", "1/c1", 1, "approved", since, since.Add(time.Minute))
	h := nats.Header{}
	tel.Inject(ctx, h)
	wctx := tel.Extract(context.Background(), h)
	_, a := tel.StartAttempt(wctx, "r1", "1/c1", "pay", 1)
	a.End()
	run.End()
}

// WEFT_OTEL=otlp posts real OTLP/HTTP protobuf export requests to the
// endpoint named by the standard variables; shutdown flushes the batch.
func TestSetupOTLPExportsSpans(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		env        func(base string) map[string]string
	}{
		{"base endpoint", "/otel/v1/traces", func(base string) map[string]string {
			return map[string]string{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": base + "/otel/", "OTEL_SERVICE_NAME": "weft-test"}
		}},
		{"traces endpoint wins", "/custom/traces", func(base string) map[string]string {
			return map[string]string{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": base + "/wrong", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": base + "/custom/traces", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SERVICE_NAME": "weft-test"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &collector{}
			srv := httptest.NewServer(c)
			defer srv.Close()
			shutdown, err := telemetry.Setup(env(tc.env(srv.URL)))
			if err != nil {
				t.Fatal(err)
			}
			emitAll(telemetry.New())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			if len(c.errs) > 0 || len(c.paths) == 0 {
				t.Fatalf("collector: requests %v, errors %v", c.paths, c.errs)
			}
			for i, p := range c.paths {
				if p != "POST "+tc.path || c.types[i] != "application/x-protobuf" {
					t.Errorf("request %d: %s %s, want POST %s application/x-protobuf", i, p, c.types[i], tc.path)
				}
			}
			if !slices.Contains(c.svc, "weft-test") {
				t.Errorf("service names %v, want weft-test", c.svc)
			}
			c.mu.Unlock()

			run := c.span(t, "weft.run")
			if !slices.ContainsFunc(run.GetEvents(), func(e *tracepb.Span_Event) bool { return e.GetName() == "run_started" }) {
				t.Errorf("weft.run span has no run_started event: %v", run.GetEvents())
			}
			chat := c.span(t, "chat scripted:s")
			if got := attrs(chat); got["gen_ai.request.model"] != "scripted:s" || got["gen_ai.operation.name"] != "chat" || got["gen_ai.usage.input_tokens"] != "12" {
				t.Errorf("model span attributes %v", got)
			}
			if chat.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("model span kind %v, want client", chat.GetKind())
			}
			c.span(t, "weft.policy")
			c.span(t, "weft.approval_wait")
			att := c.span(t, "execute_tool pay")
			if !bytes.Equal(att.GetParentSpanId(), run.GetSpanId()) || !bytes.Equal(att.GetTraceId(), run.GetTraceId()) {
				t.Errorf("attempt span parent %s trace %s, want run span %s trace %s",
					hex.EncodeToString(att.GetParentSpanId()), hex.EncodeToString(att.GetTraceId()),
					hex.EncodeToString(run.GetSpanId()), hex.EncodeToString(run.GetTraceId()))
			}
		})
	}
}

func attrs(s *tracepb.Span) map[string]string {
	m := map[string]string{}
	for _, kv := range s.GetAttributes() {
		v := kv.GetValue()
		switch {
		case v.GetStringValue() != "":
			m[kv.GetKey()] = v.GetStringValue()
		case v.GetArrayValue() != nil:
			m[kv.GetKey()] = "array"
		default:
			m[kv.GetKey()] = strings.TrimSpace(strings.TrimPrefix(v.String(), "int_value:"))
		}
	}
	return m
}

// Setup installs nothing by default and refuses what it cannot honour, so
// that a typo never silently disables tracing.
func TestSetupChoices(t *testing.T) {
	for _, v := range []string{"", "none"} {
		shutdown, err := telemetry.Setup(env(map[string]string{"WEFT_OTEL": v}))
		if err != nil || shutdown == nil {
			t.Fatalf("WEFT_OTEL=%q: %v", v, err)
		}
		if err := shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []map[string]string{
		{"WEFT_OTEL": "otpl"},
		{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4318"},
		{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "grpc://collector:4317"},
		{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
		{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
	} {
		if _, err := telemetry.Setup(env(m)); err == nil {
			t.Errorf("Setup(%v) accepted", m)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, telemetry.DefaultOTLPEndpoint},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/base/"}, "https://c/base/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://d:1/x"}, "http://d:1/x"},
	} {
		got, err := telemetry.OTLPEndpoint(env(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("OTLPEndpoint(%v) = %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

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

// A collector that cannot be reached makes shutdown return an error
// within its context's deadline instead of holding the exit.
func TestSetupShutdownUnreachableCollector(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	shutdown, err := telemetry.Setup(env(map[string]string{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": url}))
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.New().StartRun(context.Background(), "r1", "desk")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := shutdown(ctx); err == nil {
		t.Fatal("shutdown reported no error although the span could not be exported")
	}
}
