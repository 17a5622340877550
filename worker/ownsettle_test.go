package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §3 (bind settling) and §9: a handler settling its own
// call is refused not_awaited(own_call) only while its body runs; once the
// body was stopped by its timeout, inside the settle window, its own
// settlement is the settlement the run waits for — offered to the run as
// the same settlement over the wire would be, not refused by the worker.
func TestOwnSettlementAfterTimeoutReachesTheRun(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	offered := make(chan api.Settlement, 1)
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck(),
		worker.WithSettler(func(_ context.Context, s api.Settlement) error { offered <- s; return nil }))
	answers := make(chan error, 2)
	w.Handle(queue("refund"), func(ctx context.Context, task api.Task, settle worker.Settler) worker.Result {
		own := api.Settlement{Schema: api.Schema, Run: task.Run, Action: task.Action, Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"rf-1"}`)}
		answers <- settle(context.Background(), own) // while the body runs: refused
		<-ctx.Done()                                 // stopped by the 50 ms timeout
		time.Sleep(100 * time.Millisecond)           // the processor answers later; the body has not returned
		answers <- settle(context.Background(), own)
		return worker.Result{Outcome: api.OutcomeUncertain, Evidence: "stopped"}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "refund", Attempt: 1, Arguments: json.RawMessage(`{}`), TimeoutMS: 50, SettleWithinMS: 30000, MaxResultBytes: 100})
	if err := receive(t, "the answer to the body's settlement of its own running call", answers); err == nil {
		t.Fatal("a settlement of the body's own running call was not refused")
	}
	select {
	case err := <-answers:
		if err != nil {
			t.Fatalf("the stopped body's own settlement: %v, want it offered to the run", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the body never settled")
	}
	select {
	case s := <-offered:
		if s.Run != "r" || s.Action != "1/a" || string(s.Content) != `{"id":"rf-1"}` {
			t.Fatalf("offered %+v", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the settlement never reached the run")
	}
	cancel()
	receive(t, "Run returned", done)
}
