package worker_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §3 (a settling tool's own return value wins whenever it
// returns) and §8 (a stopped settling body is like a running one; graceful
// drain commits what finishes): the late settlement of a
// body stopped by its timeout is owned by the worker. A worker told to stop
// while that settlement is being retried returns from Run only once it was
// accepted — never with the retry still running on its own, and never with
// the body's known result dropped.
func TestSemantics8_RunWaitsForALateSettlement(t *testing.T) {
	// Not parallel: workerGoroutines reads every goroutine of the process.
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var calls atomic.Int32
	refused := make(chan struct{})
	var accepted atomic.Value
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck(),
		worker.WithSettler(func(_ context.Context, s api.Settlement) error {
			if calls.Add(1) == 1 {
				close(refused)
				return &weft.Error{Code: weft.CodeUnavailable, Message: "the store does not answer yet"}
			}
			accepted.Store(s)
			return nil
		}))
	w.Handle(queue("refund"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		<-ctx.Done() // stopped by its 50 ms timeout
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"rf-1"}`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "refund", Attempt: 1, Arguments: json.RawMessage(`{}`), TimeoutMS: 50, SettleWithinMS: 30000, MaxResultBytes: 100})
	receive(t, "the stopped report", rs.ch)
	receive(t, "the late settlement refused", refused)
	cancel() // stop the worker while the late settlement waits to be retried
	if err := receive(t, "Run's return after its context ended", done); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("Run returned after %d offers of the late settlement, want 2 (refused, then accepted)", n)
	}
	if s, _ := accepted.Load().(api.Settlement); s.Run != "r" || s.Action != "1/a" || string(s.Content) != `{"id":"rf-1"}` {
		t.Fatalf("accepted %+v", s)
	}
	if g := workerGoroutines(); g != "" {
		t.Fatalf("a goroutine of the worker outlived Run:\n%s", g)
	}
}

// workerGoroutines returns the stacks of the goroutines running a method of
// a Worker (the test's own goroutines and the server's are not).
func workerGoroutines() string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "weft/worker.(*Worker)") {
			found = append(found, g)
		}
	}
	return strings.Join(found, "\n\n")
}

// docs/semantics.md §8 (the drain window ends: bodies still running are stopped
// as
// a lost worker's): a late settlement waiting for a
// stopped body that does not return does not hold Run past Abandon; the
// body's result comes too late to be offered, and the run decides as after
// a lost worker.
func TestSemantics8_AbandonEndsTheWaitForAStoppedSettlingBody(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var calls atomic.Int32
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck(),
		worker.WithSettler(func(context.Context, api.Settlement) error { calls.Add(1); return nil }))
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // a failure before the test unblocks leaves no goroutine blocked
	returned := make(chan struct{})
	w.Handle(queue("refund"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		defer close(returned)
		<-ctx.Done()
		<-release // ignores its stop until the test ends
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`{"id":"rf-1"}`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "refund", Attempt: 1, Arguments: json.RawMessage(`{}`), TimeoutMS: 50, SettleWithinMS: 30000, MaxResultBytes: 100})
	receive(t, "the stopped report", rs.ch)
	cancel()
	w.Abandon()
	if err := receive(t, "Run's return after Abandon", done); err != nil {
		t.Fatal(err)
	}
	unblock()
	receive(t, "the settling body returned", returned)
	if n := calls.Load(); n != 0 {
		t.Fatalf("a body that returned after Abandon was offered as a settlement %d times", n)
	}
}
