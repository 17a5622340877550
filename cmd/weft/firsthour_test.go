package main

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
)

// A second weft dev on a store another embedded
// server holds, or on a port that is taken, exits with the documented code
// of a local problem (5, docs/cli.md), saying what to do, not with 1: for
// the store, weft dev --nats or another --data (weft dev starts its own
// server even with NATS_URL set).
func TestDevLocalProblemsExitLocal(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())
	code, out, errs := cli(t, "dev", "--listen", "0", "--data", dir)
	if code != exitLocal || !strings.Contains(errs, "store dir in use") || strings.Contains(out, "Weft dev is running") {
		t.Errorf("store in use: exit %d, want %d:\n%s%s", code, exitLocal, out, errs)
	}
	// weft dev starts its own server whatever NATS_URL says: its remedy is
	// --nats (or another --data), never NATS_URL alone.
	if !strings.Contains(errs, "weft dev --nats <its url>") || !strings.Contains(errs, "another --data") {
		t.Errorf("store in use: the advice names neither --nats nor --data:\n%s", errs)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	code, out, errs = cli(t, "dev", "--listen", port, "--data", t.TempDir())
	if code != exitLocal || !strings.Contains(errs, "port in use") || !strings.Contains(errs, "--listen") {
		t.Errorf("port taken: exit %d, want %d:\n%s%s", code, exitLocal, out, errs)
	}
	if code, _, errs := cli(t, "audit", "verify", "--file", dir+"/no-such-file.jsonl"); code != exitLocal {
		t.Errorf("audit verify of a missing file: exit %d, want %d: %s", code, exitLocal, errs)
	}
}

// The unknown_agent answer names the agents and versions
// the runner serves; and the help spells multi-letter flags --flag, as the
// examples and docs do.
func TestUnknownAgentListsServedAgents(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	_, url := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir())
	t.Setenv("NATS_URL", url)
	code, _, errs := cli(t, "start", "payment-dsk", "pay invoice INV-7")
	if code != exitFailed || !strings.Contains(errs, `unknown_agent: no runner serves agent "payment-dsk"; this runner serves payment-desk@1`) {
		t.Fatalf("start of an unknown agent: exit %d: %s", code, errs)
	}
	code, _, errs = cli(t, "start", "payment-desk", "x", "--version", "2")
	if code != exitFailed || !strings.Contains(errs, `agent "payment-desk" version "2"; this runner serves payment-desk@1`) {
		t.Fatalf("start of an unknown version: exit %d: %s", code, errs)
	}
	code, _, errs = cli(t, "start", "pay desk", "x")
	if code != exitFailed || !strings.Contains(errs, "invalid_name") {
		t.Fatalf("start of a malformed agent name: exit %d: %s", code, errs)
	}
}

func TestHelpSpellsLongFlagsWithTwoDashes(t *testing.T) {
	_, _, errs := cli(t, "approve", "--help")
	for _, want := range []string{"\n  --approver string", "\n  --revision int", "\n  --json\n"} {
		if !strings.Contains(errs, want) {
			t.Errorf("approve --help lacks %q:\n%s", want, errs)
		}
	}
	if strings.Contains(errs, "\n  -approver") {
		t.Errorf("approve --help still spells -approver:\n%s", errs)
	}
	_, _, errs = cli(t, "audit", "--help")
	if !strings.Contains(errs, "\n  -o string") {
		t.Errorf("audit --help: a one-letter flag keeps one dash:\n%s", errs)
	}
}

// A settling tool's body stopped at its
// timeout is its normal path: show says the run waits for a settlement
// until the window closes, and the timeline explains the attempt_lost.
func TestShowSaysWaitingForASettlement(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	by := t0.Add(32 * time.Second)
	appendRun(t, s.Log, "refund-8",
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "refund invoice INV-8", Runner: "r1"},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "call_1_1", Name: "refund", Arguments: json.RawMessage(`{"invoice":"INV-8","amount":45}`)}}, Usage: &events.Usage{InputTokens: 1, OutputTokens: 1}},
		events.CallValidated{Action: "1/call_1_1", Turn: 1, CallID: "call_1_1", Tool: "refund", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/call_1_1", Context: "model", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/call_1_1", Why: events.QueuedAllowed, Config: events.ToolConfig{Timeout: 2000, MaxAttempts: 1, SettleWithin: 30000}},
		events.AttemptFenced{Action: "1/call_1_1", Tool: "refund", Attempt: 1, Incarnation: 1, Timeout: 2000, MaxAttempts: 1, SettleWithin: 30000},
		events.AttemptLost{Action: "1/call_1_1", Attempt: 1, Cause: events.CauseTimedOut, Evidence: "attempt 1 timed out after 2000 ms", Next: events.NextSettle, SettleBy: &by},
	)
	t.Setenv("NATS_URL", s.URL)
	out := waitShow(t, "refund-8", "settling")
	contains(t, "show", out, "settling  1         waiting for a settlement until 2026-11-30T10:00:32Z",
		"\nwaiting for a settlement until 2026-11-30T10:00:32Z: 1/call_1_1 refund (its body stopped: attempt 1 timed out after 2000 ms)")
	_, out, _ = cli(t, "events", "refund-8")
	contains(t, "events", out, "next=settle", "(waiting for a settlement until 2026-11-30T10:00:32Z)")
}

