package main

import (
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/natstest"
)

// TestCLIActsOnRuns runs `weft dev` (runner, worker, projector) against an
// external server named by --nats — a real nats-server the test starts,
// which weft dev only connects to — and drives runs with the CLI's acting
// commands.
func TestCLIActsOnRuns(t *testing.T) {
	s := natstest.Start(t)
	// weft dev takes the server from --nats (and embeds none); the other
	// commands from NATS_URL.
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	if _, url := startDevCLI(t, "dev", "--nats", s.URL); url != s.URL {
		t.Fatalf("weft dev runs on %s, want the --nats server %s", url, s.URL)
	}

	if code, out, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "cli-7"); code != 0 || !strings.Contains(out, "run cli-7: working") {
		t.Fatalf("start: %d %s %s", code, out, errs)
	}
	if code, _, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "cli-7"); code != exitFailed || !strings.Contains(errs, "already_started") {
		t.Fatalf("start again: %d %s", code, errs)
	}
	waitShow(t, "cli-7", "awaiting_approval")
	out := waitCLI(t, `"action": "2/call_2_1"`, "inbox", "approvals", "--run", "cli-7", "--json")
	if code, _, errs := cli(t, "approve", "cli-7", "2/call_2_1"); code != exitUsage {
		t.Fatalf("approve without credential: %d %s", code, errs)
	}
	// No --revision: the CLI reads the pending one from the run view.
	if code, out, errs := cli(t, "approve", "cli-7", "2/call_2_1", "--approver", "desk", "--credential", "alice"); code != 0 {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	waitShow(t, "cli-7", "status     finished: completed")
	if code, _, errs := cli(t, "approve", "cli-7", "2/call_2_1", "--revision", "1", "--approver", "desk", "--credential", "alice"); code != exitFailed || !strings.Contains(errs, "run_ended") {
		t.Fatalf("approve again: %d %s", code, errs)
	}
	// Without --revision and nothing pending, the CLI asks the server, which
	// says why (run_ended); it never invents a refusal of its own.
	if code, _, errs := cli(t, "reject", "cli-7", "2/call_2_1", "--reason", "late", "--approver", "desk", "--credential", "alice"); code != exitFailed || !strings.Contains(errs, "run_ended") {
		t.Fatalf("reject after the run ended: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "approve", "cli-7", "1/call_1_1", "--approver", "desk", "--credential", "alice"); code != exitFailed || !strings.Contains(errs, "wrong_reference") {
		t.Fatalf("approve an action that never asked: %d %s", code, errs)
	}

	// INV-13's gateway times out after sending: uncertain, then reconciled.
	cli(t, "start", "payment-desk", "pay invoice INV-13", "--run", "cli-13")
	waitShow(t, "cli-13", "effect uncertain: 2/call_2_1")
	if code, _, errs := cli(t, "reconcile", "cli-13", "2/call_2_1"); code != exitUsage {
		t.Fatalf("reconcile without content: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "reconcile", "cli-13", "2/call_2_1", "--unconfirmed", "checking with the bank"); code != 0 {
		t.Fatalf("reconcile: %d %s %s", code, out, errs)
	}
	out = waitShow(t, "cli-13", "status     finished: completed")
	if !strings.Contains(out, "reconciled") {
		t.Fatalf("show after reconcile:\n%s", out)
	}

	// Cancel a run waiting for approval; cancelling again is run_ended.
	cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "cli-cancel")
	waitShow(t, "cli-cancel", "awaiting_approval")
	if code, out, errs := cli(t, "cancel", "cli-cancel", "--reason", "duplicate"); code != 0 {
		t.Fatalf("cancel: %d %s %s", code, out, errs)
	}
	waitShow(t, "cli-cancel", "finished: cancelled")
	if code, _, errs := cli(t, "cancel", "cli-cancel"); code != exitFailed || !strings.Contains(errs, "run_ended") {
		t.Fatalf("cancel again: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "settle", "cli-cancel", "2/call_2_1", "--output", `{"id":"x"}`); code != exitFailed {
		t.Fatalf("settle of a not-settling action: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "cli-13"); code != 0 {
		t.Fatalf("audit verify: %d %s %s", code, out, errs)
	}
}

// waitCLI runs the CLI with args until its output contains want (30 s at
// most): the lists and inboxes follow the stored views eventually, a few
// writes after the view.
func waitCLI(t *testing.T, want string, args ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, errs := cli(t, args...)
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never printed %q:\n%s%s", strings.Join(args, " "), want, out, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitShow polls `weft show run` until its output contains want and the
// projector has stored what it shows.
func waitShow(t *testing.T, run, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, out, _ := cli(t, "show", run)
		// The lists and inboxes the tests read next follow the stored
		// view: wait until show has no note that they lag.
		if strings.Contains(out, want) && !strings.Contains(out, "the lists and inboxes may not have") {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("show %s never showed %q:\n%s", run, want, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
