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
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
)

// Issue 11, newcomer item 8: a second weft dev on a store another embedded
// server holds, or on a port that is taken, exits with the documented code
// of a local problem (5, docs/cli.md), saying what to do, not with 1.
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

// Issue 11, newcomer item 8: unknown_agent names the agents and versions
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

// Issue 11, newcomer item 5: a settling tool's body stopped at its
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
		events.ModelReplied{Turn: 1, Kind: model.ReplyToolRequest, Calls: []model.ToolCall{{ID: "call_1_1", Name: "refund", Arguments: json.RawMessage(`{"invoice":"INV-8","amount":45}`)}}, Usage: &model.Usage{InputTokens: 1, OutputTokens: 1}},
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
