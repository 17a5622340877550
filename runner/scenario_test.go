package runner_test

import (
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// Scenario 15: approve with a valid proof → the tool runs exactly once and
// the answer is recorded with reviewer and verifier.
func TestScenario15_ApproveRunsToolOnce(t *testing.T) {
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "r15", Agent: "desk", Input: "pay 500"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("r15", aggregate.StatusSuspended)
	st := aggregate.Status(s)
	if len(st.Approvals) != 1 {
		t.Fatalf("approvals = %v", st.Approvals)
	}
	act, _ := s.Action(st.Approvals[0])
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "c1", Run: "r15", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitStatus("r15", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome = %+v", out)
	}
	if n := b.starts.Load(); n != 1 {
		t.Fatalf("body started %d times, want 1", n)
	}
	act, _ = s.Action(act.ID)
	if len(act.Answers) != 1 || act.Answers[0].Reviewer != "alice" || act.Answers[0].Verifier != "desk" {
		t.Fatalf("answers = %+v", act.Answers)
	}
	// Repeating the command id returns the first reply; a new command on
	// the answered request is already_answered (scenario 17).
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "c1", Run: "r15", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatalf("repeated command id: %v", err)
	}
	_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "c2", Run: "r15", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"})
	if !isCode(err, weft.CodeRunEnded) && !isCode(err, weft.CodeAlreadyAnswered) {
		t.Fatalf("second approve: %v", err)
	}
}

func isCode(err error, c weft.Code) bool { return weft.ErrorCode(err) == c }
