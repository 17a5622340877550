package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
		s, err := h.srv.JS.Stream(context.Background(), api.TaskStream)
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
		// wall clock: a poll of WEFT_TASKS until the workers acked its tasks: not ownership's time
		time.Sleep(20 * time.Millisecond)
	}
}

// noClaimsJS is the runner's real JetStream, except that the claims
// bucket cannot be looked up: every close the runner tries has an unknown
// outcome (counted claimed, docs/adr/0023-closing-attempts.md).
type noClaimsJS struct{ jetstream.JetStream }

func (j noClaimsJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if bucket == api.ClaimsBucket {
		return nil, errors.New("the claims bucket is unreachable")
	}
	return j.JetStream.KeyValue(ctx, bucket)
}

// docs/semantics.md §8 (body running at the loss → uncertain, never a late
// start;
// scenario 32's rule "body started exactly once" with zero starts): a task
// whose attempt recovery already declared lost is never started. The first
// runner fences a non-replayable attempt whose task nobody takes before it
// drains and hands the run off; the runner that takes the run over cannot
// reach the claims bucket, so its close of the attempt has an unknown
// outcome and it records the attempt uncertain. A worker that then gets the
// stale task could claim it (nothing closed it): only its check that the
// attempt is still current keeps it from starting the body.
func TestScenario32_StaleTaskIsNotStartedAfterRecovery(t *testing.T) {
	t.Parallel()
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
	stopA() // the drain window passes with the task untaken: hand-off

	// Runner B takes the run over without closing the attempt.
	rb, err := runner.New(h.srv.Connect(), noClaimsJS{h.srv.JS}, []*agent.Agent{mk()}, runner.WithExternalTools("pay"))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopB := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rb.Run(rctx) }()
	t.Cleanup(func() { stopB(); <-done })
	s := h.waitStatus("stale", aggregate.StatusSuspended)
	if a := s.Actions()[0]; a.State != aggregate.ActionUncertain || len(a.Closed)+len(a.Claimed) != 0 {
		t.Fatalf("action %s, closed %v, claimed %v; want uncertain, no close recorded", a.State, a.Closed, a.Claimed)
	}

	// A worker gets the stale task; its claim would succeed.
	w := worker.New(h.srv.Connect(), h.srv.JS)
	w.Handle(deskQueue("pay"), runner.ToolHandler(b.tool(), nil))
	wctx, stopW := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { stopW(); <-wdone })
	h.waitTasksConsumed()
	if n := b.starts.Load(); n != 0 {
		t.Fatalf("the body of an attempt recovery declared lost started %d times", n)
	}
}
