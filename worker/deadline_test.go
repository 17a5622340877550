package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §5 (no body starts after its attempt was recorded lost; the
// chaos harness (docs/reliability.md), seed 1: a ship body started 765 ms after
// its fence's
// deadline and 12 ms after the run recorded the attempt timed_out): the
// worker judged the deadline before its check of the attempt and its
// claim, which can take long (a run that cannot be read is read again, a
// claim that cannot be taken is tried again), and started the body once
// they answered, past the deadline. A deadline that passed while the
// worker checked and claimed starts no body; the attempt is reported lost,
// timed out, and the body never started. The run is read twice, before
// the claim and after it (rule 3 of the task protocol): the deadline is
// judged after both (seed 2 of the default suite: the body started 21 ms
// after the run recorded it timed out, the time the read after the claim
// took, when the deadline was judged between the claim and that read).
func TestBodyNeverStartsAfterTheDeadlinePassedDuringItsCheck(t *testing.T) {
	t.Parallel()
	for _, slow := range []int64{1, 2} {
		t.Run(fmt.Sprintf("read %d of 2 is slow", slow), func(t *testing.T) {
			nc, js := startServer(t)
			deadline := time.Now().Add(300 * time.Millisecond)
			var reads atomic.Int64
			check := func(ctx context.Context, _ api.Task) (bool, error) {
				if reads.Add(1) == slow {
					// The run is read slowly: the answer comes after the
					// deadline.
					time.Sleep(time.Until(deadline) + 50*time.Millisecond)
				}
				return true, nil
			}
			f := &flaky{ch: make(chan struct{}, 10)}
			w := worker.New(nc, js, worker.WithReporter(f.report), worker.WithAttemptCheck(check), worker.WithAckWait(time.Second))
			var starts atomic.Int64
			echoWorker(t, w, &starts)
			publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1,
				Arguments: json.RawMessage(`{"paid":1}`), TimeoutMS: 300, Deadline: &deadline})
			select {
			case <-f.ch:
			case <-time.After(30 * time.Second):
				t.Fatal("no report")
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if g := f.got[0]; starts.Load() != 0 || g.Outcome != api.OutcomeLost || g.Cause != "timed_out" {
				t.Fatalf("%d body start(s), report %+v; want no start, lost timed_out", starts.Load(), g)
			}
		})
	}
}

// docs/semantics.md §7 and §5 (no body starts after its attempt was recorded
// lost; the chaos harness (docs/reliability.md), seeds 3 and 5: a cancel
// recorded the
// attempt stopped 1–80 ms before its body started, because the worker had
// read the run before the cancel and claimed the attempt after it, and the
// stop on weft.stop.<run> reached it before its body ran): the run is read
// again once the claim is taken, and an attempt that is no longer current
// then never starts. An attempt lost after its claim was taken was lost
// while a worker held it, which the loss's evidence accounts for.
func TestBodyNeverStartsWhenItsAttemptEndedWhileItWasClaimed(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	var checks atomic.Int64
	check := func(ctx context.Context, _ api.Task) (bool, error) {
		// Current when first read; the cancel lands before the claim.
		return checks.Add(1) == 1, nil
	}
	f := &flaky{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(f.report), worker.WithAttemptCheck(check), worker.WithAckWait(time.Second))
	var starts atomic.Int64
	echoWorker(t, w, &starts)
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1,
		Arguments: json.RawMessage(`{"paid":1}`), TimeoutMS: -1})
	deadline := time.Now().Add(10 * time.Second)
	for checks.Load() < 2 && starts.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	// Nothing more can happen to the task: give a start time to show.
	time.Sleep(200 * time.Millisecond)
	if n := starts.Load(); n != 0 {
		t.Fatalf("%d body start(s) of an attempt that ended before its claim; want none", n)
	}
	if checks.Load() < 2 {
		t.Fatal("the attempt was never read again after its claim")
	}
}

// Rule 5 of the task protocol (docs/protocol/41-tasks.md: the body
// timeout is the attempt's deadline) and docs/semantics.md §5 (no effect after
// its
// attempt was recorded lost; the long chaos run (docs/reliability.md), seed
// 103: a hold
// body started 273 ms after its deadline in a runner process starved of
// CPU, its context still live because only a timer the process had not
// run yet would have cancelled it). The body's context carries the
// deadline itself, so the body, and every call it makes under its
// context, sees by the clock that its time is up however late it runs.
func TestBodyContextCarriesTheAttemptDeadline(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	f := &flaky{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(f.report), worker.WithoutAttemptCheck(), worker.WithAckWait(time.Second))
	got := make(chan time.Time, 1)
	w.Handle(queue("echo"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		d, ok := ctx.Deadline()
		if !ok {
			d = time.Time{}
		}
		got <- d
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute).Round(time.Millisecond)
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1,
		Arguments: json.RawMessage(`1`), TimeoutMS: 60_000, Deadline: &deadline})
	select {
	case d := <-got:
		if !d.Equal(deadline) {
			t.Fatalf("the body's context has deadline %v; want the attempt's, %v", d, deadline)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the body never ran")
	}
}
