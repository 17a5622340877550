package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
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

// countingPolicy counts its invocations.
type countingPolicy struct {
	n  atomic.Int64
	fn policy.Func
}

func (p *countingPolicy) Decide(ctx context.Context, a policy.Action) (policy.Decision, error) {
	p.n.Add(1)
	return p.fn(ctx, a)
}

// Scenario 4: unknown tool and bad arguments → policy never invoked;
// states unknown_tool, invalid_arguments; the model sees both errors.
func TestScenario04_UnknownToolAndBadArguments(t *testing.T) {
	t.Parallel()
	var seen model.Request
	p := &countingPolicy{fn: allow}
	m := model.NewScripted("s", model.CallTools(model.Call("nope", `{}`), model.Call("pay", `{"amount":"x"}`)), func(ctx context.Context, req model.Request) (model.Reply, error) {
		seen = req
		return model.Answer("ok")(ctx, req)
	})
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, p), "r4", "x")
	s, _ := finished(t, h, "r4")
	acts := s.Actions()
	if acts[0].State != aggregate.ActionUnknownTool || acts[1].State != aggregate.ActionInvalidArguments || p.n.Load() != 0 {
		t.Fatalf("states %s %s, policy calls %d", acts[0].State, acts[1].State, p.n.Load())
	}
	last := seen.Transcript[len(seen.Transcript)-1]
	if !strings.Contains(string(last.Results[0].Content), "unknown_tool") || len(last.Results[1].Content) == 0 {
		t.Fatalf("model saw %s / %s", last.Results[0].Content, last.Results[1].Content)
	}
}

// Scenario 5: one denied, one needing approval, one allowed → only the
// allowed one runs; suspended with one pending approval.
func TestScenario05_MixedDecisions(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	pol := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		in, _, err := tools.Input(payDef, a)
		if err != nil {
			return policy.Decision{}, err
		}
		if in.Amount == 1 {
			return policy.Deny("no"), nil
		}
		return approvalAbove(ctx, a)
	})
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok"), payCall(500, "ok"), payCall(2, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, pol), "r5", "x")
	s := h.waitFor("r5", "suspended after the allowed body", func(s aggregate.State) bool {
		a, _ := s.Action("1/call_1_3")
		return aggregate.Status(s).Kind == aggregate.StatusSuspended && a.State == aggregate.ActionSucceeded
	})
	acts := s.Actions()
	if acts[0].State != aggregate.ActionDenied || acts[1].State != aggregate.ActionAwaitingApproval || b.starts.Load() != 1 {
		t.Fatalf("states %s %s %s starts %d", acts[0].State, acts[1].State, acts[2].State, b.starts.Load())
	}
}

// Scenario 6: policy errors on one call of a batch → failed(policy_failed);
// every action not_started; nothing dispatched.
func TestScenario06_PolicyError(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	pol := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		in, _, _ := tools.Input(payDef, a)
		if in.Amount == 2 {
			panic("policy bug")
		}
		return policy.Allow(), nil
	})
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok"), payCall(2, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, pol), "r6", "x")
	s, out := finished(t, h, "r6")
	if out.Kind != events.OutcomeFailed || out.Reason != events.ReasonPolicyFailed {
		t.Fatalf("outcome %+v", out)
	}
	for _, a := range s.Actions() {
		if a.State != aggregate.ActionNotStarted {
			t.Fatalf("%s is %s", a.ID, a.State)
		}
	}
	if b.starts.Load() != 0 {
		t.Fatal("a body ran")
	}
}

// Scenario 7: duplicate call ids → failed(model_protocol_violation).
func TestScenario07_DuplicateCallIDs(t *testing.T) {
	t.Parallel()
	c := payCall(1, "ok")
	c.ID = "same"
	m := model.NewScripted("s", model.CallTools(c, c))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "r7", "x")
	if _, out := finished(t, h, "r7"); out.Reason != events.ReasonModelProtocolViolation {
		t.Fatalf("outcome %+v", out)
	}
}

