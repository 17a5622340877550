package main

import (
	"strings"
	"testing"
)

// The first hour: a mistyped command, inbox kind or action reference is
// answered with the nearest one, not only "unknown".
func TestFirstHour_TyposSuggestTheNearestCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"aprove"}, `unknown command "aprove"; did you mean approve? (see weft --help)`},
		{[]string{"recnocile"}, `unknown command "recnocile"; did you mean reconcile?`},
		{[]string{"inbox", "aprovals"}, `want approvals, uncertain or questions; did you mean approvals?`},
	} {
		code, _, errs := cli(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("weft %s: exit %d, want %d with %q: %s", strings.Join(c.args, " "), code, exitUsage, c.want, errs)
		}
	}
	// Nothing near: no guess.
	if code, _, errs := cli(t, "frobnicate"); code != exitUsage || strings.Contains(errs, "did you mean") {
		t.Errorf("weft frobnicate: exit %d: %s", code, errs)
	}
}

// TestFirstHour_ApproveAnUnknownActionSuggestsTheRunsNearestAction: the
// CLI's own wrong_reference for an action the run does not have names the
// run's action nearest to it.
func TestFirstHour_ApproveAnUnknownActionSuggestsTheRunsNearestAction(t *testing.T) {
	s := setup(t)
	t.Setenv("NATS_URL", s.URL)
	code, _, errs := cli(t, "approve", "pay-42", "1/c11", "--approver", "desk", "--credential", "alice")
	if code != exitFailed || !strings.Contains(errs, "run pay-42 has no action 1/c11; did you mean 1/c1?") {
		t.Errorf("approve of a mistyped action: exit %d: %s", code, errs)
	}
}
