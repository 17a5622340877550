package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// waitTasksConsumed waits until WEFT_TASKS holds no message (every task was
// taken and acked).
func (h *harness) waitTasksConsumed() {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := h.srv.JS.Stream(context.Background(), worker.TaskStream)
		if err != nil {
			h.t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("WEFT_TASKS still holds %d tasks", info.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SEMANTICS §8 (body running at the loss → uncertain, never a late start;
// scenario 32's rule "body started exactly once" with zero starts): a task
// whose attempt recovery already declared lost is never started. The first
// runner fences a non-replayable attempt whose task nobody takes before it
// drains and hands the run off; the runner that takes the run over records
// the attempt uncertain, and its worker, which then gets the stale task,
// must not start the body.
func TestScenario32_StaleTaskIsNotStartedAfterRecovery(t *testing.T) {
	h := newHarness(t)
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(5, "ok"))})
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(allow)) }
	c := ctx(t)

	// Runner A leaves pay to external workers (none are running).
	_, stopA := h.startRunner([]*agent.Agent{mk()}, runner.WithExternalTools("pay"), runner.WithDrainWindow(100*time.Millisecond))
	if _, err := h.client.Start(c, api.StartRequest{Run: "stale", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("stale", "a fenced attempt", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	// An external worker claimed the attempt (and vanished): its body may
	// have run, so the takeover cannot close it.
	claimAsWorker(t, h, "stale", "1/call_1_1", 1, 1)
	stopA() // the drain window passes with the task untaken: hand-off

	// Runner B takes the run over; its worker gets the stale task.
	h.startRunner([]*agent.Agent{mk()})
	s := h.waitStatus("stale", aggregate.StatusSuspended)
	h.waitTasksConsumed()
	if a := s.Actions()[0]; a.State != aggregate.ActionUncertain {
		t.Fatalf("action %s, want uncertain", a.State)
	}
	if n := b.starts.Load(); n != 0 {
		t.Fatalf("the body of an attempt recovery declared lost started %d times", n)
	}
}
