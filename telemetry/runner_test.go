package telemetry_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

type echoIn struct {
	N int64 `json:"n"`
}

type echoOut struct {
	N int64 `json:"n"`
}

// A real run on a real runner (scripted model, one tool call, in-process
// worker over NATS): the run's start, its model calls, the policy and the
// worker's tool attempt all land in the run's one trace, and the §11
// metadata carries ids and closed enums only — never the tool's
// arguments, its result or the model's text.
func TestRunnerSpansShareTheRunTrace(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(runner.Assets(2*time.Second)...))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := runner.Provision(ctx, srv.JS, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-argument"
	echo := tools.Bind(tools.Define[echoIn, echoOut]("echo", "Echo a number."), func(_ context.Context, _ tools.Call, in echoIn) (echoOut, error) {
		return echoOut(in), nil
	}, nil)
	m := model.NewScripted("s", model.CallTools(model.Call("echo", `{"n":4242}`)), model.Answer("the answer is "+secret))
	ag, err := agent.New("desk", m, []tools.Tool{echo}, policy.Func(func(context.Context, policy.Action) (policy.Decision, error) { return policy.Allow(), nil }),
		agent.WithApprovers(approvers.Trusting("desk"))).Build()
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	done := make(chan struct{})
	var mu sync.Mutex
	var emitted []telemetry.Event
	tel := telemetry.New(telemetry.WithTracerProvider(tp), telemetry.WithHandler(func(_ context.Context, e telemetry.Event) {
		mu.Lock()
		defer mu.Unlock()
		emitted = append(emitted, e)
		if e.Name == telemetry.RunFinished {
			close(done)
		}
	}))
	r, err := runner.New(srv.Connect(), srv.JS, []*agent.Agent{ag}, runner.WithLease(2*time.Second), runner.WithTelemetry(tel))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Run(rctx) }()
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			stop()
			if err := <-stopped; err != nil {
				t.Errorf("runner: %v", err)
			}
		})
	}
	defer shutdown()
	client := api.NewClient(srv.Conn)
	for {
		_, err := client.Start(ctx, api.StartRequest{Run: "t1", Agent: "desk", Input: "pay " + secret})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("start: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("run_finished never emitted")
	}
	shutdown()
	mu.Lock()
	defer mu.Unlock()

	want := trace.SpanContextFromContext(telemetry.RunContext(context.Background(), "t1")).TraceID()
	names := map[string]bool{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() != want {
			t.Errorf("span %s in trace %v, want the run's trace %v", s.Name, s.SpanContext.TraceID(), want)
		}
		names[s.Name] = true
		for _, kv := range s.Attributes {
			if v := kv.Value.String(); strings.Contains(v, secret) || strings.Contains(v, "4242") {
				t.Errorf("span %s attribute %s carries content: %q", s.Name, kv.Key, v)
			}
		}
		for _, ev := range s.Events {
			for _, kv := range ev.Attributes {
				if v := kv.Value.String(); strings.Contains(v, secret) || strings.Contains(v, "4242") {
					t.Errorf("event %s attribute %s carries content: %q", ev.Name, kv.Key, v)
				}
			}
		}
	}
	for _, n := range []string{"weft.run", "chat scripted:s", "weft.policy", "execute_tool echo"} {
		if !names[n] {
			t.Errorf("no span %q among %v", n, names)
		}
	}
	for _, e := range emitted {
		for _, kv := range e.Attrs {
			if v := kv.Value.String(); strings.Contains(v, secret) || strings.Contains(v, "4242") {
				t.Errorf("%s attribute %s carries content: %q", e.Name, kv.Key, v)
			}
		}
	}
}
