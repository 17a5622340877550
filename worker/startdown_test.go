package worker_test

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir := t.TempDir()
	start := func() *server.Server {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return s
	}
	s := start()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: api.TaskStream, Subjects: []string{"weft.task.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	s.WaitForShutdown()

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
	s = start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
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
	stop() // drained while the server is up (the deferred shutdown follows)
	receive(t, "Run returned", done)
}
