package protocoltest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// view is the part of the run view (docs/protocol/50-queries.md) the test
// reads.
type view struct {
	Status    string   `json:"status"`
	Approvals []string `json:"approvals"`
	Uncertain []string `json:"uncertain"`
	Outcome   *struct {
		Kind   string `json:"kind"`
		Answer string `json:"answer"`
	} `json:"outcome"`
	Actions []struct {
		ID       string `json:"id"`
		Tool     string `json:"tool"`
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
		Result   string `json:"result"`
		Evidence string `json:"evidence"`
		Pending  *struct {
			Revision int `json:"revision"`
		} `json:"pending"`
		Approvals []struct {
			Answer   string `json:"answer"`
			Reviewer string `json:"reviewer"`
			Verifier string `json:"verifier"`
		} `json:"approvals"`
	} `json:"actions"`
}

// task is a tool task (docs/protocol/41-tasks.md) as the worker reads it.
type task struct {
	Run         string          `json:"run"`
	Action      string          `json:"action"`
	Tool        string          `json:"tool"`
	Attempt     int             `json:"attempt"`
	Incarnation int             `json:"incarnation"`
	Arguments   json.RawMessage `json:"arguments"`
	Reviewer    string          `json:"reviewer"`
	Agent       string          `json:"agent"`
	Version     string          `json:"version"`
	Claim       string          `json:"claim"`
}

