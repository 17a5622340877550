package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// TestReportOverServerMaxPayload (docs/semantics.md §2 max result bytes; the
// NATS
// server below weft's required max_payload, docs/protocol/10-log.md): a
// result too large for the server's max_payload cannot be reported; the
// worker does not retry it forever (the action would hang until its tool
// timeout) but reports the attempt uncertain at once, saying why.
func TestReportOverServerMaxPayload(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t) // a plain nats-server: max_payload 1 MiB
	got := make(chan api.Report, 4)
	sub, err := nc.Subscribe(queue("big").ReportSubject(), func(m *nats.Msg) {
		var rep api.Report
		_ = json.Unmarshal(m.Data, &rep)
		got <- rep
		_ = m.Respond([]byte(`{"schema":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	w := worker.New(nc, js, worker.WithoutAttemptCheck())
	big := json.RawMessage(`"` + strings.Repeat("x", 1<<20+100) + `"`)
	w.Handle(queue("big"), func(context.Context, api.Task, worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeOutput, Content: big}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "big", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1, MaxResultBytes: 2 << 20})
	select {
	case rep := <-got:
		if rep.Outcome != api.OutcomeUncertain || len(rep.Content) != 0 || !strings.Contains(rep.Evidence, "payload_too_large") || !strings.Contains(rep.Evidence, "max_payload") {
			t.Fatalf("report = %s %q, want uncertain naming payload_too_large and max_payload", rep.Outcome, rep.Evidence)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no report reached the runtime")
	}
}

// TestReportOverFieldLimit (docs/protocol/40-commands.md
// "Limits"; docs/semantics.md §3: a body that ran may have acted): a definite
// failure whose message is over the command API's field limit is refused
// payload_too_large; the worker reports the attempt uncertain, saying why,
// instead of dropping the report (the action would hang until its tool
// timeout).
func TestReportOverFieldLimit(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	got := make(chan api.Report, 4)
	sub, err := nc.Subscribe(queue("chatty").ReportSubject(), func(m *nats.Msg) {
		var rep api.Report
		_ = json.Unmarshal(m.Data, &rep)
		got <- rep
		if len(rep.Message) > api.MaxText {
			_ = m.Respond([]byte(`{"schema":1,"error":{"code":"payload_too_large","message":"message of many bytes is over its limit"}}`))
			return
		}
		_ = m.Respond([]byte(`{"schema":1}`))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	w := worker.New(nc, js, worker.WithoutAttemptCheck())
	w.Handle(queue("chatty"), func(context.Context, api.Task, worker.Settler) worker.Result {
		return worker.Result{Outcome: api.OutcomeExplain, Message: strings.Repeat("x", api.MaxText+1)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "chatty", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1, MaxResultBytes: 2 << 20})
	for i := 0; i < 2; i++ {
		select {
		case rep := <-got:
			if i == 0 {
				continue // the refused explain
			}
			if rep.Outcome != api.OutcomeUncertain || rep.Message != "" || !strings.Contains(rep.Evidence, "payload_too_large") {
				t.Fatalf("second report = %s %q, want uncertain naming payload_too_large", rep.Outcome, rep.Evidence)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("report %d never reached the runtime", i+1)
		}
	}
}
