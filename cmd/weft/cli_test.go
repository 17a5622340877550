package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func appendRun(t *testing.T, log *eventlog.Log, run string, evs ...events.Event) {
	t.Helper()
	appendRunAt(t, log, run, t0, evs...)
}

// appendRunAt appends evs to run, one decision each, a second apart from at.
func appendRunAt(t *testing.T, log *eventlog.Log, run string, at time.Time, evs ...events.Event) {
	t.Helper()
	ctx := context.Background()
	head, err := log.Head(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if _, head, err = log.Append(ctx, run, head, at.Add(time.Duration(i)*time.Second), e); err != nil {
			t.Fatal(err)
		}
	}
}

// weft runs the CLI and returns its exit code, stdout and stderr.
func cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return exitCode(err), out.String(), errb.String() + errString(err)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func setup(t *testing.T) *natstest.Server {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	req := events.Requirement{Name: "finance", Version: 1}
	exp := t0.Add(time.Hour)
	appendRun(t, s.Log, "pay-42",
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice 42", Runner: "r1"},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
			{ID: "c1", Name: "pay_invoice", Arguments: json.RawMessage(`{"invoice":42}`)},
			{ID: "c2", Name: "wire", Arguments: json.RawMessage(`{"to":"acme"}`)}}, Usage: &events.Usage{InputTokens: 10, OutputTokens: 3}},
		events.CallValidated{Action: "1/c1", Turn: 1, CallID: "c1", Tool: "pay_invoice", Outcome: events.CallValid},
		events.CallValidated{Action: "1/c2", Turn: 1, CallID: "c2", Tool: "wire", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/c1", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/c1", Revision: 1, Requirement: req, Expires: &exp, Why: events.AskPolicy},
		events.PolicyDecided{Action: "1/c2", Context: "model", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/c2", Why: events.QueuedAllowed, Config: events.ToolConfig{Timeout: 1000, MaxAttempts: 1}},
		events.AttemptFenced{Action: "1/c2", Tool: "wire", Attempt: 1, Incarnation: 1, Timeout: 1000, MaxAttempts: 1},
		events.AttemptReported{Action: "1/c2", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "bank timed out after the request was sent"},
	)
	// Wait until the query service sees the run in the list.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, out, _ := cli(t, "--nats", s.URL, "runs")
		if strings.Contains(out, "suspended") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run never listed: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Fatalf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

