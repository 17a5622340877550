package runner_test

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

// The runner emits spans for the run, each model call (GenAI attributes),
// each policy evaluation and each tool attempt, and the §11 names.
func TestTelemetrySpans(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	tel := &events_{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a}, runner.WithTelemetry(telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithHandler(tel.handler))))
	if _, err := h.client.Start(context.Background(), api.StartRequest{Run: "tel", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	finished(t, h, "tel")
	// The runner emits run_finished and ends the run's span after the
	// append the test saw: wait for them rather than race them (it failed
	// "telemetry run_finished not emitted" under load).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		_, emitted := tel.find(telemetry.RunFinished)
		ended := false
		for _, s := range exp.GetSpans() {
			ended = ended || s.Name == "weft.run"
		}
		if emitted && ended {
			break
		}
	}
	names := map[string]bool{}
	for _, s := range exp.GetSpans() {
		names[s.Name] = true
		if s.Name == "chat scripted:s" {
			found := false
			for _, kv := range s.Attributes {
				if kv.Key == "gen_ai.request.model" && kv.Value.AsString() == "scripted:s" {
					found = true
				}
			}
			if !found {
				t.Errorf("model span without gen_ai.request.model: %v", s.Attributes)
			}
		}
	}
	for _, want := range []string{"weft.run", "chat scripted:s", "weft.policy", "publish weft.task.desk.1.pay", "execute_tool pay"} {
		if !names[want] {
			t.Errorf("no span %q among %v", want, names)
		}
	}
	// The task carries the dispatch span as traceparent: the worker's
	// attempt span is its child.
	var pub, exec sdktrace.ReadOnlySpan
	for _, s := range exp.GetSpans().Snapshots() {
		switch s.Name() {
		case "publish weft.task.desk.1.pay":
			pub = s
		case "execute_tool pay":
			exec = s
		}
	}
	if pub == nil || exec == nil || exec.Parent().SpanID() != pub.SpanContext().SpanID() {
		t.Errorf("the attempt span is not a child of the dispatch span")
	}
	for _, n := range []telemetry.Name{telemetry.RunStarted, telemetry.ModelTurn, telemetry.ToolDispatched, telemetry.ToolSettled, telemetry.RunFinished} {
		if _, ok := tel.find(n); !ok {
			t.Errorf("telemetry %s not emitted", n)
		}
	}
}
