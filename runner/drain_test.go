package runner_test

import (
	"context"
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

// Scenario 33 with work queued behind the running body (SEMANTICS §8,
// graceful drain: "running bodies ... may finish within the drain window
// and are committed; then the run is handed off with nothing uncertain").
// Two calls under max concurrency 1: SIGTERM comes while the first body
// runs. The draining runner must not start the second one (it would be cut
// off at the end of the window and end uncertain): it records the first
// body's result, hands the run off, and the next runner runs the second.
// Each body starts exactly once and the run completes.
func TestScenario33_DrainStartsNothingNew(t *testing.T) {
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
	<-stopped

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
