package main

import (
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/natstest"
)

// TestSemantics13_WeftPauseAndResume drives docs/semantics.md §13 with the
// CLI against `weft dev` on a real server: a run waiting for approval is
// paused (show and runs list it paused), approved while paused (the
// payment waits: the run stays paused), resumed, and completes.
func TestSemantics13_WeftPauseAndResume(t *testing.T) {
	s := natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	startDevCLI(t, "dev", "--nats", s.URL)

	cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "cli-pause")
	waitShow(t, "cli-pause", "awaiting_approval")
	if code, out, errs := cli(t, "pause", "cli-pause", "--reason", "checking the vendor", "--by", "alice"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %d %s %s", code, out, errs)
	}
	out := waitShow(t, "cli-pause", "status     paused")
	if !strings.Contains(out, "by alice (unverified): checking the vendor") {
		t.Fatalf("show of a paused run:\n%s", out)
	}
	waitCLI(t, "cli-pause", "runs", "--status", "paused")
	if code, out, errs := cli(t, "approve", "cli-pause", "2/call_2_1", "--approver", "desk", "--credential", "alice"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("approve while paused: %d %s %s", code, out, errs)
	}
	out = waitShow(t, "cli-pause", "queued")
	if !strings.Contains(out, "status     paused") {
		t.Fatalf("approved while paused:\n%s", out)
	}
	if code, out, errs := cli(t, "resume", "cli-pause", "--by", "alice"); code != 0 {
		t.Fatalf("resume: %d %s %s", code, out, errs)
	}
	waitShow(t, "cli-pause", "status     finished: completed")
	if code, _, errs := cli(t, "pause", "cli-pause"); code != exitFailed || !strings.Contains(errs, "run_ended") {
		t.Fatalf("pause of a finished run: %d %s", code, errs)
	}
}
