package protocoltest

import (
	"encoding/json"
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
	var h struct {
		Events []struct {
			Type    string `json:"type"`
			Payload struct {
				Turn       int64 `json:"turn"`
				ForkedFrom struct {
					Run string `json:"run"`
				} `json:"forked_from"`
			} `json:"payload"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(hist), &h); err != nil || len(h.Events) < 3 || strings.Contains(hist, `"type":"attempt_fenced"`) {
		t.Fatalf("history of the restarted run (%v):\n%s", err, hist)
	}
	e := h.Events
	if e[0].Type != "run_started" || e[1].Type != "run_forked" || e[1].Payload.ForkedFrom.Run != "proto-r1" || e[2].Type != "model_requested" || e[2].Payload.Turn != 3 {
		t.Fatalf("the restarted run's history starts %s, %s (from %q), %s turn %d: want run_started, run_forked from proto-r1, model_requested turn 3",
			e[0].Type, e[1].Type, e[1].Payload.ForkedFrom.Run, e[2].Type, e[2].Payload.Turn)
	}
}
