package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (a refusal is a decision made on state known to be
// current): runner A lost its run without noticing (as a runner paused by
// SIGSTOP while another took its runs over): B took it over and re-asked
// the approved action's approval (revision 2). An approval of revision 2
// reaching A must not be refused from A's stale memory (where revision 2
// does not exist): A checks the run's head in the log before refusing,
// finds it no longer drives the run, and forwards the approval to B.
func TestRefusalOnCurrentState_StaleDriverForwardsInsteadOfRefusing(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(5, "hang"), payCall(500, "ok")), model.Answer("ok"))
	mk := func() *agent.Agent {
		return build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithMaxConcurrency(1))
	}
	h := newHarness(t)
	ida, idb := keeping("sa") // the run stays A's when B joins
	ra, _ := h.startRunner([]*agent.Agent{mk()}, runner.WithID(ida))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "sa", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("sa", "an approval while the first call runs", func(s aggregate.State) bool {
		return len(aggregate.Status(s).Approvals) == 1 && s.Actions()[0].State == aggregate.ActionRunning
	})
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a1", Run: "sa", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("sa", "queued", func(s aggregate.State) bool { a, _ := s.Action(act.ID); return a.State == aggregate.ActionQueued })

	// B takes the run over while A, alive, still holds it in memory.
	rb, _ := h.startRunner([]*agent.Agent{mk()}, runner.WithID(idb))
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	wake, _ := json.Marshal(map[string]any{"kind": "wake", "run": "sa"})
	s = h.waitFor("sa", "B's takeover", func(s aggregate.State) bool {
		if s.Runner() == rb.ID() {
			return true
		}
		_ = live.Delete(c, ra.ID())
		_, _ = h.srv.Conn.Request(runner.ForwardPrefix+rb.ID()+".cmd", wake, 5*time.Second)
		return false
	})
	cur, _ := s.Action(act.ID)
	if cur.State != aggregate.ActionAwaitingApproval || cur.Request.Revision <= act.Request.Revision {
		t.Fatalf("after the takeover: %s revision %d, want a new request", cur.State, cur.Request.Revision)
	}

	// The approval of the new request reaches A.
	body, _ := json.Marshal(api.ApproveRequest{Schema: api.Schema, CommandID: "a2", Run: "sa", Action: cur.ID, Revision: cur.Request.Revision, Approver: "desk", Credential: "a"})
	fwd, _ := json.Marshal(map[string]any{"kind": api.EndpointApprove, "run": "sa", "body": json.RawMessage(body)})
	msg, err := h.srv.Conn.Request(runner.ForwardPrefix+ra.ID()+".cmd", fwd, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var er api.ErrorReply
	_ = json.Unmarshal(msg.Data, &er)
	if er.Error != nil {
		t.Fatalf("the runner that lost the run refused the approval from stale memory: %v", er.Error)
	}
	h.waitFor("sa", "approved", func(s aggregate.State) bool {
		a, _ := s.Action(act.ID)
		return a.State != aggregate.ActionAwaitingApproval
	})
}
