package exporter_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/telemetry/exporter"
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
			shutdown, err := exporter.Setup(env(tc.env(srv.URL)))
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
		shutdown, err := exporter.Setup(env(map[string]string{"WEFT_OTEL": v}))
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
		if _, err := exporter.Setup(env(m)); err == nil {
			t.Errorf("Setup(%v) accepted", m)
		}
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, exporter.DefaultOTLPEndpoint},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://c:4318/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c/base/"}, "https://c/base/v1/traces"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://d:1/x"}, "http://d:1/x"},
	} {
		got, err := exporter.OTLPEndpoint(env(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("OTLPEndpoint(%v) = %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
}

// A collector that cannot be reached makes shutdown return an error
// within its context's deadline instead of holding the exit.
func TestSetupShutdownUnreachableCollector(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	shutdown, err := exporter.Setup(env(map[string]string{"WEFT_OTEL": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": url}))
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
