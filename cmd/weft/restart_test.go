package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/natstest"
)

// TestSemantics14_WeftRestart drives docs/semantics.md §14 with the CLI
// against `weft dev` on a real server: a restart of a live run is refused
// run_not_finished; the finished run (lookup, approved payment, report)
// restarted from turn 3 completes with no attempt of its own — the payment
// is not made again, its result is in the copied transcript — and show
// says where it came from, show of the finished run lists it; its log
// verifies, with its link to the parent (the parent's chain hash the fork
// recorded) checked against the parent's log, and against the parent in
// an export that holds both; an export of the child alone says the link
// is unchecked.
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
	// The fork records the parent's chain hash at the version it read;
	// verify checks it against the parent's log (and, from files, against
	// the parent when the file holds it).
	code, out, errs = cli(t, "audit", "verify", "cli-fork")
	if code != 0 || !strings.Contains(out, "fork: from cli-restart at version ") || !strings.Contains(out, "the link holds") {
		t.Fatalf("audit verify of the restarted run does not check its link to the parent: %d\n%s%s", code, out, errs)
	}
	dir := t.TempDir()
	child, both := filepath.Join(dir, "child.jsonl"), filepath.Join(dir, "both.jsonl")
	if code, _, errs := cli(t, "audit", "export", "cli-fork", "-o", child); code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", child); code != 0 || !strings.Contains(out, "note: fork: from cli-restart at version ") || !strings.Contains(out, "unchecked: the parent's history was not given") {
		t.Fatalf("verify of the child's export alone: %d\n%s%s", code, out, errs)
	}
	until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if code, _, errs := cli(t, "audit", "export", "--since", "2020-01-01", "--until", until, "-o", both); code != 0 {
		t.Fatalf("export of the range: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", both); code != 0 || !strings.Contains(out, "fork: from cli-restart at version ") || !strings.Contains(out, "the link holds") {
		t.Fatalf("verify of the range's export holding both runs: %d\n%s%s", code, out, errs)
	}
}
