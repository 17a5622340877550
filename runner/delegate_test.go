package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// lastResults returns the tool results of the request's last tool message.
func lastResults(req model.Request) []model.ToolResult {
	for i := len(req.Transcript) - 1; i >= 0; i-- {
		if m := req.Transcript[i]; m.Role == model.RoleTool {
			return m.Results
		}
	}
	return nil
}

// echoResults is a step that answers with the contents of the last tool
// results, joined by " | ".
func echoResults(_ context.Context, req model.Request) (model.Reply, error) {
	var parts []string
	for _, r := range lastResults(req) {
		parts = append(parts, string(r.Content))
	}
	return model.Answer(strings.Join(parts, " | "))(context.Background(), req)
}

// delegationPolicy allows everything and counts the actions it saw with
// target agent.
type delegationPolicy struct{ delegations atomic.Int64 }

func (p *delegationPolicy) policy() policy.Policy {
	return policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		if a.Target == policy.TargetAgent {
			p.delegations.Add(1)
		}
		return policy.Allow(), nil
	})
}

func researcherAgent(t *testing.T, b *bodies, steps ...model.Step) *agent.Agent {
	t.Helper()
	if steps == nil {
		steps = []model.Step{model.CallTools(payCall(5, "ok")), model.Answer("invoice 7 is paid")}
	}
	a, err := agent.New("researcher", model.NewScripted("researcher", steps...), []tools.Tool{b.tool()}, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestDelegation_ParentGetsChildAnswer: the parent delegates to a sub-agent
// (docs/semantics.md §1, §5), the child run uses a tool, and the parent
// completes
// with the child's answer (docs/adr/0007).
func TestDelegation_ParentGetsChildAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	child := researcherAgent(t, &b)
	var pol delegationPolicy
	parent := build(t, model.NewScripted("desk",
		model.CallTools(model.Call("researcher", `{"input":"check invoice 7"}`)),
		echoResults,
	), []tools.Tool{agent.Delegate(child, "Looks facts up.")}, pol.policy())
	h.startRunner([]*agent.Agent{parent}) // serves the sub-agent too
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "d1", Agent: "desk", Input: "is invoice 7 paid?"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("d1", aggregate.StatusFinished)
	o, _ := s.Finished()
	if o.Kind != events.OutcomeCompleted || string(o.Answer) != `"\"invoice 7 is paid\""` {
		t.Fatalf("parent outcome %s", events.DescribeOutcome(o))
	}
	act, _ := s.Action("1/call_1_1")
	if act.State != aggregate.ActionChildSettled || act.Child == nil {
		t.Fatalf("delegation %+v", act)
	}
	cs := h.waitStatus(act.Child.Child, aggregate.StatusFinished)
	co, _ := cs.Finished()
	if co.Kind != events.OutcomeCompleted || cs.Parent() == nil || cs.Parent().Run != "d1" || cs.Parent().Action != act.ID || cs.Depth() != 1 {
		t.Fatalf("child %s parent %+v", events.DescribeOutcome(co), cs.Parent())
	}
	if cs.Started().Input != "check invoice 7" || cs.Started().Agent.Name != "researcher" {
		t.Fatalf("child started with %+v", cs.Started())
	}
	if n := b.starts.Load(); n != 1 {
		t.Fatalf("the child's tool started %d times", n)
	}
	if n := pol.delegations.Load(); n != 1 {
		t.Fatalf("policy saw %d delegations", n)
	}
	// The family's turns: the parent's 2 and the child's 2.
	if s.ChildTurns() != 2 || s.FamilyUsed() != 4 {
		t.Fatalf("child turns %d family used %d", s.ChildTurns(), s.FamilyUsed())
	}
}

// TestDelegation_MaxChildrenLimitReached: with max children 1, the second
// of two delegations in one batch ends limit_reached before policy; the
// model reads the error and the run completes (docs/semantics.md §2).
func TestDelegation_MaxChildrenLimitReached(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	child := researcherAgent(t, &b)
	var pol delegationPolicy
	parent := build(t, model.NewScripted("desk",
		model.CallTools(model.Call("researcher", `{"input":"a"}`), model.Call("researcher", `{"input":"b"}`)),
		echoResults,
	), []tools.Tool{agent.Delegate(child, "Looks facts up.")}, pol.policy(), agent.WithMaxChildren(1))
	h.startRunner([]*agent.Agent{parent})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "d2", Agent: "desk", Input: "two questions"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("d2", aggregate.StatusFinished)
	o, _ := s.Finished()
	want := `"invoice 7 is paid" | {"error":"limit_reached","detail":"max_children 1"}`
	var got string
	_ = json.Unmarshal(o.Answer, &got)
	if o.Kind != events.OutcomeCompleted || got != want {
		t.Fatalf("parent outcome %s, want answer %s", events.DescribeOutcome(o), want)
	}
	second, _ := s.Action("1/call_1_2")
	if second.State != aggregate.ActionLimitReached || second.Child != nil {
		t.Fatalf("second delegation %+v", second)
	}
	if n := pol.delegations.Load(); n != 1 {
		t.Fatalf("policy saw %d delegations, want 1 (the bound is checked before policy)", n)
	}
	if n := b.starts.Load(); n != 1 {
		t.Fatalf("child tool started %d times, want 1 (one child)", n)
	}
}

// TestDelegation_CancelCancelsChildren (docs/semantics.md §7): cancelling the
// parent while its child's tool body hangs cancels the child; the parent
// finishes cancelled once the child settled.
func TestDelegation_CancelCancelsChildren(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	child := researcherAgent(t, &b, model.CallTools(payCall(5, "hang")), model.Answer("never"))
	parent := build(t, model.NewScripted("desk",
		model.CallTools(model.Call("researcher", `{"input":"wait"}`)),
		echoResults,
	), []tools.Tool{agent.Delegate(child, "Looks facts up.")}, policy.AlwaysAllow())
	h.startRunner([]*agent.Agent{parent})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "d3", Agent: "desk", Input: "go"}); err != nil {
		t.Fatal(err)
	}
	childID := aggregate.ChildRunID("d3", "1/call_1_1")
	h.waitFor(childID, "the child's body running", func(s aggregate.State) bool {
		a, ok := s.Action("1/call_1_1")
		return ok && a.State == aggregate.ActionRunning && b.starts.Load() == 1
	})
	if _, err := h.client.Cancel(c, api.CancelRequest{Run: "d3", By: "test"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("d3", aggregate.StatusFinished)
	if o, _ := s.Finished(); o.Kind != events.OutcomeCancelled {
		t.Fatalf("parent outcome %s", events.DescribeOutcome(o))
	}
	cs := h.state(childID)
	if o, fin := cs.Finished(); !fin || o.Kind != events.OutcomeCancelled {
		t.Fatalf("child outcome %s finished %v", events.DescribeOutcome(o), fin)
	}
	act, _ := s.Action("1/call_1_1")
	if act.State != aggregate.ActionChildSettled || act.Outcome != events.OutcomeCancelled {
		t.Fatalf("delegation %+v", act)
	}
}

// TestToolChanged_RedeployedAgentLacksTool (docs/semantics.md §6): a run waits
// for the approval of a "pay" action; its runner is drained and a runner
// serving the same agent name and version without "pay" takes the run
// over (at once when the drain handed it off, or when the approval reaches
// it when it was idle): the run fails tool_changed naming the action, and
// the body never starts.
func TestToolChanged_RedeployedAgentLacksTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	v1 := build(t, model.NewScripted("desk", model.CallTools(payCall(500, "ok")), model.Answer("done")),
		[]tools.Tool{b.tool()}, policy.Func(approvalAbove))
	_, stop := h.startRunner([]*agent.Agent{v1}, runner.WithID("first"))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "tc1", Agent: "desk", Input: "pay 500"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("tc1", aggregate.StatusSuspended)
	stop()

	other := tools.Bind(tools.Define[payIn, payOut]("refund", "Refund."), func(context.Context, tools.Call, payIn) (payOut, error) { return payOut{}, nil },
		func(err error) tools.Failure { return tools.Explain(err.Error()) })
	redeployed := build(t, model.NewScripted("desk", model.Answer("unused")), []tools.Tool{other}, policy.AlwaysAllow())
	h.startRunner([]*agent.Agent{redeployed}, runner.WithID("second"))
	// The run waits only for people: evicted before the drain (or handed
	// off by it), it is taken over when a command reaches it — here the
	// approval it waits for (docs/adr/0019-partitions.md).
	ws := h.state("tc1")
	if act, ok := ws.Action("1/call_1_1"); ok && act.State == aggregate.ActionAwaitingApproval {
		_ = retrying(c, func() error {
			_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "tc", Run: "tc1", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
			return err
		})
	}
	s := h.waitStatus("tc1", aggregate.StatusFinished)
	o, _ := s.Finished()
	if o.Kind != events.OutcomeFailed || o.Reason != events.ReasonToolChanged || o.Action != "1/call_1_1" {
		t.Fatalf("outcome %s", events.DescribeOutcome(o))
	}
	if a, _ := s.Action("1/call_1_1"); a.State != aggregate.ActionNotStarted {
		t.Fatalf("action %+v", a)
	}
	if n := b.starts.Load(); n != 0 {
		t.Fatalf("the body started %d times", n)
	}
}

