package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestSecurityWhoDidIt_ShowResolvedSaysVerified (docs/security.md "Who did
// it"): weft show's "resolved:" line says who resolved an open question as
// the who: section does — "by NAME (unverified)" for a typed name, "by
// nobody named (unverified)" when no name was given (never "by -"), and,
// under weft dev --secure with the deployment's person key,
// "by NAME (verified, key U…)".
func TestSecurityWhoDidIt_ShowResolvedSaysVerified(t *testing.T) {
	t.Run("demo", func(t *testing.T) {
		t.Setenv("NATS_URL", "")
		t.Setenv("NATS_CREDS", "")
		t.Setenv("WEFT_MODEL", "")
		_, url := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir())
		t.Setenv("NATS_URL", url)
		for run, by := range map[string][]string{"rw-1": {"--by", "bob"}, "rw-2": nil} {
			if code, _, errs := cli(t, "start", "payment-desk", "pay invoice INV-13", "--run", run); code != 0 {
				t.Fatalf("start %s: %d %s", run, code, errs)
			}
			waitShow(t, run, "effect uncertain: 2/call_2_1")
			if code, _, errs := cli(t, "reconcile", run, "2/call_2_1", "--unconfirmed", "checking with the bank", "--by", "alice"); code != 0 {
				t.Fatalf("reconcile %s: %d %s", run, code, errs)
			}
			waitShow(t, run, "open question: 2/call_2_1")
			args := append([]string{"resolve", run, "2/call_2_1", "--output", `{"id":"PAY-13","status":"sent"}`}, by...)
			if code, _, errs := cli(t, args...); code != 0 {
				t.Fatalf("resolve %s: %d %s", run, code, errs)
			}
		}
		show := waitShow(t, "rw-1", "resolved: 2/call_2_1")
		contains(t, "show rw-1", show,
			"\nresolved: 2/call_2_1 send_payment: output {\"id\":\"PAY-13\",\"status\":\"sent\"} by bob (unverified) at ",
			"\n  2/call_2_1 resolved (output) by bob (unverified)\n")
		show = waitShow(t, "rw-2", "resolved: 2/call_2_1")
		contains(t, "show rw-2", show,
			"\nresolved: 2/call_2_1 send_payment: output {\"id\":\"PAY-13\",\"status\":\"sent\"} by nobody named (unverified) at ",
			"\n  2/call_2_1 resolved (output) by nobody named (unverified)\n")
		if strings.Contains(show, "by -") {
			t.Fatalf("show prints a dash for no name:\n%s", show)
		}
	})
	t.Run("secure", func(t *testing.T) {
		key, _ := devSecureRequired(t)
		if code, o, errs := cli(t, "start", "payment-desk", "pay invoice INV-13", "--run", "rw-3"); code != 0 {
			t.Fatalf("start: %d %s %s", code, o, errs)
		}
		waitShow(t, "rw-3", "effect uncertain: 2/call_2_1")
		if code, o, errs := cli(t, "reconcile", "rw-3", "2/call_2_1", "--unconfirmed", "checking with the bank", "--reason", "bank ticket 7", "--signing-key", key); code != 0 {
			t.Fatalf("signed reconcile: %d %s %s", code, o, errs)
		}
		waitShow(t, "rw-3", "open question: 2/call_2_1")
		if code, o, errs := cli(t, "resolve", "rw-3", "2/call_2_1", "--error", "never received", "--reason", "bank ticket 8", "--signing-key", key); code != 0 {
			t.Fatalf("signed resolve: %d %s %s", code, o, errs)
		}
		show := waitShow(t, "rw-3", "resolved: 2/call_2_1")
		line := regexp.MustCompile(`\nresolved: 2/call_2_1 send_payment: error \{"error":"never received"\} by demo approver \(verified, key (U[A-Z0-9]+)\) at `).FindStringSubmatch(show)
		if line == nil {
			t.Fatalf("show's resolved line does not say it is verified with its key:\n%s", show)
		}
		contains(t, "show rw-3", show, "\n  2/call_2_1 resolved (error) by demo approver (verified, key "+line[1]+`), reason "bank ticket 8"`)
	})
}