// An action reconciled as
// unconfirmed is an open question (weft inbox questions, weft show) while
// the run goes on and after it finished; weft resolve records the final
// truth for audit — the run stays as it was — once; a definite
// reconciliation is no open question.
func TestResolveAnOpenQuestion(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	_, url := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir())
	t.Setenv("NATS_URL", url)
	for _, run := range []string{"q-13", "q-13b"} {
		if code, _, errs := cli(t, "start", "payment-desk", "pay invoice INV-13", "--run", run); code != 0 {
			t.Fatalf("start %s: %d %s", run, code, errs)
		}
		waitShow(t, run, "effect uncertain: 2/call_2_1")
	}
	if code, _, errs := cli(t, "resolve", "q-13", "2/call_2_1", "--output", `{"id":"PAY-13","status":"sent"}`); code != exitFailed || !strings.Contains(errs, "not_resolvable(uncertain)") {
		t.Fatalf("resolve an uncertain action: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "reconcile", "q-13", "2/call_2_1", "--unconfirmed", "checking with the bank", "--by", "alice"); code != 0 {
		t.Fatalf("reconcile: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "reconcile", "q-13b", "2/call_2_1", "--output", `{"id":"PAY-13B","status":"sent"}`); code != 0 {
		t.Fatalf("reconcile q-13b: %d %s", code, errs)
	}
	show := waitShow(t, "q-13", "status     finished: completed")
	contains(t, "show", show, `open question: 2/call_2_1 send_payment was reconciled unconfirmed ("checking with the bank"); the run went on`, "weft resolve q-13 2/call_2_1 --output")
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, out, _ = cli(t, "inbox", "questions")
		// The question's item is rewritten when the run finishes, a few
		// writes after its view.
		if (strings.Contains(out, "q-13 ") && strings.Contains(out, "finished")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	contains(t, "inbox questions", out, "q-13 ", "2/call_2_1", "send_payment", `"invoice":"INV-13"`, "checking with the bank", "finished")
	if strings.Contains(out, "q-13b") {
		t.Fatalf("a definite reconciliation is listed as an open question:\n%s", out)
	}
	_, before, _ := cli(t, "show", "q-13", "--json")

	if code, _, errs := cli(t, "resolve", "q-13", "2/call_2_1", "--output", `{"foo":1}`); code != exitFailed || !strings.Contains(errs, "invalid_content") {
		t.Fatalf("resolve with an output the schema refuses: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "resolve", "q-13", "2/call_2_1"); code != exitUsage {
		t.Fatalf("resolve without content: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "resolve", "q-13", "2/call_2_1", "--output", `{"id":"PAY-13","status":"sent"}`, "--by", "bob"); code != 0 || !strings.Contains(out, "run q-13: finished") {
		t.Fatalf("resolve: %d %s %s", code, out, errs)
	}
	show = waitShow(t, "q-13", "resolved: 2/call_2_1")
	contains(t, "show after resolve", show, `resolved: 2/call_2_1 send_payment: output {"id":"PAY-13","status":"sent"} by bob (unverified) at `, "status     finished: completed")
	if strings.Contains(show, "open question:") {
		t.Fatalf("still an open question after resolve:\n%s", show)
	}
	_, after, _ := cli(t, "show", "q-13", "--json")
	for _, field := range []string{`"status": "finished"`, `"turns": 3`, `"result": "{\"unconfirmed\":\"checking with the bank\"}"`} {
		if !strings.Contains(before, field) || !strings.Contains(after, field) {
			t.Errorf("resolve changed the run: %s\nbefore:\n%s\nafter:\n%s", field, before, after)
		}
	}
	if code, _, errs := cli(t, "resolve", "q-13", "2/call_2_1", "--error", "never mind"); code != exitFailed || !strings.Contains(errs, "already_resolved(output)") {
		t.Fatalf("resolve twice: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "resolve", "q-13b", "2/call_2_1", "--error", "never mind"); code != exitFailed || !strings.Contains(errs, "not_resolvable(output)") {
		t.Fatalf("resolve a definite reconciliation: %d %s", code, errs)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, out, _ = cli(t, "inbox", "questions")
		if !strings.Contains(out, "q-13") || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(out, "q-13") {
		t.Fatalf("resolved question still listed:\n%s", out)
	}
	_, out, _ = cli(t, "events", "q-13")
	contains(t, "events", out, `resolved action=2/call_2_1 kind=output content={"id":"PAY-13","status":"sent"} by=bob`)
	if code, out, errs := cli(t, "audit", "verify", "q-13"); code != 0 {
		t.Fatalf("audit verify: %d %s %s", code, out, errs)
	}
}
