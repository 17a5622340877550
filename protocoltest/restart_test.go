package protocoltest

import (
	"strings"
	"testing"
)

// TestSemantics14_RestartWithNatsCLI restarts a finished run with `nats req
// weft.api.restart` as docs/protocol/40-commands.md shows it
// (docs/semantics.md §14): refused run_not_finished while the run waits
// for its approval; once it completed, restarted from turn 3 (after the
// payment), the new run completes with no action of its own — the payment
// is not made again — and its history starts with run_started, run_forked
// and the request of turn 3.
func TestSemantics14_RestartWithNatsCLI(t *testing.T) {
	d := startDev(t)
	d.call(t, "weft.api.start", `{"schema":1,"run":"proto-r1","agent":"payment-desk","input":"pay invoice INV-7"}`)
	v := d.waitView(t, "proto-r1", "a pending approval", func(v view) bool { return v.Status == "suspended" && len(v.Approvals) == 1 })
	restart := `{"schema":1,"command_id":"proto-rs-1","run":"proto-r2","from":{"run":"proto-r1","turn":3}}`
	if out := d.nats(t, "req", "weft.api.restart", `{"schema":1,"command_id":"proto-rs-0","run":"proto-r2","from":{"run":"proto-r1","turn":3}}`); !strings.Contains(out, `"code":"run_not_finished"`) {
		t.Fatalf("restart of a live run:\n%s", out)
	}
	action := v.Approvals[0]
	d.call(t, "weft.api.approve", `{"schema":1,"command_id":"proto-r-approve","run":"proto-r1","action":"`+action+`","revision":1,"approver":"desk","credential":"alice"}`)
	d.waitView(t, "proto-r1", "its outcome", func(v view) bool { return v.Status == "finished" })

	if reply := d.call(t, "weft.api.restart", restart); !strings.Contains(reply, `"run":"proto-r2"`) {
		t.Fatalf("restart reply: %s", reply)
	}
	v = d.waitView(t, "proto-r2", "its outcome", func(v view) bool { return v.Status == "finished" })
	if v.Outcome == nil || v.Outcome.Kind != "completed" || len(v.Actions) != 0 {
		t.Fatalf("restarted run: outcome %+v, actions %+v", v.Outcome, v.Actions)
	}
	if again := d.call(t, "weft.api.restart", restart); !strings.Contains(again, `"run":"proto-r2"`) {
		t.Fatalf("the same restart again: %s", again)
	}
	hist := d.nats(t, "req", "--raw", "weft.api.query.history", `{"schema":1,"run":"proto-r2"}`)
	first, forked, turn := strings.Index(hist, `"type":"run_started"`), strings.Index(hist, `"type":"run_forked"`), strings.Index(hist, `"turn":3`)
	if first < 0 || forked < first || turn < forked || strings.Contains(hist, `"type":"attempt_fenced"`) || !strings.Contains(hist, `"forked_from":{"run":"proto-r1"`) {
		t.Fatalf("history of the restarted run:\n%s", hist)
	}
}
