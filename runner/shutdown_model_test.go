package runner_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// heldModel holds its first call until the call's context ends, then
// answers every later call.
type heldModel struct {
	started  chan struct{} // closed when the first call began
	returned chan struct{} // closed when the first call returned
	once     sync.Once
	mu       sync.Mutex
	calls    int
}

func (m *heldModel) Name() string { return "held" }

func (m *heldModel) Complete(ctx context.Context, _ model.Request) (model.Reply, error) {
	m.mu.Lock()
	m.calls++
	first := m.calls == 1
	m.mu.Unlock()
	if !first {
		return model.Reply{Kind: model.ReplyFinalAnswer, Turn: model.Message{Role: model.RoleAssistant, Text: "done"}}, nil
	}
	m.once.Do(func() { close(m.started) })
	defer close(m.returned)
	<-ctx.Done()
	return model.Reply{}, ctx.Err()
}

// docs/semantics.md §8 "pending work is retried, never dropped", and STYLE.md
// principle 9: a model call in flight when its runner
// stops is bounded by the runner's lifetime — it has returned once Run
// returned — and, cut short by the shutdown, it is not recorded as a
// model failure: the turn stays requested in the log and the next driver
// calls the model again.
func TestShutdownCutsAModelCallShort_TheNextDriverCallsAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	m := &heldModel{started: make(chan struct{}), returned: make(chan struct{})}
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove))
	_, stop := h.startRunner([]*agent.Agent{a}, runner.WithDrainWindow(300*time.Millisecond))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "held", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the model was never called")
	}
	stop()
	select {
	case <-m.returned:
	default:
		t.Fatal("Run returned with its model call still running")
	}
	for _, ev := range h.eventsOf("held") {
		if f, ok := ev.(events.ModelFailed); ok {
			t.Fatalf("the call cut short by the shutdown was recorded as a model failure: %+v", f)
		}
	}
	h.startRunner([]*agent.Agent{a})
	h.waitStatus("held", aggregate.StatusFinished)
	if got := h.eventsOf("held"); len(got) == 0 {
		t.Fatal("no events")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls != 2 {
		t.Errorf("the model was called %d times, want 2 (the cut call derived again)", m.calls)
	}
}

// runnerFrames returns the stacks of the goroutines running code of
// package runner (not its tests: a parallel test of package runner's own
// test files waiting for its turn in testing.(*T).Parallel runs none).
func runnerFrames() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/weftrun/weft/runner.") && !strings.Contains(g, "testing.(*T).Parallel(") {
			out = append(out, g)
		}
	}
	return out
}

// STYLE.md principle 9 and docs/semantics.md §8: nothing of a
// runner outlives Run — its background work (a delegation's tending, a
// model call, snapshot puts, durable timer schedules) is one group that
// Run stops and waits for — and what the stop cut short is done by the
// next driver: the child run's model call is made again and both runs
// complete.
func TestNothingOfTheRunnerOutlivesRun_TheNextDriverFinishesTheWork(t *testing.T) {
	// Not parallel: runnerFrames reads every goroutine of the process.
	h := newHarness(t)
	m := &heldModel{started: make(chan struct{}), returned: make(chan struct{})}
	child, err := agent.New("researcher", m, []tools.Tool{(&bodies{}).tool()}, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	parent := build(t, model.NewScripted("desk",
		model.CallTools(model.Call("researcher", `{"input":"check invoice 7"}`)),
		echoResults,
	), []tools.Tool{agent.Delegate(child, "Looks facts up.")}, policy.AlwaysAllow())
	_, stop := h.startRunner([]*agent.Agent{parent}, runner.WithDrainWindow(300*time.Millisecond))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "outlive", Agent: "desk", Input: "is invoice 7 paid?"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.started:
	case <-time.After(20 * time.Second):
		t.Fatal("the child's model was never called")
	}
	stop()
	if left := runnerFrames(); len(left) > 0 {
		t.Fatalf("%d goroutines of the runner outlived Run:\n%s", len(left), strings.Join(left, "\n\n"))
	}
	h.startRunner([]*agent.Agent{parent})
	s := h.waitStatus("outlive", aggregate.StatusFinished)
	if o, _ := s.Finished(); o.Kind != events.OutcomeCompleted {
		t.Fatalf("the parent ended %+v, want completed", o)
	}
}
