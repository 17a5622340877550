package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

func startServer(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, nc, js := startServerHandle(t)
	return nc, js
}

// startServerHandle is startServer that also returns the server, for a
// test that stops it.
func startServerHandle(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	token := natstest.Token(t)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true, Authorization: token})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.Token(token))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	t.Cleanup(func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() })
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: api.TaskStream, Subjects: []string{"weft.task.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	return s, nc, js
}

type reports struct {
	mu  sync.Mutex
	got []api.Report
	ch  chan struct{}
}

func (r *reports) report(_ context.Context, rep api.Report) error {
	r.mu.Lock()
	r.got = append(r.got, rep)
	r.mu.Unlock()
	r.ch <- struct{}{}
	return nil
}

// queue is the test queue of tool: tool as bound in agent "a" version "1".
func queue(tool string) api.Queue { return api.Queue{Agent: "a", Version: "1", Tool: tool} }

// publish publishes task on its queue, as a task of agent "a" version "1"
// unless it names another.
func publish(t *testing.T, js jetstream.JetStream, task api.Task) {
	t.Helper()
	task.Schema = 1
	if task.Agent == "" {
		task.Agent, task.Version = "a", "1"
	}
	b, _ := json.Marshal(task)
	q := api.Queue{Agent: task.Agent, Version: task.Version, Tool: task.Tool}
	if _, err := js.Publish(context.Background(), q.Subject(), b); err != nil {
		t.Fatal(err)
	}
}

func TestWorkerOutcomes(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	starts := 0
	w.Handle(queue("echo"), func(ctx context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts++
		if string(task.Arguments) == `"slow"` {
			<-ctx.Done()
			return worker.Result{Outcome: api.OutcomeExplain, Message: "late"}
		}
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()

	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`"hi"`), TimeoutMS: -1, MaxResultBytes: 100})
	receive(t, "the report of 1/a", rs.ch)
	publish(t, js, api.Task{Run: "r", Action: "1/b", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`"` + strings.Repeat("x", 200) + `"`), TimeoutMS: -1, MaxResultBytes: 100})
	receive(t, "the report of 1/b", rs.ch)
	publish(t, js, api.Task{Run: "r", Action: "1/c", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`"slow"`), TimeoutMS: 20, MaxResultBytes: 100})
	receive(t, "the report of 1/c", rs.ch)
	cancel()
	receive(t, "Run returned", done)
	want := []struct{ action, outcome, cause string }{{"1/a", "output", ""}, {"1/b", "oversize", ""}, {"1/c", "lost", "timed_out"}}
	for i, w := range want {
		g := rs.got[i]
		if g.Action != w.action || g.Outcome != w.outcome || g.Cause != w.cause {
			t.Errorf("report %d = %s %s %s, want %s %s %s", i, g.Action, g.Outcome, g.Cause, w.action, w.outcome, w.cause)
		}
	}
	if rs.got[1].Bytes <= 100 {
		t.Errorf("oversize report bytes = %d", rs.got[1].Bytes)
	}
}

// A task redelivered because its worker vanished after claiming its
// attempt (so its body may have run) is reported lost (worker_lost) and
// never run again; the evidence names the claim's holder.
func TestWorkerRedeliveryIsReportedLost(t *testing.T) {
	t.Parallel()
	rep, started := vanished(t, true)
	if started != 0 {
		t.Fatal("a redelivered task's body was run again")
	}
	if rep.Outcome != api.OutcomeLost || rep.Cause != "worker_lost" || !strings.Contains(rep.Evidence, "vanished-worker") {
		t.Fatalf("report = %+v, want lost worker_lost naming the claim's holder", rep)
	}
}

// A task redelivered because its worker vanished before claiming its
// attempt never started its body: the next delivery runs it, once, and the
// run gets its result — not a lost report that would make the action
// uncertain (or replay it) for nothing.
func TestWorkerRedeliveryOfAnUnclaimedAttemptRuns(t *testing.T) {
	t.Parallel()
	rep, started := vanished(t, false)
	if started != 1 || rep.Outcome != api.OutcomeOutput {
		t.Fatalf("report = %+v after %d starts, want output from one start", rep, started)
	}
}

// vanished has a "vanished worker" take a task and never ack it, having
// claimed its attempt or not, then runs a live worker that gets the
// redelivery; it returns the live worker's report and its body starts.
func vanished(t *testing.T, claimed bool) (api.Report, int) {
	t.Helper()
	nc, js := startServer(t)
	ctx := context.Background()
	c, err := js.CreateOrUpdateConsumer(ctx, api.TaskStream, worker.ConsumerConfig(queue("echo"), 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	task := api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Incarnation: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1}
	publish(t, js, task)
	if _, err := c.Fetch(1); err != nil {
		t.Fatal(err)
	}
	if claimed {
		kv, err := js.CreateKeyValue(ctx, worker.ClaimsConfig())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(ctx, api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation), []byte("vanished-worker")); err != nil {
			t.Fatal(err)
		}
	}
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithAckWait(300*time.Millisecond), worker.WithoutAttemptCheck())
	started := make(chan struct{}, 2)
	w.Handle(queue("echo"), func(context.Context, api.Task, worker.Settler) worker.Result {
		started <- struct{}{}
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`)}
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- w.Run(rctx) }()
	receive(t, "a report", rs.ch)
	cancel()
	receive(t, "Run returned", done)
	return rs.got[0], len(started)
}

// hangBound bounds a test's wait for something that happens at once on any
// machine: a bound on a hang (which would otherwise last until the package
// timeout and name no cause), not a timing assertion.
const hangBound = 30 * time.Second

// waitUntil polls cond until it reports ok. When it has not within
// hangBound, the test fails naming what never happened and what cond last
// saw. Call it from the test's goroutine only (it calls t.Fatalf).
func waitUntil(t testing.TB, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s within %v; last seen: %s", what, hangBound, seen)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitStopping waits until w is stopping (its Run context ended or its
// setup failed), failing the test after hangBound.
func waitStopping(t testing.TB, w *worker.Worker) {
	t.Helper()
	waitUntil(t, "the worker stopping", func() (bool, string) {
		return w.Stopping(), fmt.Sprintf("not stopping, %d stops seen", w.StopsSeen())
	})
}

// receive waits for a value on ch and returns it, failing the test naming
// what never came when none came within hangBound. Call it from the test's
// goroutine only.
func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangBound):
		t.Fatalf("never %s within %v", what, hangBound)
		panic("unreachable")
	}
}
