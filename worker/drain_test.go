package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// Scenario 33 (docs/semantics.md §8, graceful drain): a stopping worker starts
// no
// new body. A task it was given but had not started when it stopped (here:
// still checking its attempt) is requeued, not nak'd, so the next worker
// runs it as a first delivery — once, reported output, not worker_lost.
func TestScenario33_StoppingWorkerRequeuesTaskNotStarted(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	checking := make(chan struct{}, 1)
	release := make(chan struct{})
	unblock := sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock) // a failure before the test unblocks leaves no goroutine blocked
	var starts1, starts2 atomic.Int64
	rs1 := &reports{ch: make(chan struct{}, 10)}
	w1 := worker.New(nc, js, worker.WithReporter(rs1.report), worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) {
		checking <- struct{}{}
		<-release
		return true, nil
	}))
	w1.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts1.Add(1)
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error)
	go func() { done1 <- w1.Run(ctx1) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	receive(t, "the task's attempt check called", checking)
	stop1()
	waitStopping(t, w1)
	unblock()
	receive(t, "the stopping worker's Run returned", done1)
	if starts1.Load() != 0 || len(rs1.got) != 0 {
		t.Fatalf("the stopping worker started %d bodies, sent %d reports", starts1.Load(), len(rs1.got))
	}

	rs2 := &reports{ch: make(chan struct{}, 10)}
	w2 := worker.New(nc, js, worker.WithReporter(rs2.report), worker.WithoutAttemptCheck())
	w2.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts2.Add(1)
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx2, stop2 := context.WithCancel(context.Background())
	done2 := make(chan error)
	go func() { done2 <- w2.Run(ctx2) }()
	receive(t, "a report from the second worker (the requeued task run)", rs2.ch)
	stop2()
	receive(t, "the second worker's Run returned", done2)
	if g := rs2.got[0]; g.Outcome != api.OutcomeOutput || starts2.Load() != 1 {
		t.Fatalf("report %+v, starts %d; want output from one start", g, starts2.Load())
	}
}
