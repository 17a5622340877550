package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// TestSemantics8_AbandonBoundsTheLateSettlementTries (docs/semantics.md §8: a
// drain ends within its window; STYLE: nothing outlives Run): after
// Abandon (the drain window ended) a stopped body's late settlement is
// offered for at most worker.LateAfterAbandon more, then given up with its
// result logged for the person who reconciles the action, so that Run
// returns within the embedding runner's wait (10 s) instead of after
// lateTries offers of up to 15 s each. A draining single runner answers
// such a settlement runner_busy, which is what the settler answers here.
// (Run once returned ~30 s after Abandon.)
func TestSemantics8_AbandonBoundsTheLateSettlementTries(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var calls atomic.Int32
	offered := make(chan struct{}, 100)
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck(),
		worker.WithSettler(func(context.Context, api.Settlement) error {
			calls.Add(1)
			offered <- struct{}{}
			return &weft.Error{Code: weft.CodeRunnerBusy, Message: "run r: partition 3 has no owner yet; retry"}
		}))
	w.Handle(queue("refund"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		<-ctx.Done() // stopped by its 50 ms timeout, returns at once
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"rf-1"}`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "refund", Attempt: 1, Arguments: json.RawMessage(`{}`), TimeoutMS: 50, SettleWithinMS: 30000, MaxResultBytes: 100})
	receive(t, "the stopped report", rs.ch)
	receive(t, "the late settlement offered", offered)
	cancel()
	w.Abandon()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // runner.Run's wait after Abandon
		t.Errorf("Run had not returned 10 s after Abandon (%d offers so far): the embedding runner returns without it", calls.Load())
		<-done
		t.Logf("Run returned %s after Abandon, after %d offers", time.Since(start).Round(time.Second), calls.Load())
	}
}