// Scenario 8: max turns 1 and the model asks for a tool →
// budget_exhausted(turn_limit 1); tool not_started.
func TestScenario08_TurnLimit(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(allow), agent.WithMaxTurns(1)), "r8", "x")
	s, out := finished(t, h, "r8")
	if out.Kind != events.OutcomeBudgetExhausted || out.Reason != events.ReasonTurnLimit || out.Limit != 1 || s.Actions()[0].State != aggregate.ActionNotStarted || b.starts.Load() != 0 {
		t.Fatalf("outcome %+v action %s", out, s.Actions()[0].State)
	}
}

// Scenario 9: retryable model failure twice with max turns 2 →
// budget_exhausted; non-retryable → failed(model_failed).
func TestScenario09_ModelFailures(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Fail(model.ErrOverloaded, "busy"), model.Fail(model.ErrOverloaded, "busy"))
	h := one(t, build(t, m, nil, policy.Func(allow), agent.WithMaxTurns(2), agent.WithModelRetryDelay(time.Millisecond)), "r9", "x")
	if _, out := finished(t, h, "r9"); out.Kind != events.OutcomeBudgetExhausted {
		t.Fatalf("outcome %+v", out)
	}
	m2 := model.NewScripted("s", model.Fail(model.ErrRejected, "no key"))
	h2 := one(t, build(t, m2, nil, policy.Func(allow)), "r9b", "x")
	if _, out := finished(t, h2, "r9b"); out.Kind != events.OutcomeFailed || out.Reason != events.ReasonModelFailed {
		t.Fatalf("outcome %+v", out)
	}
}

// Scenario 10: token budget 10, usage 12 → token_limit(10, 12).
func TestScenario10_TokenBudget(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok").WithUsage(&model.Usage{InputTokens: 6, OutputTokens: 6}))
	h := one(t, build(t, m, nil, policy.Func(allow), agent.WithTokenBudget(10)), "r10", "x")
	if _, out := finished(t, h, "r10"); out.Reason != events.ReasonTokenLimit || out.Limit != 10 || out.Used != 12 {
		t.Fatalf("outcome %+v", out)
	}
	m2 := model.NewScripted("s", model.Answer("ok").WithUsage(nil))
	h2 := one(t, build(t, m2, nil, policy.Func(allow), agent.WithTokenBudget(100)), "r10b", "x")
	if _, out := finished(t, h2, "r10b"); out.Kind != events.OutcomeBudgetUnverifiable || out.Turn != 1 {
		t.Fatalf("outcome %+v", out)
	}
}

// Scenario 11: model timeout 50 ms, first call hangs → retried, the second
// answers → completed, turns 2.
func TestScenario11_ModelTimeout(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Hang(), model.Answer("ok"))
	h := one(t, build(t, m, nil, policy.Func(allow), agent.WithModelTimeout(tools.After(50*time.Millisecond)), agent.WithModelRetryDelay(time.Millisecond)), "r11", "x")
	s, out := finished(t, h, "r11")
	if out.Kind != events.OutcomeCompleted || s.Turn() != 2 {
		t.Fatalf("outcome %+v turns %d", out, s.Turn())
	}
}

type answer struct {
	Total int `json:"total"`
}

