package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// returnsWithin waits for Run's result on done, failing t when it has not
// come after a minute (far beyond any bound these tests set: a hang, not a
// slow machine).
func returnsWithin(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s: Run had not returned a minute after its context ended", what)
	}
}

// TestSemantics8_AStandaloneWorkerBoundsItsDrain (docs/semantics.md §7, §8): a
// standalone worker whose Run context ends (SIGTERM) lets its
// bodies finish within its drain grace (worker.WithDrainGrace); a body that
// ignores its context and is still running then — running, or a settling
// body stopped by its timeout and waiting for its late settlement — is
// abandoned as worker.Abandon does, and Run returns. The running one is
// reported lost with cause worker_lost (the run decides replay or an
// uncertain effect, as for a lost worker); nothing reports a result the
// body never returned. Before, Run waited for the body forever.
func TestSemantics8_AStandaloneWorkerBoundsItsDrain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		task api.Task
		// want is the last report's outcome and cause.
		outcome, cause string
	}{
		{"running body", api.Task{TimeoutMS: -1}, api.OutcomeLost, "worker_lost"},
		{"stopped settling body", api.Task{TimeoutMS: 50, SettleWithinMS: 60000}, api.OutcomeLost, "timed_out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, js := startServer(t)
			rs := &reports{ch: make(chan struct{}, 10)}
			var settled atomic.Int32
			w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck(), worker.WithDrainGrace(100*time.Millisecond),
				worker.WithSettler(func(context.Context, api.Settlement) error { settled.Add(1); return nil }))
			started, release := make(chan struct{}), make(chan struct{})
			bodyDone := make(chan struct{})
			w.Handle(queue("pay"), func(ctx context.Context, _ api.Task, _ worker.Settler) worker.Result {
				defer close(bodyDone)
				close(started)
				<-release // ignores ctx
				return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"PAY-1"}`)}
			})
			t.Cleanup(func() { close(release); <-bodyDone })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			task := tc.task
			task.Run, task.Action, task.Tool, task.Attempt, task.Arguments, task.MaxResultBytes = "r", "1/a", "pay", 1, json.RawMessage(`{}`), 100
			publish(t, js, task)
			receive(t, "the pay body started", started)
			if task.TimeoutMS > 0 {
				// the body is stopped, not returned
				receive(t, "the timed-out report", rs.ch)
			}
			cancel()
			returnsWithin(t, tc.name, done)

			rs.mu.Lock()
			defer rs.mu.Unlock()
			if len(rs.got) == 0 {
				t.Fatal("no report")
			}
			for _, r := range rs.got {
				if r.Outcome == api.OutcomeOutput {
					t.Fatalf("report %+v: the body never returned a result", r)
				}
			}
			if last := rs.got[len(rs.got)-1]; last.Outcome != tc.outcome || last.Cause != tc.cause {
				t.Fatalf("last report %s/%s (%s), want %s/%s", last.Outcome, last.Cause, last.Evidence, tc.outcome, tc.cause)
			}
			if settled.Load() != 0 {
				t.Fatalf("%d settlements offered for a body that never returned", settled.Load())
			}
		})
	}
}

// TestSemantics8_AStoppingWorkerStopsRetryingTheAttemptCheck: the check
// before a body starts is retried while the run cannot be read; once the
// worker stops (its Run context ended) it starts no new body, so the
// retries stop at once and the task is requeued (not reported), instead of
// Run waiting for every retry of every such task. Before, the retries
// slept their backoff to the end (8 tries, about 7 s).
//
// Not parallel: on a loaded machine (CI with the parallel tests) the stop
// once took the 5 s drain grace, whose Abandon cut the requeue's publish
// short after it landed, and the nak'd original made two tasks. The
// copies requeued and delivered again here before the drain ended were
// each checked again (a chain of them could pass 8 checks, or fill the
// checks' channel and hold the handler); now they are requeued without a
// check (TestSemantics8_AStoppingWorkerRequeuesATaskWithoutItsAttemptCheck).
// A requeue cut short by Abandon may
// still duplicate an unstarted task; the attempt's claim still lets only
// one body start.
func TestSemantics8_AStoppingWorkerStopsRetryingTheAttemptCheck(t *testing.T) {
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var checks atomic.Int32
	checked := make(chan struct{}, 10)
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) {
		checks.Add(1)
		checked <- struct{}{}
		return false, &weft.Error{Code: weft.CodeUnavailable, Message: "the log does not answer"}
	}))
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	receive(t, "the attempt check made", checked)
	cancel()
	returnsWithin(t, "checking", done)
	if n := checks.Load(); n >= 8 {
		t.Fatalf("the check was tried %d times after the worker stopped, want the retries to stop", n)
	}
	if len(rs.got) != 0 {
		t.Fatalf("reports %+v, want none (the body never started: requeued)", rs.got)
	}
	// The original's ack is sent without waiting for the server (as every
	// ack): the stream may still hold it for a moment after Run returned.
	waitQueueHolds(t, js, 1)
}

// TestSemantics8_AnAbandonedWorkerStopsRetryingAReport: a report that can
// neither be delivered (the runner does not answer) nor saved with the
// attempt's claim is tried again with a backoff; once the worker was
// abandoned (here by its drain grace) the tries end LateAfterAbandon later
// and the task goes back to the queue as a lost worker's would, so Run
// returns. Before, a stopping worker went on for all of its 20 tries
// (about 30 s with the backoff).
func TestSemantics8_AnAbandonedWorkerStopsRetryingAReport(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	var tries atomic.Int32
	tried := make(chan struct{}, 100)
	w := worker.New(nc, js, worker.WithoutAttemptCheck(), worker.WithDrainGrace(100*time.Millisecond),
		worker.WithReporter(func(context.Context, api.Report) error {
			tries.Add(1)
			tried <- struct{}{}
			return &weft.Error{Code: weft.CodeUnavailable, Message: "no runner answers"}
		}))
	w.Handle(queue("echo"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		// The claims bucket goes away: the report cannot be saved.
		if err := js.DeleteKeyValue(ctx, api.ClaimsBucket); err != nil {
			t.Error(err)
		}
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	receive(t, "the report tried", tried)
	cancel()
	returnsWithin(t, "reporting", done)
	if n := tries.Load(); n >= 20 {
		t.Fatalf("the report was tried %d times, want the tries cut short after the abandonment", n)
	}
}

// TestSemantics8_AStoppingWorkerRequeuesATaskWithoutItsAttemptCheck
// (docs/semantics.md §8 graceful drain; docs/protocol/41-tasks.md rule 9):
// a task that reaches a worker already stopping is put back on the queue
// at once, unreported, without the attempt check: the worker starts no
// new body, so whether it may start is for the worker that takes it.
// Before, the check was made (and retried while the run could not be
// read) for each such task — and for each copy requeued and delivered
// again before the drain ended, which once filled the drain grace.
func TestSemantics8_AStoppingWorkerRequeuesATaskWithoutItsAttemptCheck(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var checks atomic.Int32
	var w *worker.Worker
	entered := make(chan struct{})
	var once sync.Once
	w = worker.New(nc, js, worker.WithReporter(rs.report),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) {
			checks.Add(1)
			return false, &weft.Error{Code: weft.CodeUnavailable, Message: "the log does not answer"}
		}),
		// Called for each delivery before its check: holds the first
		// until the worker is stopping.
		worker.WithContextFrom(func(ctx context.Context, _ nats.Header) context.Context {
			first := false
			once.Do(func() { first = true })
			if first {
				close(entered)
				// The worker's goroutine: t.Errorf, not t.Fatalf.
				deadline := time.Now().Add(hangBound)
				for !w.Stopping() {
					if time.Now().After(deadline) {
						t.Errorf("the worker was not stopping %v after the task was delivered (the test cancels its context then)", hangBound)
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			return ctx
		}))
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	select {
	case <-entered:
	case <-time.After(20 * time.Second): // a bound on a hang, not a timing assertion
		t.Fatal("the task was not delivered")
	}
	cancel()
	returnsWithin(t, "stopping", done)
	if n := checks.Load(); n != 0 {
		t.Fatalf("the attempt check was made %d times for tasks delivered to a stopping worker, want none", n)
	}
	rs.mu.Lock()
	got := len(rs.got)
	rs.mu.Unlock()
	if got != 0 {
		t.Fatalf("%d reports, want none (the body never started: requeued)", got)
	}
	waitQueueHolds(t, js, 1)
}

// waitQueueHolds waits until the task stream holds n messages (a work
// queue removes a task once acked; an ack is sent without waiting for the
// server, so the stream may hold an acked task for a moment), failing the
// test after hangBound.
func waitQueueHolds(t testing.TB, js jetstream.JetStream, n uint64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d tasks on the queue", n), func() (bool, string) {
		s, err := js.Stream(context.Background(), api.TaskStream)
		if err != nil {
			return false, err.Error()
		}
		st := s.CachedInfo().State
		return st.Msgs == n, fmt.Sprintf("%d tasks (sequences %d to %d)", st.Msgs, st.FirstSeq, st.LastSeq)
	})
}
