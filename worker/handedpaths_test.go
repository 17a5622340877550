package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// TestSemantics8_AHandedTaskStoppedBeforeItsBodyStartedLeavesItToTheCopy:
// the worker handed a task stops while the handed task is checked (its
// check returns once the worker stops); the handed task then takes the
// claim but starts no body (the worker is stopping), removes its claim and
// ends. The stream copy, received by a worker started afterwards, runs the
// body as a first delivery and reports its output: nothing is reported
// lost for a body that never started (docs/semantics.md §8, graceful
// drain; docs/adr/0027).
func TestSemantics8_AHandedTaskStoppedBeforeItsBodyStartedLeavesItToTheCopy(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	stoppedCheck := func(ctx context.Context, _ api.Task) (bool, error) {
		<-ctx.Done() // the worker stops (its checks are cut short then)
		return true, nil
	}
	var firstStarts, secondStarts atomic.Int64
	w1, rs1, stop1 := handedWorker(t, nc, js, &firstStarts, worker.WithAttemptCheck(stoppedCheck))
	task := handedTask("1/stopped")
	handOff(t, w1, task)
	publish(t, js, task)
	stop1()
	_, rs2, _ := handedWorker(t, nc, js, &secondStarts, worker.WithID("w-2"), worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	got := firstReport(t, rs2)
	if got.Outcome != api.OutcomeOutput {
		t.Errorf("the copy's delivery reported %s (%s: %s), want output", got.Outcome, got.Cause, got.Evidence)
	}
	if n := firstStarts.Load(); n != 0 {
		t.Errorf("the stopping worker started the body %d times, want 0", n)
	}
	if n := secondStarts.Load(); n != 1 {
		t.Errorf("the second worker started the body %d times, want 1", n)
	}
	rs1.mu.Lock()
	defer rs1.mu.Unlock()
	if len(rs1.got) != 0 {
		t.Errorf("the stopping worker reported %+v, want nothing", rs1.got)
	}
}

// TestSemantics8_AHandedBodyRunningAtAbandonIsReportedLostByItsOwnWorker:
// Abandon (the drain window ended) stops a handed task's running body
// like a delivered one's: it is reported lost, cause worker_lost, under
// this worker's own id — the report its runner records, since it is not
// another worker's notice (runner.heldHere refuses only those).
// docs/semantics.md §8.
func TestSemantics8_AHandedBodyRunningAtAbandonIsReportedLostByItsOwnWorker(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 100)}
	w := worker.New(nc, js, worker.WithID("w-1"), worker.WithReporter(rs.report),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	started := make(chan struct{})
	w.Handle(queue("echo"), func(ctx context.Context, _ api.Task, _ worker.Settler) worker.Result {
		close(started)
		<-ctx.Done()
		return worker.Result{Outcome: api.OutcomeUncertain, Evidence: "stopped"}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	handOff(t, w, handedTask("1/abandoned"))
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the handed body did not start within 30 s")
	}
	w.Abandon()
	got := firstReport(t, rs)
	if got.Outcome != api.OutcomeLost || got.Cause != "worker_lost" || got.Worker != w.ID() {
		t.Errorf("reported %s (%s) by %q, want lost (worker_lost) by %q", got.Outcome, got.Cause, got.Worker, w.ID())
	}
}
