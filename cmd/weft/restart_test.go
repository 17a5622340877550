package main

import (
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/natstest"
)

// TestSemantics14_WeftRestart drives docs/semantics.md §14 with the CLI
// against `weft dev` on a real server: a restart of a live run is refused
// run_not_finished; the finished run (lookup, approved payment, report)
// restarted from turn 3 completes with no attempt of its own — the payment
// is not made again, its result is in the copied transcript — and show
// says where it came from, show of the finished run lists it; its log
// verifies.
func TestSemantics14_WeftRestart(t *testing.T) {
	s := natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	startDevCLI(t, "dev", "--nats", s.URL)

	cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "cli-restart")
	waitShow(t, "cli-restart", "awaiting_approval")
	if code, _, errs := cli(t, "restart", "cli-restart", "--from-turn", "2", "--run", "cli-fork"); code != exitFailed || !strings.Contains(errs, "run_not_finished") {
		t.Fatalf("restart of a live run: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "approve", "cli-restart", "2/call_2_1", "--approver", "desk", "--credential", "alice"); code != 0 {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	waitShow(t, "cli-restart", "status     finished: completed")
	if code, _, errs := cli(t, "restart", "cli-restart", "--run", "cli-fork"); code == 0 || !strings.Contains(errs, "--from-turn") {
		t.Fatalf("restart without --from-turn: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "restart", "cli-restart", "--from-turn", "3", "--run", "cli-fork"); code != 0 || !strings.Contains(out, "cli-fork") {
		t.Fatalf("restart: %d %s %s", code, out, errs)
	}
	out := waitShow(t, "cli-fork", "status     finished: completed")
	if !strings.Contains(out, "forked     from cli-restart before turn 3") {
		t.Fatalf("show of the restarted run:\n%s", out)
	}
	code, evs, errs := cli(t, "events", "cli-fork")
	if code != 0 || !strings.Contains(evs, "run_forked from=cli-restart") || strings.Contains(evs, "attempt_fenced") || !strings.Contains(evs, "model_requested turn=3") {
		t.Fatalf("events of the restarted run (%d %s):\n%s", code, errs, evs)
	}
	// The parent's view links its fork (the projector's index of forks).
	waitShow(t, "cli-restart", "fork       cli-fork from turn 3")
	if code, out, errs := cli(t, "audit", "verify", "cli-fork"); code != 0 {
		t.Fatalf("audit verify of the restarted run: %d %s %s", code, out, errs)
	}
}
