package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// The queue names of an agent identity's tool (docs/protocol/41-tasks.md):
// a version's '.' is written '~' so that the version is one subject token,
// and distinct identities never share a subject or a consumer — even when
// a version only differs by '.' versus '_' or '-', or the parts' '_'
// could be read as separators.
func TestQueueNames(t *testing.T) {
	t.Parallel()
	q := api.Queue{Agent: "acc-ver", Version: "2.0", Tool: "ver_echo"}
	if got := q.Subject(); got != "weft.task.acc-ver.2~0.ver_echo" {
		t.Errorf("subject %s", got)
	}
	if got := q.Consumer(); got != "weft_task_acc-ver@2~0@ver_echo" {
		t.Errorf("consumer %s", got)
	}
	qs := []api.Queue{q,
		{Agent: "acc-ver", Version: "2_0", Tool: "ver_echo"},
		{Agent: "acc-ver", Version: "2-0", Tool: "ver_echo"},
		{Agent: "acc-ver", Version: "20", Tool: "ver_echo"},
		{Agent: "acc", Version: "ver_2.0", Tool: "ver_echo"},
		{Agent: "acc-ver_2", Version: "0", Tool: "ver_echo"},
		{Agent: "acc-ver", Version: "2.0_ver", Tool: "echo"},
	}
	subjects, consumers := map[string]api.Queue{}, map[string]api.Queue{}
	for _, q := range qs {
		if o, dup := subjects[q.Subject()]; dup {
			t.Errorf("%v and %v share subject %s", o, q, q.Subject())
		}
		if o, dup := consumers[q.Consumer()]; dup {
			t.Errorf("%v and %v share consumer %s", o, q, q.Consumer())
		}
		subjects[q.Subject()], consumers[q.Consumer()] = q, q
	}
	// The server accepts every such name as a durable consumer.
	_, js := startServer(t)
	for _, q := range qs {
		if _, err := js.CreateOrUpdateConsumer(context.Background(), api.TaskStream, worker.ConsumerConfig(q, time.Second)); err != nil {
			t.Errorf("consumer %s: %v", q.Consumer(), err)
		}
	}
}

// docs/semantics.md §3: a worker serving one agent identity's tool runs the
// tasks
// of that identity only — not those of another version, another agent or
// another tool's queue — and terminates, without running it, a task on its
// subject that names another identity.
func TestWorkerServesOnlyItsQueue(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, worker.WithReporter(rs.report), worker.WithoutAttemptCheck())
	var mu sync.Mutex
	var ran []string
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		mu.Lock()
		ran = append(ran, task.Run)
		mu.Unlock()
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for _, task := range []api.Task{
		{Run: "v2", Agent: "a", Version: "2"},
		{Run: "b", Agent: "b", Version: "1"},
	} {
		task.Action, task.Tool, task.Attempt, task.Arguments, task.TimeoutMS = "1/x", "echo", 1, json.RawMessage(`1`), -1
		publish(t, js, task)
	}
	// A task on a's queue that names agent b: published by hand on the
	// subject of a@1/echo.
	forged, _ := json.Marshal(api.Task{Schema: 1, Run: "forged", Action: "1/x", Agent: "b", Version: "1", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	if _, err := js.Publish(context.Background(), queue("echo").Subject(), forged); err != nil {
		t.Fatal(err)
	}
	publish(t, js, api.Task{Run: "mine", Action: "1/x", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	receive(t, "a report of task mine", rs.ch)
	waitQueueHolds(t, js, 2) // mine acked, forged terminated; v2's and b's remain
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 1 || ran[0] != "mine" || len(rs.got) != 1 || rs.got[0].Run != "mine" {
		t.Fatalf("bodies ran for %v, reports %+v; want only run mine", ran, rs.got)
	}
}
