package runner_test

import (
	"testing"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// Scenario 17's worker side (docs/protocol/41-tasks.md, outcome lost): a
// report lost with cause timed_out or stopped records nothing — the
// tool_timeout timer, or the cancellation, decides the attempt — and gets
// the same reply as any report: the run and its status.
func TestScenario17_LostTimedOutOrStoppedRecordsNothing(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))}, runner.WithExternalTools("pay"))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "r17l", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("r17l", "a fenced attempt", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	v := s.Version()
	act := s.Actions()[0].ID
	for _, cause := range []string{events.CauseTimedOut, events.CauseStopped} {
		rep := api.Report{Schema: api.Schema, CommandID: "lost-" + cause, Run: "r17l", Action: act, Attempt: 1, Incarnation: 1, Outcome: api.OutcomeLost, Cause: cause, Evidence: "x"}
		reply, err := runnerReport(c, h, rep)
		if err != nil {
			t.Fatalf("lost %s: %v", cause, err)
		}
		if reply.Run != "r17l" || reply.Status != string(aggregate.StatusWorking) {
			t.Fatalf("lost %s: reply %+v, want the run and its status", cause, reply)
		}
	}
	if got := h.state("r17l").Version(); got != v {
		t.Fatalf("a lost timed_out/stopped report wrote events (version %d → %d)", v, got)
	}
}
