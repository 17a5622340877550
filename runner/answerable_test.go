package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/tools"
)

// suspendedLongAgo writes the history of run, driven by runner "ghost"
// (gone), an hour ago: run_started … approval_requested with a 30 s
// expiry, long past. It returns the pending request.
func suspendedLongAgo(t *testing.T, h *harness, a *agent.Agent, run string) aggregate.Action {
	t.Helper()
	at := time.Now().Add(-time.Hour)
	var s aggregate.State
	var head eventlog.Head
	decide := func(c aggregate.Command) {
		evs, err := aggregate.Decide(s, c, at)
		if err != nil {
			t.Fatal(err)
		}
		envs, next, err := h.srv.Log.Append(context.Background(), run, head, at, evs...)
		if err != nil {
			t.Fatal(err)
		}
		head = next
		for _, env := range envs {
			ev, err := env.Event()
			if err != nil {
				t.Fatal(err)
			}
			s = aggregate.Evolve(s, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
		}
	}
	decide(aggregate.Start{Run: run, Agent: a.Ref(), Input: "pay", Limits: a.Limits(), Runner: "ghost"})
	call := payCall(500, "ok")
	call.ID = "call_1_1"
	decide(runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	cfg, _ := a.ToolConfig("pay")
	decide(aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments,
		Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 1}}, Tool: cfg}}})
	if st := aggregate.Status(s); st.Kind != aggregate.StatusSuspended || !aggregate.Idle(s) {
		t.Fatalf("crafted history: status %s, idle %v", st.Kind, aggregate.Idle(s))
	}
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	return act
}

// pastItsExpiry writes run's history with suspendedLongAgo for an agent
// that pays after approval (finance v1 over 100) with a 30 s approval
// expiry and answers once the payment's result (or its expiry) is back;
// its driver is gone, and a runner that scans nothing serves the agent.
func pastItsExpiry(t *testing.T, run string) (*harness, *runner.Runner, *bodies, aggregate.Action) {
	h, b := newHarness(t), &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { return r.Turn > 1 }, Step: model.Answer("done")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithApprovalExpiry(tools.After(30*time.Second)))
	act := suspendedLongAgo(t, h, a, run)
	h.release("ghost")
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithoutScan())
	return h, r, b, act
}

// docs/semantics.md §8, "A run can always be answered" (the chaos run's
// stranded
// runs): a run suspended on an approval whose driver is gone is reached
// after the approval's expiry. Each command a person sends is answered for
// its own reason — a late approval approval_expired, never invalid_request
// for the takeover's (recovery cause idle, refused once the expiry was
// applied first) — and the run moves on: the expiry is recorded after the
// takeover and the model sees it.
func TestSemantics8_AnAnswerPastTheExpiryOfARunTakenOverIsAnsweredForItsOwnReason(t *testing.T) {
	t.Parallel()
	h, r, b, act := pastItsExpiry(t, "ans1")

	_, err := h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "a1", Run: "ans1", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"})
	if code := weft.ErrorCode(err); code != weft.CodeApprovalExpired {
		t.Fatalf("a late approval of a run taken over: %v (code %s), want approval_expired", err, code)
	}
	s, out := finished(t, h, "ans1")
	if out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
	if got, _ := s.Action(act.ID); got.State != aggregate.ActionRejected || got.Request.Answer != events.AnswerExpired {
		t.Errorf("action %s answer %q, want rejected by its expiry", got.State, got.Request.Answer)
	}
	if n := b.starts.Load(); n != 0 {
		t.Errorf("the expired payment ran %d times", n)
	}
	if n := r.Stats().InternalRefusals; n != 0 {
		t.Errorf("%d internal refusals", n)
	}
}

// The same run reached by a cancel: cancelled.
func TestSemantics8_ACancelPastTheExpiryOfARunTakenOverIsApplied(t *testing.T) {
	t.Parallel()
	h, _, _, _ := pastItsExpiry(t, "ans2")

	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c1", Run: "ans2"}); err != nil {
		t.Fatalf("cancel of a run taken over past its approval's expiry: %v", err)
	}
	if _, out := finished(t, h, "ans2"); out.Kind != events.OutcomeCancelled {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
}

// The same run reached only by its expiry's durable timer (armed by the
// runner that is gone): the timer takes the run over and applies the
// expiry; the run completes. Before, the takeover was refused, the firing
// acknowledged away, and the run never moved again.
func TestSemantics8_AnExpiryTimerPastItsTimeTakesTheRunOverAndApplies(t *testing.T) {
	t.Parallel()
	h, _, _, _ := pastItsExpiry(t, "ans3")
	if err := timer.New(h.srv.JS).Arm(ctx(t), "ans3", "expiry", time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "ans3"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
}
