package worker_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §7 (a cancel starts no body; running bodies are stopped):
// the
// cancellation is recorded and its stop reaches the worker while it checks
// the attempt — after the check read the run, before the body started.
// The body must not start: started then, it would run to its end unstopped
// (the stop already came and went), an effect after the run was cancelled
// and recorded uncertain. The task is acked and nothing is reported (the
// cancellation decided the attempt).
func TestCancelledBeforeItsBodyStartsTheBodyNeverStarts(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var w *worker.Worker
	w = worker.New(nc, js, worker.WithReporter(rs.report), worker.WithAckWait(time.Second),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) {
			// The run was read (current); now the cancellation lands and
			// its stop reaches this worker before the body starts.
			if err := nc.Publish(api.StopSubjectPrefix+"cx", nil); err != nil {
				return false, err
			}
			deadline := time.Now().Add(hangBound)
			for w.StopsSeen() == 0 {
				if time.Now().After(deadline) {
					// The worker's goroutine: t.Errorf, not t.Fatalf.
					t.Errorf("the run's stop, published before the check answered, was not seen within %v", hangBound)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			return true, nil
		}))
	var starts atomic.Int64
	w.Handle(queue("echo"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	publish(t, js, api.Task{Run: "cx", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	waitQueueHolds(t, js, 0)
	if w.StopsSeen() == 0 {
		t.Fatal("the stop never reached the worker")
	}
	if n := starts.Load(); n != 0 {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		t.Fatalf("the body started %d times after its run's cancellation reached the worker (reports %+v)", n, rs.got)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	// Only the mark of its claim is reported (lost not_started: the run
	// reads the claim, docs/adr/0023-closing-attempts.md); no outcome.
	if len(rs.got) != 1 || rs.got[0].Outcome != api.OutcomeLost || rs.got[0].Cause != api.CauseNotStarted {
		t.Fatalf("reports %+v for an attempt the cancellation decided: want one, lost not_started", rs.got)
	}
}

// Rule 1 of the task protocol (docs/protocol/41-tasks.md; docs/semantics.md §8,
// no
// body starts after its attempt was decided): the deadline passes while
// the worker checks the attempt (a run slow to read). The run's timer has
// decided the timeout at the deadline (a replay or an uncertain effect),
// so the body must not start after it: it is reported lost, timed_out,
// without being started.
func TestDeadlinePassedBeforeItsBodyStartsTheBodyNeverStarts(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	deadline := time.Now().Add(500 * time.Millisecond)
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithAckWait(time.Second),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) {
			time.Sleep(time.Until(deadline) + 50*time.Millisecond)
			return true, nil
		}))
	var starts atomic.Int64
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts.Add(1)
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	publish(t, js, api.Task{Run: "dl", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`1`),
		TimeoutMS: 60_000, Deadline: &deadline})
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no report")
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.got[0]; starts.Load() != 0 || g.Outcome != api.OutcomeLost || g.Cause != "timed_out" {
		t.Fatalf("report %+v after %d body starts; want lost timed_out, the body never started", g, starts.Load())
	}
}

// docs/semantics.md §7 (a cancellation stops the run's running bodies): attempt
// 1
// of an action still runs in this worker when attempt 2 of the same action
// starts here too (attempt 1 was recorded lost, its body went on); attempt
// 1 then returns. A cancellation must still stop attempt 2.
func TestStopReachesEveryRunningAttemptOfAnAction(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	started := make(chan int, 4)
	release1, release2 := make(chan struct{}), make(chan struct{})
	w.Handle(queue("echo"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		started <- task.Attempt
		if task.Attempt == 1 {
			<-release1
			return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
		}
		select {
		case <-ctx.Done():
		case <-release2:
		}
		return worker.Result{Outcome: api.OutcomeExplain, Message: "stopped"}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	defer close(release2) // a body left running would hold the drain
	for attempt := 1; attempt <= 2; attempt++ {
		publish(t, js, api.Task{Run: "sr", Action: "1/a", Tool: "echo", Attempt: attempt, Incarnation: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
		select {
		case a := <-started:
			if a != attempt {
				t.Fatalf("attempt %d started, want %d", a, attempt)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("attempt %d did not start", attempt)
		}
	}
	close(release1)
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("attempt 1 was not reported")
	}
	if err := nc.Publish(api.StopSubjectPrefix+"sr", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rs.ch:
	case <-time.After(20 * time.Second):
		t.Fatal("the cancellation's stop did not stop attempt 2")
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.got[1]; g.Attempt != 2 || g.Outcome != api.OutcomeLost || g.Cause != "stopped" {
		t.Fatalf("report %+v, want attempt 2 lost, stopped", g)
	}
}
