package runner_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// TestIdleRunsLeaveMemoryAndComeBackWithoutATakeover (docs/adr/0014):
// runs suspended on an approval, with nothing in flight, are evicted from
// their runner's memory; an approval, and an approval expiry that falls
// due, reach them all the same, and the runner drives them again as their
// driver — no run_recovered, the incarnation unchanged, the tool run once.
func TestIdleRunsLeaveMemoryAndComeBackWithoutATakeover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "pay", Match: func(r model.Request) bool { return r.Turn == 1 }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	short := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithVersion("2"), agent.WithApprovalExpiry(tools.After(1500*time.Millisecond)))
	r, _ := h.startRunner([]*agent.Agent{a, short})
	c := ctx(t)
	const n = 10
	for i := range n {
		if _, err := h.client.Start(c, api.StartRequest{Run: fmt.Sprint("idle-", i), Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: "idle-exp", Agent: "desk", Version: "2", Input: "pay"}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		h.waitStatus(fmt.Sprint("idle-", i), aggregate.StatusSuspended)
	}
	// A poll, on the wall clock: the eviction follows the suspension
	// (idle.go), not ownership's time, and the approval expiry is the
	// run's own timer (timers.go), the wall clock's; a fake ownership
	// clock would move neither.
	deadline := time.Now().Add(10 * time.Second)
	for {
		held := r.Stats().Driven
		if held <= 1 { // idle-exp may be read back for its expiry
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s the runner holds %d runs; want the %d suspended runs evicted", held, n)
		}
		// wall clock: a poll of the evictions (see above)
		time.Sleep(20 * time.Millisecond)
	}
	s := h.state("idle-3")
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a1", Run: "idle-3", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"idle-3", "idle-exp"} {
		s := h.waitStatus(run, aggregate.StatusFinished)
		if s.Incarnation() != 1 {
			t.Errorf("%s: incarnation %d, want 1 (no takeover)", run, s.Incarnation())
		}
		envs, _, err := h.srv.Log.Load(c, run)
		if err != nil {
			t.Fatal(err)
		}
		for _, env := range envs {
			if env.Type == events.NameRunRecovered {
				t.Errorf("%s: an evicted run was recovered: %s", run, env.Payload)
			}
		}
	}
	if s := h.state("idle-exp"); true {
		act, _ := s.Action("1/call_1_1")
		if act.State != aggregate.ActionRejected {
			t.Errorf("idle-exp: action %s, want rejected by its expiry", act.State)
		}
	}
	if got := b.starts.Load(); got != 1 {
		t.Errorf("bodies started %d times, want 1 (the approved one)", got)
	}
}
