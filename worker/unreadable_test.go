package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// unreadable is a reply a worker cannot read as the error envelope
// (api.ErrorReply), with the headers it carries: no answer.
type unreadable struct {
	name, body string
	code, st   string // Nats-Service-Error, Nats-Service-Error-Code
}

var unreadables = []unreadable{
	{name: "error-string", body: `{"error":"x"}`},
	{name: "error-string-with-schema", body: `{"schema":1,"error":"refused"}`},
	{name: "jetstream-api-error", body: `{"error":{"code":503,"err_code":10077,"description":"stream is offline"}}`},
	{name: "array", body: `[1]`},
	{name: "schema-string", body: `{"schema":"1"}`},
	{name: "error-without-code", body: `{"schema":1,"error":{"message":"no code"}}`},
	{name: "header-unknown-code", body: `oops`, code: "some text", st: "500"},
	{name: "header-unknown-code-json", body: `{"schema":1}`, code: "some text", st: "500"},
	{name: "header-no-code", body: ``, st: "500"},
	{name: "empty", body: ``},
}

func respond(m *nats.Msg, u unreadable) {
	r := nats.NewMsg(m.Reply)
	r.Data = []byte(u.body)
	if u.st != "" {
		r.Header.Set("Nats-Service-Error", u.code)
		r.Header.Set("Nats-Service-Error-Code", u.st)
	}
	_ = m.RespondMsg(r)
}

// TestReportAnsweredUnreadablyIsSentAgain (docs/protocol/41-tasks.md
// "Report until a runner answers"; docs/semantics.md §8): a reply the
// worker cannot read as the error envelope — a body of another shape, an
// error header without a protocol code, an empty body — is no answer, so
// the worker sends the report again (api.ReplyError reads it internal)
// instead of acking the task as if a runner had recorded the report.
// Before, every shape below but the empty body was read as a success.
func TestReportAnsweredUnreadablyIsSentAgain(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	w := worker.New(nc, js, worker.WithoutAttemptCheck())
	w.SetRetry(time.Millisecond, 10*time.Millisecond)
	tries := make(map[string]chan int, len(unreadables))
	for _, u := range unreadables {
		u := u
		q := queue("unreadable-" + u.name)
		got := make(chan int, 8)
		tries[u.name] = got
		n := 0
		sub, err := nc.Subscribe(q.ReportSubject(), func(m *nats.Msg) {
			n++
			got <- n
			if n == 1 {
				respond(m, u)
				return
			}
			_ = m.Respond([]byte(`{"schema":1}`))
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		w.Handle(q, func(context.Context, api.Task, worker.Settler) worker.Result {
			return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`)}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for _, u := range unreadables {
		publish(t, js, api.Task{Run: "r-" + u.name, Action: "1/a", Tool: "unreadable-" + u.name, Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1, MaxResultBytes: 1 << 20})
	}
	for _, u := range unreadables {
		for want := 1; want <= 2; want++ {
			select {
			case n := <-tries[u.name]:
				if n != want {
					t.Fatalf("%s: try %d, want %d", u.name, n, want)
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("%s: the report was sent %d time(s), want it sent again after the reply %q", u.name, want-1, u.body)
			}
		}
	}
}

// TestSettlementAnsweredUnreadablyIsUnconfirmed (docs/semantics.md §9;
// docs/protocol/41-tasks.md, the settlement's answers): a settlement whose
// reply the worker cannot read is not recorded as far as the worker
// knows: the Settler answers settle_unconfirmed, never nil, which says
// the run recorded it, with Reason transport (outcome unknown, as a lost
// reply), never a refusal's code, which says nothing was recorded. Before, every shape below but the empty body was
// answered nil.
func TestSettlementAnsweredUnreadablyIsUnconfirmed(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	w := worker.New(nc, js, worker.WithoutAttemptCheck())
	other := queue("settled")
	var current atomic.Pointer[unreadable]
	sub, err := nc.Subscribe(other.SettleSubject(), func(m *nats.Msg) { respond(m, *current.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if _, err := nc.Subscribe(queue("settles").ReportSubject(), func(m *nats.Msg) { _ = m.Respond([]byte(`{"schema":1}`)) }); err != nil {
		t.Fatal(err)
	}
	answers := make(chan []string, 1)
	w.Handle(queue("settles"), func(ctx context.Context, _ api.Task, settle worker.Settler) worker.Result {
		var out []string
		for _, u := range unreadables {
			current.Store(&u)
			err := settle(ctx, api.Settlement{Schema: api.Schema, Run: "other", Action: "1/b", Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`), Queue: &other})
			var we *weft.Error
			if !errors.As(err, &we) || we.Code != weft.CodeSettleUnconfirmed || we.Reason != worker.ReasonTransport {
				out = append(out, fmt.Sprintf("%s: %v, want settle_unconfirmed(transport): the outcome is unknown", u.name, err))
			}
		}
		answers <- out
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "settles", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1, MaxResultBytes: 1 << 20})
	select {
	case out := <-answers:
		for _, o := range out {
			t.Error(o)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the body never settled")
	}
}