// Scenario 14: typed answer, first reply undecodable, second valid →
// completed, turns 2, the second request holds the correction and schema.
func TestScenario14_TypedAnswerCorrection(t *testing.T) {
	t.Parallel()
	var second model.Request
	m := model.NewScripted("s", model.Answer("not json"), func(ctx context.Context, req model.Request) (model.Reply, error) {
		second = req
		return model.Answer(`{"total":3}`)(ctx, req)
	})
	h := one(t, build(t, m, nil, policy.Func(allow), agent.WithTypedAnswer[answer]()), "r14", "x")
	s, out := finished(t, h, "r14")
	if out.Kind != events.OutcomeCompleted || s.Turn() != 2 {
		t.Fatalf("outcome %+v turns %d", out, s.Turn())
	}
	var got answer
	if err := json.Unmarshal(out.Answer, &got); err != nil || got.Total != 3 {
		t.Fatalf("answer %s", out.Answer)
	}
	last := second.Transcript[len(second.Transcript)-1]
	if !strings.Contains(last.Text, "could not be read") || len(second.AnswerSchema) == 0 {
		t.Fatalf("second request: %q schema %s", last.Text, second.AnswerSchema)
	}
}

// Scenario 19: fresh context at approval makes policy deny → denied, the
// tool does not run. Policy now needs requirement v2 → requirement_changed;
// approving the new request runs the tool once.
func TestScenario19_PolicyRerunAtApproval(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	pol := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		rv, ok := policy.Reviewer(ctx)
		if !ok {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		switch {
		case rv.Reviewer == "mallory":
			return policy.Deny("mallory may not pay"), nil
		case rv.Requirement.Version == 1:
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 2}), nil
		}
		return policy.Allow(), nil
	})
	m := model.NewRules("s", model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, pol)
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	for _, run := range []string{"r19a", "r19b"} {
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	s := h.waitStatus("r19a", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "1", Run: "r19a", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "mallory"}); err != nil {
		t.Fatal(err)
	}
	s, _ = finished(t, h, "r19a")
	if a, _ := s.Action(act.ID); a.State != aggregate.ActionDenied || b.starts.Load() != 0 {
		t.Fatalf("state %s starts %d", a.State, b.starts.Load())
	}

	s = h.waitStatus("r19b", aggregate.StatusSuspended)
	act, _ = s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "1", Run: "r19b", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitStatus("r19b", aggregate.StatusSuspended)
	act2, _ := s.Action(act.ID)
	if act2.Request.Revision <= act.Request.Revision || act2.Request.Requirement.Version != 2 {
		t.Fatalf("no new request for v2: %+v", act2.Request)
	}
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "2", Run: "r19b", Action: act.ID, Revision: act2.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	finished(t, h, "r19b")
	if b.starts.Load() != 1 {
		t.Fatalf("starts %d", b.starts.Load())
	}
}

// Scenario 29 (timed-out variant): a timed-out replayable body is
// restarted; typed Uncertain → 1 start, no replay.
func TestScenario29_ReplayAfterTimeout(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	slowOnce := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		n.Add(1)
		if call.Attempt == 1 {
			<-ctx.Done()
			return payOut{}, ctx.Err()
		}
		return payOut{ID: "ok"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	// Attempt 2 must finish within the timeout from its fence, through
	// dispatch, the worker's check and claim and the report: 1 s keeps
	// that true under a loaded machine (attempt 1 waits it out).
	tool := tools.WithTimeout(tools.WithReplay(slowOnce, 3), tools.After(time.Second))
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{tool}, policy.Func(allow)), "r29", "x")
	s, out := finished(t, h, "r29")
	if a := s.Actions()[0]; out.Kind != events.OutcomeCompleted || a.Replays() != 1 || n.Load() != 2 {
		t.Fatalf("outcome %+v replays %d starts %d", out, a.Replays(), n.Load())
	}

	b := &bodies{}
	m2 := model.NewScripted("s", model.CallTools(payCall(1, "uncertain")), model.Answer("ok"))
	h2 := one(t, build(t, m2, []tools.Tool{tools.WithReplay(b.tool(), 3)}, policy.Func(allow)), "r29b", "x")
	s = h2.waitStatus("r29b", aggregate.StatusSuspended)
	if a := s.Actions()[0]; a.State != aggregate.ActionUncertain || b.starts.Load() != 1 {
		t.Fatalf("typed uncertain: %s starts %d", a.State, b.starts.Load())
	}
}
