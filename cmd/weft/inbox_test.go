package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// TestCLIInboxListsEveryItem (docs/protocol/50-queries.md: an inbox pages
// by `next`; docs/adr/0020-query-indexes.md): `weft inbox approvals` prints
// every pending approval of an inbox larger than one page (1,010 items;
// the query service answers at most 1,000 a page), not the first 1,000.
func TestCLIInboxListsEveryItem(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	const n = 1010
	req := events.Requirement{Name: "finance", Version: 1}
	var ds []eventlog.Decision
	for i := range n {
		ds = append(ds, eventlog.Decision{Run: fmt.Sprintf("many-%05d", i), At: t0.Add(time.Duration(i) * time.Microsecond), Events: []events.Event{
			events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "x", Runner: "r"},
			events.ModelRequested{Turn: 1},
			events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "a", Name: "pay", Arguments: json.RawMessage(`{}`)}}},
			events.ApprovalRequested{Action: "1/a", Revision: 1, Requirement: req, Why: "policy"},
		}})
	}
	for i, o := range s.Log.AppendBatch(context.Background(), ds) {
		if o.Err != nil {
			t.Fatalf("append %s: %v", ds[i].Run, o.Err)
		}
	}
	// Wait until the last run's approval is projected.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, out, _ := cli(t, "--nats", s.URL, "inbox", "approvals", "--run", ds[n-1].Run)
		if strings.Contains(out, ds[n-1].Run) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last approval was never listed: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errs := cli(t, "--nats", s.URL, "inbox", "approvals", "--json")
	if code != 0 {
		t.Fatalf("inbox approvals: %d %s", code, errs)
	}
	var items []projections.ApprovalItem
	if err := json.Unmarshal([]byte(out), &items); err != nil {
		t.Fatal(err)
	}
	if len(items) != n || items[0].Run != ds[0].Run || items[n-1].Run != ds[n-1].Run {
		t.Fatalf("inbox approvals --json: %d items, want %d", len(items), n)
	}
	_, out, _ = cli(t, "--nats", s.URL, "inbox", "approvals")
	if got := strings.Count(out, "\n"); got != n+1 {
		t.Fatalf("inbox approvals: %d lines, want a header and %d items", got, n)
	}
}

// The first hour: weft inbox approvals shows the whole arguments a person
// approves (the demo's payment's amount came after the first 40
// characters and was cut off).
func TestFirstHour_InboxApprovalsShowsTheWholeArguments(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	args := `{"invoice":"INV-7","payee":"Acme Office Supplies GmbH","amount":1200,"currency":"EUR"}`
	appendRun(t, s.Log, "pay-7",
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice INV-7", Runner: "r1"},
		events.ModelRequested{Turn: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "call_2_1", Name: "send_payment", Arguments: json.RawMessage(args)}}},
		events.ApprovalRequested{Action: "1/call_2_1", Revision: 1, Requirement: events.Requirement{Name: "finance", Version: 1}, Why: "policy"},
	)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, out, errs := cli(t, "--nats", s.URL, "inbox", "approvals")
		if code != 0 && code != exitUnavailable { // the query service may not answer yet
			t.Fatalf("inbox approvals: exit %d: %s", code, errs)
		}
		if code == 0 && strings.Contains(out, "pay-7 ") {
			if !strings.Contains(out, args+"\n") {
				t.Fatalf("inbox approvals does not show the whole arguments %s:\n%s", args, out)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approval was never listed (exit %d):\n%s%s", code, out, errs)
		}
	}
}