// runView reads the run view with `nats req weft.api.query.run`.
func (d *dev) runView(t *testing.T, run string) view {
	t.Helper()
	raw := d.nats(t, "req", "--raw", "weft.api.query.run", fmt.Sprintf(`{"schema":1,"run":%q}`, run))
	var r struct {
		View view `json:"view"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &r); err != nil {
		t.Fatalf("run view: %v\n%s", err, raw)
	}
	return r.View
}

// waitView polls the run view until ok accepts it.
func (d *dev) waitView(t *testing.T, run, what string, ok func(view) bool) view {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := d.runView(t, run)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s never got %s: %+v", run, what, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReq sends body on subject with the nats CLI until the reply contains
// want (30 s at most): the lists and inboxes follow the log eventually.
func (d *dev) waitReq(t *testing.T, subject, body, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := d.nats(t, "req", "--raw", subject, body)
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s never answered %q: %s", subject, body, want, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestProtocolWithNatsCLI drives a payment-desk run through its whole life
// with the official nats CLI as the only client, exactly as
// docs/protocol.md tells a non-Go user: start the run, approve the payment,
// act as the send_payment tool worker (take the task from its work queue,
// report an uncertain effect), reconcile it, and read the run view and its
// history.
func TestProtocolWithNatsCLI(t *testing.T) {
	d := startDev(t, "--external-tool", "send_payment")

	// Start: "pay invoice INV-7" (1200 EUR) looks the invoice up, then asks
	// to pay it, which needs the finance approval.
	reply := d.call(t, "weft.api.start", `{"schema":1,"run":"proto-7","agent":"payment-desk","input":"pay invoice INV-7"}`)
	if !strings.Contains(reply, `"run":"proto-7"`) {
		t.Fatalf("start reply: %s", reply)
	}
	v := d.waitView(t, "proto-7", "a pending approval", func(v view) bool { return v.Status == "suspended" && len(v.Approvals) == 1 })
	action := v.Approvals[0]
	var revision int
	for _, a := range v.Actions {
		if a.ID == action {
			if a.Tool != "send_payment" || a.Pending == nil {
				t.Fatalf("approval for %+v", a)
			}
			revision = a.Pending.Revision
		}
	}
	// The approvals inbox lists it too, once the projector stored it (the
	// run query answers at the log's head; the inboxes follow).
	d.waitReq(t, "weft.api.query.approvals", `{"run":"proto-7"}`, `"action":"`+action+`"`)

	// Approve with the demo approver's credential.
	d.call(t, "weft.api.approve", fmt.Sprintf(`{"schema":1,"command_id":"proto-approve-1","run":"proto-7","action":%q,"revision":%d,"approver":"desk","credential":"alice"}`, action, revision))

	// Act as payment-desk@1's send_payment worker: the durable consumer of
	// that agent identity's work queue, then take the task.
	if _, err := d.natsErr("consumer", "info", "WEFT_TASKS", "weft_task_payment-desk@1@send_payment"); err != nil {
		// Exactly as docs/protocol/41-tasks.md creates it.
		d.nats(t, "consumer", "add", "WEFT_TASKS", "weft_task_payment-desk@1@send_payment", "--filter", "weft.task.payment-desk.1.send_payment",
			"--ack", "explicit", "--wait", "3s", "--max-deliver=-1", "--pull", "--deliver", "all", "--replay", "instant", "--max-pending", "1000", "--defaults")
	}
	raw := d.nats(t, "consumer", "next", "WEFT_TASKS", "weft_task_payment-desk@1@send_payment", "--raw", "--wait", "20s")
	var tk task
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &tk); err != nil {
		t.Fatalf("task: %v\n%s", err, raw)
	}
	if tk.Run != "proto-7" || tk.Action != action || tk.Tool != "send_payment" || tk.Attempt != 1 || tk.Reviewer != "alice" ||
		tk.Agent != "payment-desk" || tk.Version != "1" || !strings.Contains(string(tk.Arguments), `"amount":1200`) {
		t.Fatalf("task: %+v", tk)
	}
	// Claim the attempt before the body would start (create-only): the
	// claim is the key the task names; a second create is refused, which
	// is how a worker knows never to start the body again.
	d.nats(t, "kv", "create", "weft_claims", tk.Claim, "cli", "--ttl", "40m")
	if _, err := d.natsErr("kv", "create", "weft_claims", tk.Claim, "cli-2"); err == nil {
		t.Fatalf("a second claim of %s was accepted", tk.Claim)
	}
	v = d.runView(t, "proto-7")
	if v.Status != "working" {
		t.Fatalf("while the body runs the run is %s", v.Status)
	}

	// The body sent the payment but lost the bank's answer: report the
	// effect uncertain.
	d.call(t, "weft.api.report", fmt.Sprintf(`{"schema":1,"command_id":"report/proto-7/%s/%d/%d","run":"proto-7","action":%q,"attempt":%d,"incarnation":%d,"outcome":"uncertain","evidence":"the bank did not answer after the request was sent"}`,
		tk.Action, tk.Attempt, tk.Incarnation, tk.Action, tk.Attempt, tk.Incarnation))
	v = d.waitView(t, "proto-7", "an uncertain effect", func(v view) bool { return v.Status == "suspended" && len(v.Uncertain) == 1 })
	if v.Uncertain[0] != action {
		t.Fatalf("uncertain %v", v.Uncertain)
	}
	d.waitReq(t, "weft.api.query.uncertain", `{"run":"proto-7"}`, "the bank did not answer")

	// A person checked with the bank: the payment went through.
	d.call(t, "weft.api.reconcile", fmt.Sprintf(`{"schema":1,"command_id":"proto-reconcile-1","run":"proto-7","action":%q,"content":{"id":"PAY-7","status":"sent"}}`, action))
	v = d.waitView(t, "proto-7", "its outcome", func(v view) bool { return v.Status == "finished" })
	if v.Outcome == nil || v.Outcome.Kind != "completed" || !strings.Contains(v.Outcome.Answer, "PAY-7") {
		t.Fatalf("outcome %+v", v.Outcome)
	}
	for _, a := range v.Actions {
		if a.ID != action {
			continue
		}
		if a.State != "reconciled" || a.Attempts != 1 || a.Result != `{"id":"PAY-7","status":"sent"}` ||
			a.Evidence != "the bank did not answer after the request was sent" ||
			len(a.Approvals) != 1 || a.Approvals[0].Answer != "approve" || a.Approvals[0].Reviewer != "alice" || a.Approvals[0].Verifier != "desk" {
			t.Fatalf("paid action %+v", a)
		}
	}

	// The history tells the same story, hash-chained.
	hist := d.nats(t, "req", "--raw", "weft.api.query.history", `{"schema":1,"run":"proto-7"}`)
	for _, ev := range []string{"run_started", "approval_requested", "approval_answered", "attempt_fenced", "attempt_reported", "reconciled", "run_finished"} {
		if !strings.Contains(hist, `"type":"`+ev+`"`) {
			t.Fatalf("history lacks %s:\n%s", ev, hist)
		}
	}
	// And the KV read model is readable as documented.
	kv := d.nats(t, "kv", "get", "weft_views", "proto-7", "--raw")
	if !strings.Contains(kv, `"status":"finished"`) {
		t.Fatalf("weft_views/proto-7: %s", kv)
	}
}

// call sends a command with `nats req` and fails the test on an error reply
// (Nats-Service-Error header); it returns the reply body.
func (d *dev) call(t *testing.T, subject, body string) string {
	t.Helper()
	out := d.nats(t, "req", subject, body)
	if strings.Contains(out, "Nats-Service-Error") {
		t.Fatalf("nats req %s %s: error reply:\n%s", subject, body, out)
	}
	return out
}
