package protocoltest

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

// TestQueriesWithNatsCLI reads the read models exactly as
// docs/protocol/50-queries.md tells a non-Go user: nats kv get on the
// buckets and nats req on the weft-query endpoints, including an error
// reply. The log is written with the Go event log (the command API part is
// TestProtocolWithNatsCLI's).
func TestQueriesWithNatsCLI(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })

	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	req := events.Requirement{Name: "finance", Version: 1}
	head, _ := s.Log.Head(ctx, "pay-42")
	for i, e := range []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice 42", Runner: "r1"},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "call_1", Name: "pay_invoice", Arguments: json.RawMessage(`{"invoice":42}`)}}},
		events.CallValidated{Action: "1/call_1", Turn: 1, CallID: "call_1", Tool: "pay_invoice", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/call_1", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/call_1", Revision: 1, Requirement: req, Why: events.AskPolicy},
	} {
		var err error
		if _, head, err = s.Log.Append(ctx, "pay-42", head, at.Add(time.Duration(i)*time.Second), e); err != nil {
			t.Fatal(err)
		}
	}
	d := &dev{url: s.URL}

	// The checkpoint reaches the last message.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := d.natsErr("kv", "get", "weft_projector", "checkpoint", "--raw")
		if strings.Contains(out, `"seq":6`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoint: %s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	var view struct {
		Status    string   `json:"status"`
		Approvals []string `json:"approvals"`
	}
	raw := d.nats(t, "kv", "get", "weft_views", "pay-42", "--raw")
	if err := json.Unmarshal([]byte(raw), &view); err != nil || view.Status != "suspended" || len(view.Approvals) != 1 {
		t.Fatalf("kv view: %v %s", err, raw)
	}
	item := d.nats(t, "kv", "get", "weft_inbox_approvals", "pay-42.1=2Fcall_1", "--raw")
	if !strings.Contains(item, `"revision":1`) || !strings.Contains(item, `"tool":"pay_invoice"`) {
		t.Fatalf("kv approval item: %s", item)
	}

	var reply struct {
		View struct {
			Status  string `json:"status"`
			Actions []struct {
				ID      string `json:"id"`
				State   string `json:"state"`
				Pending *struct {
					Revision int `json:"revision"`
				} `json:"pending"`
			} `json:"actions"`
		} `json:"view"`
	}
	raw = d.nats(t, "req", "weft.api.query.run", `{"run":"pay-42"}`, "--raw")
	if err := json.Unmarshal([]byte(raw), &reply); err != nil || reply.View.Status != "suspended" || len(reply.View.Actions) != 1 ||
		reply.View.Actions[0].State != "awaiting_approval" || reply.View.Actions[0].Pending == nil || reply.View.Actions[0].Pending.Revision != 1 {
		t.Fatalf("query run: %v %s", err, raw)
	}
	// The list and the inbox need the service's watch to catch up.
	for {
		raw = d.nats(t, "req", "weft.api.query.approvals", "", "--raw")
		if strings.Contains(raw, `"action":"1/call_1"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("approvals inbox: %s", raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	raw = d.nats(t, "req", "weft.api.query.list", `{"status":"suspended"}`, "--raw")
	if !strings.Contains(raw, `"run":"pay-42"`) {
		t.Fatalf("list: %s", raw)
	}
	raw = d.nats(t, "req", "weft.api.query.history", `{"run":"pay-42","after":4}`, "--raw")
	if !strings.Contains(raw, `"type":"policy_decided"`) || !strings.Contains(raw, `"type":"approval_requested"`) || strings.Contains(raw, `"type":"run_started"`) {
		t.Fatalf("history: %s", raw)
	}
	// An error reply: the code is a header and in the body.
	out := d.nats(t, "req", "weft.api.query.run", `{"run":"nope"}`)
	if !strings.Contains(out, "Nats-Service-Error-Code: 404") || !strings.Contains(out, "Nats-Service-Error: unknown_run") || !strings.Contains(out, `"code":"unknown_run"`) {
		t.Fatalf("error reply: %s", out)
	}
	out = d.nats(t, "micro", "info", "weft-query")
	for _, ep := range []string{"weft.api.query.run", "weft.api.query.list", "weft.api.query.approvals", "weft.api.query.uncertain", "weft.api.query.history"} {
		if !strings.Contains(out, ep) {
			t.Fatalf("micro info lacks %s:\n%s", ep, out)
		}
	}
}
