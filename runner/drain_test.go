package runner_test

import (
	"context"
	"fmt"
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
	"github.com/weftrun/weft/worker"
)

// Scenario 33 with work queued behind the running body (docs/semantics.md §8,
// graceful drain: "running bodies ... may finish within the drain window
// and are committed; then the run is handed off with nothing uncertain").
// Two calls under max concurrency 1: SIGTERM comes while the first body
// runs. The draining runner must not start the second one (it would be cut
// off at the end of the window and end uncertain): it records the first
// body's result, hands the run off, and the next runner runs the second.
// Each body starts exactly once and the run completes.
func TestScenario33_DrainStartsNothingNew(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := map[int64]int{}
	gate1 := make(chan struct{})
	tool := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		mu.Lock()
		starts[in.Amount]++
		mu.Unlock()
		if in.Amount == 1 {
			<-gate1
		}
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	started := func(amount int64) int {
		mu.Lock()
		defer mu.Unlock()
		return starts[amount]
	}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(1, "ok"), payCall(2, "ok"))})
	mk := func() *agent.Agent {
		return build(t, m, []tools.Tool{tool}, policy.Func(allow), agent.WithMaxConcurrency(1))
	}
	h := newHarness(t)
	_, stopA := h.startRunner([]*agent.Agent{mk()}, runner.WithDrainWindow(3*time.Second))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r33q", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("r33q", "the first body running", func(aggregate.State) bool { return started(1) == 1 })

	stopped := make(chan struct{})
	go func() { defer close(stopped); stopA() }() // SIGTERM
	h.waitFor("r33q", "the hand-off", aggregate.State.HandedOff)
	close(gate1) // the first body finishes within the drain window
	receive(t, "runner A's drain ended (its stop returned)", stopped)

	h.startRunner([]*agent.Agent{mk()})
	s, out := finished(t, h, "r33q")
	for _, a := range s.Actions() {
		if a.State != aggregate.ActionSucceeded {
			t.Errorf("action %s %s %q", a.ID, a.State, a.Detail)
		}
	}
	if out.Kind != events.OutcomeCompleted || started(1) != 1 || started(2) != 1 {
		t.Fatalf("outcome %s, starts %d and %d", out.Kind, started(1), started(2))
	}
}

// Scenario 33 with a task that no worker had taken at SIGTERM: while the
// draining runner still lives it records the work in flight, so a worker
// that takes the task during the drain runs it (the run handed off, its
// runner alive) and its report, sent to the other runner's API, is
// forwarded to the draining driver. The action succeeds, nothing is
// uncertain, the body starts once.
func TestScenario33_TaskTakenDuringTheDrain(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(1, "ok"))})
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(allow)) }
	h := newHarness(t)
	ida, idb := keeping("r33t") // the run stays A's when B joins
	_, stopA := h.startRunner([]*agent.Agent{mk()}, runner.WithExternalTools("pay"), runner.WithDrainWindow(10*time.Second), runner.WithID(ida))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r33t", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("r33t", "a fenced attempt", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	h.startRunner([]*agent.Agent{mk()}, runner.WithExternalTools("pay"), runner.WithID(idb))

	stopped := make(chan struct{})
	go func() { defer close(stopped); stopA() }() // SIGTERM
	h.waitFor("r33t", "the hand-off", aggregate.State.HandedOff)
	w := worker.New(h.srv.Connect(), h.srv.JS)
	w.Handle(deskQueue("pay"), runner.ToolHandler(b.tool(), nil))
	wctx, stopW := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { stopW(); <-wdone })
	receive(t, "runner A's drain ended (its stop returned)", stopped)

	s, out := finished(t, h, "r33t")
	if a := s.Actions()[0]; out.Kind != events.OutcomeCompleted || a.State != aggregate.ActionSucceeded || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, action %s %q, starts %d", out.Kind, a.State, a.Detail, b.starts.Load())
	}
}

// Scenario 33, another runner's task queued during the drain (docs/semantics.md
// §8,
// graceful drain: "running bodies ... may finish within the drain window
// and are committed; then the run is handed off with nothing uncertain").
// Runner A drains while its own body runs; a task of runner B's run is
// queued meanwhile. A's in-process worker must take no new task once the
// drain started (a body started then would be cut off at the end of the
// window): the task stays queued, a worker that comes later runs it once,
// and both runs complete with nothing uncertain.
func TestScenario33_DrainingWorkerTakesNoNewTask(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := map[int64]int{}
	gate1 := make(chan struct{})
	tool := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		mu.Lock()
		starts[in.Amount]++
		mu.Unlock()
		if in.Amount == 1 {
			<-gate1
		}
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	started := func(amount int64) int {
		mu.Lock()
		defer mu.Unlock()
		return starts[amount]
	}
	mk := func(amount int64) *agent.Agent {
		m := model.NewRules("s",
			model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
			model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(amount, "ok"))})
		return build(t, m, []tools.Tool{tool}, policy.Func(allow))
	}
	h := newHarness(t)
	_, stopA := h.startRunner([]*agent.Agent{mk(1)}, runner.WithDrainWindow(10*time.Second))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r33a", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("r33a", "the first body running", func(aggregate.State) bool { return started(1) == 1 })

	stopped := make(chan struct{})
	go func() { defer close(stopped); stopA() }() // SIGTERM
	h.waitFor("r33a", "the hand-off", aggregate.State.HandedOff)

	// Runner B runs no worker for pay: only A's draining worker could take
	// B's task now.
	h.startRunner([]*agent.Agent{mk(2)}, runner.WithExternalTools("pay"))
	// r33b's partition moves to B once A (draining) released it: until
	// then a start is answered runner_busy.
	if err := retrying(ctx(t), func() error {
		_, err := h.client.Start(ctx(t), api.StartRequest{Run: "r33b", Agent: "desk", Input: "x"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("r33b", "a fenced attempt", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].Attempts >= 1
	})
	c, err := h.srv.JS.Consumer(ctx(t), api.TaskStream, deskQueue("pay").Consumer())
	if err != nil {
		t.Fatal(err)
	}
	ictx := ctx(t)
	untilSeen(t, "the task of r33b in the stream", func() (bool, string) {
		ci, err := c.Info(ictx)
		if err != nil {
			return false, err.Error()
		}
		return ci.Delivered.Stream >= 2 || ci.NumPending >= 1,
			fmt.Sprintf("%d delivered, %d pending, %d unacknowledged", ci.Delivered.Stream, ci.NumPending, ci.NumAckPending)
	})
	close(gate1) // A's body finishes within the window
	receive(t, "runner A's drain ended (its stop returned)", stopped)
	if n := started(2); n != 0 {
		t.Fatalf("the draining runner's worker started %d new bodies", n)
	}

	w := worker.New(h.srv.Connect(), h.srv.JS)
	w.Handle(deskQueue("pay"), runner.ToolHandler(tool, nil))
	wctx, stopW := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { stopW(); <-wdone })
	h.startRunner([]*agent.Agent{mk(1)}, runner.WithExternalTools("pay"))

	for _, run := range []string{"r33a", "r33b"} {
		s, out := finished(t, h, run)
		for _, a := range s.Actions() {
			if a.State != aggregate.ActionSucceeded {
				t.Errorf("%s: action %s %s %q", run, a.ID, a.State, a.Detail)
			}
		}
		if out.Kind != events.OutcomeCompleted {
			t.Errorf("%s: outcome %s", run, out.Kind)
		}
	}
	if started(1) != 1 || started(2) != 1 {
		t.Fatalf("starts %d and %d", started(1), started(2))
	}
}
