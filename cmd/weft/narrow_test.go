package main

import (
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/natstest"
)

// TestSemantics4_CLIApproveNarrower (docs/semantics.md §4, "Approving
// narrower arguments"): weft approve --args approves the demo's payment
// narrowed to a lower amount; arguments that are not JSON are a usage
// error, ones the tool's input schema refuses are invalid_content, weft
// show says what the model asked and what was approved, and the model
// read that the payment ran with the lower amount.
func TestSemantics4_CLIApproveNarrower(t *testing.T) {
	s := natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	startDevCLI(t, "dev", "--nats", s.URL)
	if code, out, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "narrow-7"); code != 0 {
		t.Fatalf("start: %d %s %s", code, out, errs)
	}
	waitShow(t, "narrow-7", "awaiting_approval")
	approve := func(args string) (int, string, string) {
		return cli(t, "approve", "narrow-7", "2/call_2_1", "--approver", "desk", "--credential", "alice", "--args", args)
	}
	if code, _, errs := approve(`{"amount":`); code != exitUsage {
		t.Fatalf("--args that is not JSON: %d %s", code, errs)
	}
	if code, _, errs := approve(`{"invoice":"INV-7","payee":"ACME Ltd","amount":"less","currency":"EUR"}`); code != exitFailed || !strings.Contains(errs, "invalid_content") {
		t.Fatalf("--args the input schema refuses: %d %s", code, errs)
	}
	const lower = `{"invoice":"INV-7","payee":"ACME Ltd","amount":50,"currency":"EUR"}`
	if code, out, errs := approve(lower); code != 0 {
		t.Fatalf("approve --args: %d %s %s", code, out, errs)
	}
	show := waitShow(t, "narrow-7", "finished: completed")
	if !strings.Contains(show, `approved {"invoice":"INV-7","payee":"ACME Ltd","amount":50,"currency":"EUR"}`) || !strings.Contains(show, `"amount":1200`) {
		t.Fatalf("show does not say what was asked and what approved:\n%s", show)
	}
	// The demo's model answers with what it read of the payment: the call
	// started with the edit (the arguments the attempt was dispatched with,
	// aggregate.Action.CallArguments), not only shown with it.
	if !strings.Contains(show, `it ran with these arguments, not the ones you asked for\",\"arguments\":{\"invoice\":\"INV-7\",\"payee\":\"ACME Ltd\",\"amount\":50,`) {
		t.Fatalf("the model did not read that the payment ran with amount 50:\n%s", show)
	}
}
