package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// crashHarness is a provisioned server, a blocking test body that counts
// its starts, and workers connected so that they reconnect after a
// CrashRestart.
type crashHarness struct {
	t       *testing.T
	srv     *natstest.Server
	starts  atomic.Int64
	started chan struct{}
	release chan struct{}
	rs      *reports
}

func newCrashHarness(t *testing.T) *crashHarness {
	return &crashHarness{t: t, srv: natstest.Start(t), started: make(chan struct{}, 10), release: make(chan struct{}), rs: &reports{ch: make(chan struct{}, 10)}}
}

// worker starts a worker of queue("echo") whose attempts are always
// current (nothing is recorded: no runner here) and returns its stop.
func (h *crashHarness) worker(id string) (w *worker.Worker, stop func()) {
	h.t.Helper()
	nc := h.srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		h.t.Fatal(err)
	}
	w = worker.New(nc, js, worker.WithID(id), worker.WithReporter(h.rs.report), worker.WithAckWait(time.Second),
		worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		h.starts.Add(1)
		h.started <- struct{}{}
		<-h.release
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	h.t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		stop()
	})
	return w, stop
}

// consumer waits for queue("echo")'s durable consumer and returns it.
func (h *crashHarness) consumer() jetstream.Consumer {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := h.srv.JS.Consumer(context.Background(), api.TaskStream, queue("echo").Consumer())
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("consumer: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *crashHarness) waitEmpty() {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s, err := h.srv.JS.Stream(context.Background(), api.TaskStream); err == nil && s.CachedInfo().State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatal("the task was never acknowledged")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func echoTask(run string) api.Task {
	return api.Task{Run: run, Action: "1/call_1", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`{"n":1}`), TimeoutMS: -1}
}

// docs/semantics.md §3/§5 (an attempt's body starts at most once, whatever the
// server does): worker A takes a task and starts its body; A stops taking
// tasks (its body goes on); the nats-server crashes before it wrote the
// consumer's delivery state and restarts on the same store, so the task is
// delivered again to worker B as a first delivery (num_delivered 1). B
// must not start the body again: the attempt's claim, created before A
// started it, survives the crash; B reports the attempt lost
// (worker_lost) and the run's recorded replay budget decides.
func TestAttemptStartsAtMostOnceAcrossServerCrash(t *testing.T) {
	t.Parallel()
	h := newCrashHarness(t)
	_, stopA := h.worker("a")
	h.consumer()
	st := h.srv.SaveDeliveryState()
	publish(t, h.srv.JS, echoTask("crash-1"))
	receive(t, "the body of attempt 1 started", h.started)
	go stopA() // A drains: takes no new task, its body runs on
	time.Sleep(300 * time.Millisecond)
	h.srv.CrashRestart(st)
	h.worker("b")

	select {
	case <-h.rs.ch:
	case <-h.started:
		t.Fatalf("the body of attempt 1 started again after the server crash (%d starts)", h.starts.Load())
	case <-time.After(30 * time.Second):
		t.Fatal("worker B neither reported nor started the redelivered task")
	}
	h.rs.mu.Lock()
	rep := h.rs.got[0]
	h.rs.mu.Unlock()
	if rep.Worker != "b" || rep.Outcome != api.OutcomeLost || rep.Cause != "worker_lost" {
		t.Fatalf("report %+v, want worker b's lost worker_lost", rep)
	}
	close(h.release)
	receive(t, "worker A's own report of its body", h.rs.ch)
	if n := h.starts.Load(); n != 1 {
		t.Fatalf("%d body starts, want 1", n)
	}
}

// docs/semantics.md §3/§5, the same crash with one worker: the task comes back
// to
// the very worker whose body still runs it. It must not start the body
// again, nor report the attempt lost while its body runs: the second
// delivery waits for the first and is acknowledged with it, and the run
// gets the body's own result, once.
func TestAttemptStartsAtMostOnceRedeliveredToItsOwnWorker(t *testing.T) {
	t.Parallel()
	h := newCrashHarness(t)
	w, _ := h.worker("a")
	h.consumer()
	st := h.srv.SaveDeliveryState()
	publish(t, h.srv.JS, echoTask("crash-2"))
	receive(t, "the body of attempt 1 started", h.started)
	time.Sleep(300 * time.Millisecond)
	h.srv.CrashRestart(st)
	deadline := time.After(30 * time.Second)
	for w.Joined() == 0 {
		select {
		case <-h.started:
			t.Fatalf("the body of attempt 1 started again after the server crash (%d starts)", h.starts.Load())
		case <-h.rs.ch:
			t.Fatalf("reported while the body runs: %+v", h.rs.got)
		case <-deadline:
			t.Fatal("the task was not delivered again after the crash")
		case <-time.After(10 * time.Millisecond):
		}
	}
	close(h.release)
	h.waitEmpty()
	h.rs.mu.Lock()
	defer h.rs.mu.Unlock()
	if n := h.starts.Load(); n != 1 {
		t.Fatalf("%d body starts, want 1 (reports %+v)", n, h.rs.got)
	}
	if len(h.rs.got) != 1 || h.rs.got[0].Outcome != api.OutcomeOutput {
		t.Fatalf("reports %+v, want one output", h.rs.got)
	}
}
