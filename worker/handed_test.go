package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// handedWorker runs a worker of queue("echo") with opts whose body counts
// its starts, and returns it with its reports and its stop (which waits
// for Run to return: every handed task is then done).
func handedWorker(t *testing.T, nc *nats.Conn, js jetstream.JetStream, starts *atomic.Int64, opts ...worker.Option) (*worker.Worker, *reports, func()) {
	t.Helper()
	rs := &reports{ch: make(chan struct{}, 100)}
	w := worker.New(nc, js, append([]worker.Option{worker.WithID("w-1"), worker.WithReporter(rs.report)}, opts...)...)
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		starts.Add(1)
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return w, rs, stop
}

// handedTask is attempt 1 of action a of run "r", as a runner dispatches it.
func handedTask(a string) api.Task {
	return api.Task{Schema: 1, Run: "r", Action: a, Agent: "a", Version: "1", Tool: "echo", Attempt: 1, Incarnation: 1,
		Claim: api.ClaimKey("r", a, 1, 1), Arguments: json.RawMessage(`"hi"`), TimeoutMS: -1}
}

// handOff hands task to w once its Run set up (HandOff takes no task
// before: it answers false and does nothing).
func handOff(t *testing.T, w *worker.Worker, task api.Task) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !w.HandOff(task, nats.Header{}, nil) {
		if time.Now().After(deadline) {
			t.Fatal("the worker took no handed task within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSemantics5_TheInProcessWorkerStartsNoBodyWhoseClaimWasClosed: a
// runner's close that created the attempt's claim before the in-process
// worker was handed the task (docs/adr/0023-closing-attempts.md) keeps the
// body from starting, and the handed task reports nothing (the close's
// decision records the attempt's end). docs/semantics.md §5.
func TestSemantics5_TheInProcessWorkerStartsNoBodyWhoseClaimWasClosed(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	ctx := context.Background()
	claims, err := js.CreateKeyValue(ctx, worker.ClaimsConfig())
	if err != nil {
		t.Fatal(err)
	}
	task := handedTask("1/closed")
	b, _ := json.Marshal(api.Claim{Schema: 1, Closed: &api.ClaimClose{By: "runner-1", Why: "cancelled", At: time.Now().UTC()}})
	if _, err := claims.Create(ctx, task.Claim, b); err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int64
	w, rs, stop := handedWorker(t, nc, js, &starts)
	handOff(t, w, task)
	stop()
	if n := starts.Load(); n != 0 {
		t.Errorf("the body of a closed attempt started %d times, want 0", n)
	}
	if len(rs.got) != 0 {
		t.Errorf("reports %+v, want none: the close's decision records the attempt's end", rs.got)
	}
	if w.HandedOff() != 1 {
		t.Errorf("handed off %d tasks, want 1", w.HandedOff())
	}
}

// TestSemantics7_TheStreamsCopyOfAHandedTaskRunsNoSecondBody: a runner
// publishes every task it hands to its worker (the stream copy). Whether
// the copy reaches the worker while the handed task is held or after it
// was done, the body starts once, one report is sent, and the copy is
// acked. Half of the tasks are handed before their copy is published, half
// after (the copy's delivery is then usually first and the handed task
// finds the attempt held or claimed). docs/semantics.md §7 (and §3: at
// most one start).
func TestSemantics7_TheStreamsCopyOfAHandedTaskRunsNoSecondBody(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	var starts atomic.Int64
	w, rs, stop := handedWorker(t, nc, js, &starts, worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	const n = 20
	for i := range n {
		task := handedTask(fmt.Sprintf("1/call_%d", i))
		if i%2 == 0 {
			handOff(t, w, task)
			publish(t, js, task)
		} else {
			publish(t, js, task)
			handOff(t, w, task)
		}
	}
	for range n {
		select {
		case <-rs.ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d reports of %d tasks after 30 s", len(rs.got), n)
		}
	}
	c, err := js.Consumer(context.Background(), api.TaskStream, queue("echo").Consumer())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream copies were not all acked: %d pending, %d unacked", info.NumPending, info.NumAckPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if got := starts.Load(); got != n {
		t.Errorf("%d body starts for %d attempts, each handed and published: want %d", got, n, n)
	}
	seen := map[string]int{}
	for _, r := range rs.got {
		seen[r.Action]++
		if r.Outcome != api.OutcomeOutput {
			t.Errorf("report of %s: %s %s, want output", r.Action, r.Outcome, r.Cause)
		}
	}
	for a, k := range seen {
		if k != 1 {
			t.Errorf("%s reported %d times, want once", a, k)
		}
	}
}

// TestSemantics7_AHandedTaskIsOneClaimAndNoRead counts what the runner's
// own worker sends the server for a handed task with the default check:
// the claim's create (one write to weft_claims) and nothing else — no read
// of the run by direct get before or after the claim (the runner holds the
// run at the fence's version, docs/semantics.md §7), no ack, no requeue.
// A delivered task costs two reads of the run more (LogCheck before and
// after the claim) and the delivery and ack of its message. The task's run
// has no log here: a read of it would fail and keep the body from starting.
func TestSemantics7_AHandedTaskIsOneClaimAndNoRead(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	ctx := context.Background()
	if _, err := js.CreateKeyValue(ctx, worker.ClaimsConfig()); err != nil {
		t.Fatal(err)
	}
	spy, err := nats.Connect(nc.ConnectedUrl(), nats.Token(nc.Opts.Token)) // the server requires the test connection's token
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	var reads, claimWrites, taskMsgs, acks atomic.Int64
	for subj, n := range map[string]*atomic.Int64{
		"$JS.API.DIRECT.GET.>":           &reads,
		"$JS.API.STREAM.MSG.GET.>":       &reads,
		"$KV." + api.ClaimsBucket + ".>": &claimWrites,
		"weft.task.>":                    &taskMsgs,
		"$JS.ACK.>":                      &acks,
	} {
		if _, err := spy.Subscribe(subj, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int64
	w, rs, stop := handedWorker(t, nc, js, &starts)
	handOff(t, w, handedTask("1/counted"))
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no report after 30 s")
	}
	stop()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if starts.Load() != 1 || len(rs.got) != 1 || rs.got[0].Outcome != api.OutcomeOutput {
		t.Fatalf("starts %d, reports %+v: want one start and its output", starts.Load(), rs.got)
	}
	got := [4]int64{reads.Load(), claimWrites.Load(), taskMsgs.Load(), acks.Load()}
	if want := [4]int64{0, 1, 0, 0}; got != want {
		t.Errorf("reads of the run, claim writes, task messages, acks = %v, want %v", got, want)
	}
}
