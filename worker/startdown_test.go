package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// A worker started while its server restarts (docs/semantics.md §8: a restart
// of
// the server loses nothing and stops nobody; the worker's side of "the first
// connection is retried") waits for the
// server and then serves, instead of returning from Run: a standalone
// worker process exited, and a runner's in-process worker stopped for good
// with the runner still serving.
func TestWorkerStartedWhileTheServerIsDownServesOnceItIsBack(t *testing.T) {
	t.Parallel()
	// natstest keeps the port across Stop and StartAgain, so that nc
	// reconnects to the address it knows, and its token makes nc refused
	// by another test's server that took the port while it was down.
	s := natstest.Start(t) // provisions the task stream
	nc := s.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	js, _ := jetstream.New(nc)
	s.Stop()

	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = w.Run(ctx) }()
	defer func() { stop(); <-done }()
	// Down for longer than a JetStream request's default timeout (5 s):
	// every request of Run's setup fails meanwhile.
	select {
	case <-done:
		t.Fatalf("Run returned while the server was down: %v", runErr)
	case <-time.After(6 * time.Second):
	}
	s.StartAgain() // stopped on t.Cleanup, after Run is
	pctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for !nc.IsConnected() {
		if pctx.Err() != nil {
			t.Fatal("never reconnected")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := json.Marshal(api.Task{Schema: 1, Run: "r", Action: "1/a", Tool: "echo", Agent: "a", Version: "1", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`7`), TimeoutMS: -1})
	if _, err := js.Publish(pctx, queue("echo").Subject(), b); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rs.ch:
	case <-done:
		t.Fatalf("Run returned: %v", runErr)
	case <-pctx.Done():
		t.Fatal("the task was never served")
	}
	if g := rs.got[0]; g.Outcome != api.OutcomeOutput {
		t.Fatalf("report %+v", g)
	}
	stop() // drained while the server is up (natstest stops it on t.Cleanup)
	receive(t, "Run returned", done)
}
