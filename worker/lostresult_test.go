package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// flaky is a reporter that refuses (unavailable: try again) until ok is
// set or its first failures are used up, recording what it accepted.
type flaky struct {
	mu       sync.Mutex
	failures int // refusals left; -1 refuses until ok
	ok       atomic.Bool
	tries    atomic.Int64
	got      []api.Report
	ch       chan struct{}
}

func (f *flaky) report(_ context.Context, rep api.Report) error {
	f.tries.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ok.Load() && f.failures != 0 {
		if f.failures > 0 {
			f.failures--
		}
		return &weft.Error{Code: weft.CodeUnavailable, Message: "no runner can record it now"}
	}
	f.got = append(f.got, rep)
	f.ch <- struct{}{}
	return nil
}

func echoWorker(t *testing.T, w *worker.Worker, starts *atomic.Int64) (stop func()) {
	t.Helper()
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts.Add(1)
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// docs/semantics.md §8 (a real result is never discarded
// for failed report deliveries): the runtime refuses the report (try
// again) 300 times in a row, more than the worker used to try before it
// gave the task back — whose redelivery was then reported worker_lost,
// turning a result into a lost attempt. The worker keeps the task and
// keeps trying the same report; the run gets the body's output, and the
// body started once.
func TestReportDeliveryFailuresNeverDiscardTheResult(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	f := &flaky{failures: 300, ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(f.report), worker.WithoutAttemptCheck(), worker.WithAckWait(time.Second))
	w.SetRetry(time.Millisecond, time.Millisecond)
	var starts atomic.Int64
	echoWorker(t, w, &starts)
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`{"paid":1}`), TimeoutMS: -1})
	select {
	case <-f.ch:
	case <-time.After(60 * time.Second):
		t.Fatalf("no report accepted after %d tries", f.tries.Load())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.got[0]; g.Outcome != api.OutcomeOutput || string(g.Content) != `{"paid":1}` || starts.Load() != 1 {
		t.Fatalf("accepted report %+v after %d starts; want the body's output, one start", g, starts.Load())
	}
	// Kept, not given back: the task was delivered once (a worker that
	// gave it back would only be saved by the report in the claim, which
	// a worker cannot always write).
	c, err := js.Consumer(context.Background(), api.TaskStream, queue("echo").Consumer())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(context.Background()); err != nil || info.Delivered.Consumer != 1 {
		t.Fatalf("the task was delivered %d times (%v), want once: the worker gave it back", info.Delivered.Consumer, err)
	}
}

// docs/semantics.md §8: a worker that stops while the runtime refuses its
// report
// saves the report with the attempt's claim before it gives the task back,
// so the worker that gets the task next delivers that result instead of
// reporting the attempt lost. The body started once.
func TestStoppingWorkerHandsItsUndeliveredReportOn(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	fa := &flaky{failures: -1, ch: make(chan struct{}, 10)}
	a := worker.New(nc, js, worker.WithID("a"), worker.WithReporter(fa.report), worker.WithoutAttemptCheck(), worker.WithAckWait(time.Second))
	a.SetRetry(time.Millisecond, 5*time.Millisecond)
	var starts atomic.Int64
	stopA := echoWorker(t, a, &starts)
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`{"paid":2}`), TimeoutMS: -1})
	waitUntil(t, "worker a trying its report 3 times", func() (bool, string) {
		n := fa.tries.Load()
		return n >= 3, fmt.Sprintf("%d tries, %d body starts", n, starts.Load())
	})
	stopA()

	fb := &flaky{ch: make(chan struct{}, 10)}
	b := worker.New(nc, js, worker.WithID("b"), worker.WithReporter(fb.report), worker.WithoutAttemptCheck(), worker.WithAckWait(time.Second))
	echoWorker(t, b, &starts)
	select {
	case <-fb.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("worker b reported nothing")
	}
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if g := fb.got[0]; g.Outcome != api.OutcomeOutput || string(g.Content) != `{"paid":2}` || g.Worker != "a" || starts.Load() != 1 {
		t.Fatalf("b delivered %+v after %d starts; want a's output, one start", g, starts.Load())
	}
}

// A task the worker knows it never started is not reported lost: the run cannot
// be read to check the attempt, so the
// worker does not start the body — and says nothing that would make the
// action uncertain or spend a replay; the task goes back to the queue and
// runs once the run can be read.
func TestTaskNotStartedWhileTheRunCannotBeReadIsRequeued(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	var checks atomic.Int64
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithAckWait(time.Second),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) {
			if checks.Add(1) <= 8 { // every try of the first delivery
				return false, errors.New("the log is unreachable")
			}
			return true, nil
		}))
	var starts atomic.Int64
	echoWorker(t, w, &starts)
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`{"paid":3}`), TimeoutMS: -1})
	select {
	case <-rs.ch:
	case <-time.After(60 * time.Second):
		t.Fatal("no report")
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.got[0]; g.Outcome != api.OutcomeOutput || starts.Load() != 1 {
		t.Fatalf("first report %+v after %d starts; want the body's output (the task requeued, not reported lost)", g, starts.Load())
	}
}

// A worker that cannot take the attempt's claim
// (the claims bucket is gone) does not start the body and does not report
// the attempt lost: it requeues the task, which runs once the claim can be
// taken.
func TestTaskWhoseAttemptCannotBeClaimedIsRequeued(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck(), worker.WithAckWait(time.Second))
	var starts atomic.Int64
	echoWorker(t, w, &starts)
	ctx := context.Background()
	waitUntil(t, "the claims bucket made by the worker on start", func() (bool, string) {
		_, err := js.KeyValue(ctx, api.ClaimsBucket)
		return err == nil, fmt.Sprint(err)
	})
	if err := js.DeleteKeyValue(ctx, api.ClaimsBucket); err != nil {
		t.Fatal(err)
	}
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`{"paid":4}`), TimeoutMS: -1})
	s, err := js.Stream(ctx, api.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.FirstSeq > 1 && info.State.Msgs == 1 {
			break // the task was requeued: the first copy acked, a new one queued
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task was not requeued: stream %+v, %d starts, reports %+v", info.State, starts.Load(), rs.got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if starts.Load() != 0 || len(rs.got) != 0 {
		t.Fatalf("%d starts, reports %+v while the attempt could not be claimed", starts.Load(), rs.got)
	}
	if _, err := js.CreateKeyValue(ctx, worker.ClaimsConfig()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rs.ch:
	case <-time.After(60 * time.Second):
		t.Fatal("no report once the claim could be taken")
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.got[0]; g.Outcome != api.OutcomeOutput || starts.Load() != 1 {
		t.Fatalf("report %+v after %d starts; want the body's output from one start", g, starts.Load())
	}
}