// TestDelegation_SurvivesRunnerHandOff (docs/semantics.md §8, docs/adr/0007):
// the child waits for an approval when the runner driving parent and child
// drains; another runner takes both over, the delegation stays delegated,
// the approved child completes and the new runner feeds its answer to the
// parent, which completes. The child's tool runs once.
func TestDelegation_SurvivesRunnerHandOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	child, err := agent.New("researcher", model.NewScripted("researcher", model.CallTools(payCall(500, "ok")), model.Answer("paid after approval")),
		[]tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithApprovers(approvers.Trusting("desk"))).Build()
	if err != nil {
		t.Fatal(err)
	}
	parent := build(t, model.NewScripted("desk", model.CallTools(model.Call("researcher", `{"input":"pay it"}`)), echoResults),
		[]tools.Tool{agent.Delegate(child, "Pays.")}, policy.AlwaysAllow())
	_, stop := h.startRunner([]*agent.Agent{parent}, runner.WithID("first"))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "d5", Agent: "desk", Input: "go"}); err != nil {
		t.Fatal(err)
	}
	childID := aggregate.ChildRunID("d5", "1/call_1_1")
	cs := h.waitStatus(childID, aggregate.StatusSuspended)
	if st := aggregate.Status(h.state("d5")); st.Kind != aggregate.StatusWorking {
		t.Fatalf("parent status %s while its child waits", st.Kind)
	}
	stop()
	h.startRunner([]*agent.Agent{parent}, runner.WithID("second"))
	act := cs.Actions()[0]
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a1", Run: childID, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("d5", aggregate.StatusFinished)
	o, _ := s.Finished()
	if o.Kind != events.OutcomeCompleted || !strings.Contains(string(o.Answer), "paid after approval") {
		t.Fatalf("parent outcome %s", events.DescribeOutcome(o))
	}
	if s.Incarnation() != 2 || h.state(childID).Incarnation() != 2 {
		t.Fatalf("incarnations parent %d child %d, want both taken over", s.Incarnation(), h.state(childID).Incarnation())
	}
	if n := b.starts.Load(); n != 1 {
		t.Fatalf("the child's tool started %d times", n)
	}
}
