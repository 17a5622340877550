package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §8 (graceful drain; a run's stop stops its bodies):
// a worker whose setup failed because its context ended while it still
// made its consumers (SIGTERM to a process that just started) drains what
// the consumers made before delivered as a worker that set up drains —
// and a run's stop still reaches the bodies it runs meanwhile. The failed
// setup undid its stop subscription and stopped (not drained) its
// consumers: the stop was never seen, the body ran on until the drain
// grace and was reported lost (worker_lost) instead of stopped.
func TestSemantics8_AWorkerWhoseSetupFailedStillStopsARunsBodies(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	// The consumers are made in the order of Handle: the create of the
	// second's waits until the worker's context ended.
	ended := make(chan struct{})
	var held sync.Once
	tjs, err := jetstream.New(nc, jetstream.WithClientTrace(&jetstream.ClientTrace{RequestSent: func(subj string, _ []byte) {
		if strings.Contains(subj, ".CONSUMER.CREATE.") && strings.Contains(subj, queue("ship").Consumer()) {
			held.Do(func() { <-ended })
		}
	}}))
	if err != nil {
		t.Fatal(err)
	}
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, tjs, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	started := make(chan struct{})
	w.Handle(queue("pay"), func(ctx context.Context, _ api.Task, _ worker.Settler) worker.Result {
		close(started)
		<-ctx.Done()
		return worker.Result{Outcome: api.OutcomeExplain, Message: "stopped"}
	})
	w.Handle(queue("ship"), func(context.Context, api.Task, worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "fs", Action: "1/a", Tool: "pay", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	receive(t, "the pay body started", started)
	cancel()
	close(ended)
	waitStopping(t, w) // the setup failed; Run drains
	if err := nc.Publish(api.StopSubjectPrefix+"fs", nil); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, "Run returned after the failed setup", done); err == nil {
		t.Error("Run after a failed setup: nil, want the setup's error")
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if w.StopsSeen() != 1 || len(rs.got) != 1 || rs.got[0].Outcome != api.OutcomeLost || rs.got[0].Cause != api.CauseStopped {
		t.Fatalf("stops seen %d, reports %+v; want the stop seen and the body reported lost, cause stopped", w.StopsSeen(), rs.got)
	}
}
