package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §8 (a run can always be answered; recovery): a worker
// whose queue's durable consumer is deleted while it runs (an operator, a
// stream made again) makes the consumer again and executes the tasks
// published after. Run waited only for its context once set up: the
// consume ended with the consumer and the queue's runs waited for ever.
func TestSemantics8_AWorkerMakesADeletedConsumerAgain(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	waitReport(t, rs)
	// 1/a is acked after its report returns: deleting the consumer before
	// the ack lands would leave 1/a on the work queue, delivered again by
	// the consumer made again (docs/adr/0035-consumers-made-again.md).
	waitQueueHolds(t, js, 0) // every task delivered so far was acked
	if err := js.DeleteConsumer(context.Background(), api.TaskStream, queue("echo").Consumer()); err != nil {
		t.Fatal(err)
	}
	publish(t, js, api.Task{Run: "r", Action: "1/b", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`2`), TimeoutMS: -1})
	select {
	case <-rs.ch:
	case <-time.After(20 * time.Second): // a bound on a hang, not a timing assertion
		t.Fatalf("a task published after the queue's consumer was deleted was not executed (consumes made again: %d)", w.Rebinds())
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.got[1]; g.Action != "1/b" || g.Outcome != api.OutcomeOutput {
		t.Fatalf("report %+v, want 1/b output", g)
	}
	if w.Rebinds() != 1 {
		t.Fatalf("consumes made again: %d, want 1", w.Rebinds())
	}
}

// docs/semantics.md §8 (recovery): a server that restarts without the
// queue's consumer (the task stream in memory, made again by its
// operator) says nothing to the worker's consume, which would pull from
// nothing for ever; the worker sees its heartbeats missing, finds the
// consumer gone, makes it again and executes the queue's next task.
func TestSemantics8_AWorkerMakesAConsumerTheServerLostAgain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The restarted server is on the same port, which another test's
	// server may take while it is down: the token makes nc refused there.
	token := natstest.Token(t)
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true, Authorization: token}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.Token(token), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	stream := jetstream.StreamConfig{Name: api.TaskStream, Subjects: []string{"weft.task.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage}
	if _, err := js.CreateStream(context.Background(), stream); err != nil {
		t.Fatal(err)
	}
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopRun := sync.OnceFunc(func() { cancel(); <-done; nc.Close() })
	t.Cleanup(stopRun)
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	waitReport(t, rs)

	opts2 := *opts
	opts2.Port = s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	s2, err := server.NewServer(&opts2)
	if err != nil {
		t.Fatal(err)
	}
	go s2.Start()
	// Run stops (and drains) before the server it talks to shuts down.
	t.Cleanup(func() { stopRun(); s2.Shutdown(); s2.WaitForShutdown() })
	if !s2.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready after the restart")
	}
	waitUntil(t, "the task stream made again on the restarted server", func() (bool, string) {
		_, err := js.CreateStream(context.Background(), stream)
		return err == nil, fmt.Sprint(err)
	})
	publish(t, js, api.Task{Run: "r", Action: "1/b", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`2`), TimeoutMS: -1})
	select {
	case <-rs.ch:
	case <-time.After(90 * time.Second): // a bound on a hang, not a timing assertion
		t.Fatalf("a task published after the server lost the queue's consumer was not executed (consumes made again: %d)", w.Rebinds())
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g := rs.got[1]; g.Action != "1/b" || g.Outcome != api.OutcomeOutput {
		t.Fatalf("report %+v, want 1/b output", g)
	}
}

// waitReport waits, bounded, for rs's next report.
func waitReport(t *testing.T, rs *reports) {
	t.Helper()
	select {
	case <-rs.ch:
	case <-time.After(20 * time.Second): // a bound on a hang, not a timing assertion
		t.Fatal("no report")
	}
}