func TestCLIQueries(t *testing.T) {
	s := setup(t)
	code, out, errs := cli(t, "--nats", s.URL, "runs", "--status", "suspended")
	if code != 0 {
		t.Fatalf("runs: %d %s", code, errs)
	}
	contains(t, "runs", out, "RUN", "pay-42", "suspended", "payment-desk@1")

	t.Setenv("NATS_URL", s.URL)
	code, out, errs = cli(t, "show", "pay-42")
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	contains(t, "show", out, "status     suspended", "1/c1", "awaiting_approval", "1/c2", "uncertain", "bank timed out",
		"weft approve pay-42 1/c1 --revision 1", "weft reconcile pay-42 1/c2")

	code, out, _ = cli(t, "events", "pay-42")
	contains(t, "events", out, "   1  2026-11-30 10:00:00.000  run_started", "approval_requested", "attempt_reported")
	if n := strings.Count(out, "\n"); code != 0 || n != 11 {
		t.Fatalf("events: code %d, %d lines", code, n)
	}
	_, out, _ = cli(t, "events", "pay-42", "--json")
	if strings.Count(out, "\n") != 11 || !strings.HasPrefix(out, `{"id":`) {
		t.Fatalf("events --json:\n%s", out)
	}

	_, out, _ = cli(t, "inbox", "approvals")
	contains(t, "inbox approvals", out, "pay-42", "1/c1", "pay_invoice", `{"invoice":42}`, "finance v1", "2026-11-30T11:00:00Z")
	_, out, _ = cli(t, "inbox", "uncertain", "--json")
	contains(t, "inbox uncertain", out, `"evidence": "bank timed out after the request was sent"`, `"age_ms"`)

	if code, _, errs := cli(t, "show", "nope"); code != exitFailed || !strings.Contains(errs, "unknown_run") {
		t.Fatalf("show nope: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "runs", "--status", "sleeping"); code != exitFailed || !strings.Contains(errs, "bad_filter") {
		t.Fatalf("bad filter: %d %s", code, errs)
	}
	if code, _, _ := cli(t, "inbox", "everything"); code != exitUsage {
		t.Fatalf("bad inbox: %d", code)
	}
	if code, _, _ := cli(t, "frobnicate"); code != exitUsage {
		t.Fatalf("unknown command: %d", code)
	}
	if code, out, _ := cli(t, "show", "--help"); code != exitOK || out != "" {
		t.Fatalf("show --help: %d %q", code, out)
	}
}

func TestCLIAuditExportVerifyAndTamper(t *testing.T) {
	s := setup(t)
	t.Setenv("NATS_URL", s.URL)
	if code, out, errs := cli(t, "audit", "verify", "pay-42"); code != 0 || !strings.Contains(out, "ok: run pay-42, 11 events") {
		t.Fatalf("verify live: %d %s %s", code, out, errs)
	}
	path := filepath.Join(t.TempDir(), "pay-42.jsonl")
	if code, _, errs := cli(t, "audit", "export", "pay-42", "-o", path); code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", path); code != 0 || !strings.Contains(out, "ok:") {
		t.Fatalf("verify file: %d %s %s", code, out, errs)
	}
	b, _ := os.ReadFile(path)
	i := bytes.Index(b, []byte("acme"))
	b[i] = 'A' // event 3, the model's reply
	os.WriteFile(path, b, 0o644)
	code, _, errs := cli(t, "audit", "verify", "--file", path)
	if code != exitAudit || !strings.Contains(errs, "event 3 (") || !strings.Contains(errs, "model_replied") {
		t.Fatalf("tampered: %d %s", code, errs)
	}
}

func TestCLIRebuild(t *testing.T) {
	s := setup(t)
	code, out, errs := cli(t, "--nats", s.URL, "rebuild")
	if code != 0 || !strings.Contains(out, "rebuilt every read model up to stream sequence 11") || !strings.Contains(errs, "100%") {
		t.Fatalf("rebuild: %d %s %s", code, out, errs)
	}
}

// TestCLIEventsWithoutProjector: events reads the log directly when no query
// service answers.
func TestCLIEventsWithoutProjector(t *testing.T) {
	s := natstest.Start(t)
	appendRun(t, s.Log, "lone", events.RunStarted{Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "x", Runner: "r"})
	code, out, errs := cli(t, "--nats", s.URL, "events", "lone")
	if code != 0 || !strings.Contains(out, "run_started agent=a@1") {
		t.Fatalf("events: %d %s %s", code, out, errs)
	}
	if code, _, errs := cli(t, "--nats", s.URL, "events", "nobody"); code != exitFailed || !strings.Contains(errs, "unknown_run") {
		t.Fatalf("events nobody: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "--nats", s.URL, "show", "lone"); code != exitUnavailable {
		t.Fatalf("show without a projector: %d %s", code, errs)
	}
}

// TestHelpShowsExamplesAndExitCodes: `weft --help` and `weft <command>
// --help` exit 0 and print examples and the exit codes of docs/cli.md.
func TestHelpShowsExamplesAndExitCodes(t *testing.T) {
	code, out, _ := cli(t, "--help")
	if code != exitOK {
		t.Fatalf("weft --help: exit %d", code)
	}
	contains(t, "weft --help", out, "Examples:", "Exit codes:", "4 audit found a problem")
	for _, c := range commands() {
		code, _, errs := cli(t, c.name, "--help")
		if code != exitOK {
			t.Errorf("weft %s --help: exit %d", c.name, code)
		}
		contains(t, "weft "+c.name+" --help", errs, "weft "+c.name, "Examples:\n  weft ", "Exit codes:", "2 bad command line")
	}
}
