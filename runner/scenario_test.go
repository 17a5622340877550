package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	t.Parallel()
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

// one starts run with the agent a on a fresh server and runner.
func one(t *testing.T, a *agent.Agent, run, input string) *harness {
	t.Helper()
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: a.Name(), Input: input}); err != nil {
		t.Fatal(err)
	}
	return h
}

func finished(t *testing.T, h *harness, run string) (aggregate.State, events.Outcome) {
	t.Helper()
	s := h.waitStatus(run, aggregate.StatusFinished)
	out, _ := s.Finished()
	return s, out
}

func allow(context.Context, policy.Action) (policy.Decision, error) { return policy.Allow(), nil }

// Scenario 3: two calls, reports in reverse order → the next request lists
// results in call order; turns used 2.
func TestScenario03_ResultsInCallOrder(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	var second model.Request
	m := model.NewScripted("s", model.CallTools(payCall(1, "slow"), payCall(2, "ok")), func(ctx context.Context, req model.Request) (model.Reply, error) {
		second = req
		return model.Answer("done")(ctx, req)
	})
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(allow)), "r3", "x")
	s, out := finished(t, h, "r3")
	if out.Kind != events.OutcomeCompleted || s.Turn() != 2 {
		t.Fatalf("outcome %+v turns %d", out, s.Turn())
	}
	last := second.Transcript[len(second.Transcript)-1]
	if len(last.Results) != 2 || last.Results[0].CallID != "call_1_1" || last.Results[1].CallID != "call_1_2" {
		t.Fatalf("results not in call order: %+v", last.Results)
	}
}

// Scenario 12: a body over its timeout → suspended with one uncertain
// action naming the timeout; the same tool with infinity completes.
func TestScenario12_BodyTimeout(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "hang")), model.Answer("done"))
	a := build(t, m, []tools.Tool{tools.WithTimeout(b.tool(), tools.After(50*time.Millisecond))}, policy.Func(allow))
	h := one(t, a, "r12", "x")
	s := h.waitStatus("r12", aggregate.StatusSuspended)
	st := aggregate.Status(s)
	if len(st.Uncertain) != 1 {
		t.Fatalf("uncertain = %v", st.Uncertain)
	}
	act, _ := s.Action(st.Uncertain[0])
	if !strings.Contains(act.Detail, "timeout") && !strings.Contains(act.Detail, "timed out") {
		t.Fatalf("evidence %q does not name the timeout", act.Detail)
	}

	m2 := model.NewScripted("s", model.CallTools(payCall(1, "slow")), model.Answer("done"))
	a2 := build(t, m2, []tools.Tool{tools.WithTimeout((&bodies{}).tool(), tools.Infinity())}, policy.Func(allow))
	h2 := one(t, a2, "r12b", "x")
	if _, out := finished(t, h2, "r12b"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("infinity: %+v", out)
	}
}

// Scenario 13: a 200-byte result with max result bytes 100 →
// failed(output_encoding_failed) naming the action and the setting.
func TestScenario13_Oversize(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(1, "big")), model.Answer("done"))
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow), agent.WithMaxResultBytes(100))
	h := one(t, a, "r13", "x")
	_, out := finished(t, h, "r13")
	if out.Kind != events.OutcomeFailed || out.Reason != events.ReasonOutputEncodingFailed || out.Action != "1/call_1_1" || out.Setting != "max_result_bytes" {
		t.Fatalf("outcome %+v", out)
	}
}

// Scenario 16: reject → the tool never runs, the model sees rejected.
func TestScenario16_Reject(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	var seen model.Request
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), func(ctx context.Context, req model.Request) (model.Reply, error) {
		seen = req
		return model.Answer("ok")(ctx, req)
	})
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)), "r16", "x")
	s := h.waitStatus("r16", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Reject(ctx(t), api.RejectRequest{CommandID: "j", Run: "r16", Action: act.ID, Revision: act.Request.Revision, Reason: "too much", Approver: "desk", Credential: "bob"}); err != nil {
		t.Fatal(err)
	}
	finished(t, h, "r16")
	if b.starts.Load() != 0 {
		t.Fatal("rejected tool ran")
	}
	c, _ := model.ResultOf(seen, "pay")
	if !strings.Contains(string(c), "rejected") {
		t.Fatalf("model saw %s", c)
	}
}

// Scenario 17: wrong run/action → wrong_reference; wrong revision →
// stale_reference; record unchanged.
func TestScenario17_References(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove)), "r17", "x")
	s := h.waitStatus("r17", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	c := ctx(t)
	_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "1", Run: "r17", Action: "9/nope", Revision: 1, Approver: "desk", Credential: "a"})
	if !isCode(err, weft.CodeWrongReference) {
		t.Fatalf("wrong action: %v", err)
	}
	_, err = h.client.Approve(c, api.ApproveRequest{CommandID: "2", Run: "r17", Action: act.ID, Revision: act.Request.Revision + 1, Approver: "desk", Credential: "a"})
	if !isCode(err, weft.CodeStaleReference) {
		t.Fatalf("wrong revision: %v", err)
	}
	_, err = h.client.Approve(c, api.ApproveRequest{CommandID: "3", Run: "nosuchrun", Action: act.ID, Revision: 1, Approver: "desk", Credential: "a"})
	if !isCode(err, weft.CodeUnknownRun) && !isCode(err, weft.CodeWrongReference) {
		t.Fatalf("wrong run: %v", err)
	}
	if h.state("r17").Version() != s.Version() {
		t.Fatal("a refused answer changed the record")
	}
}

// Scenario 18: eight concurrent approvals → exactly one wins, seven
// already_answered, effect once.
func TestScenario18_ConcurrentApprovals(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)), "r18", "x")
	s := h.waitStatus("r18", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = h.client.Approve(ctx(t), api.ApproveRequest{CommandID: fmt.Sprint("c", i), Run: "r18", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
		}()
	}
	wg.Wait()
	won, answered := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case isCode(err, weft.CodeAlreadyAnswered) || isCode(err, weft.CodeRunEnded):
			answered++
		default:
			t.Errorf("unexpected: %v", err)
		}
	}
	finished(t, h, "r18")
	if won != 1 || answered != 7 || b.starts.Load() != 1 {
		t.Fatalf("won %d answered %d starts %d", won, answered, b.starts.Load())
	}
}

// Scenario 20: approval expiry passes → rejected(expired), the model sees
// it, the run completes; a late answer → approval_expired.
func TestScenario20_ApprovalExpiry(t *testing.T) {
	t.Parallel()
	var seen model.Request
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), func(ctx context.Context, req model.Request) (model.Reply, error) {
		seen = req
		return model.Answer("ok")(ctx, req)
	})
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove), agent.WithApprovalExpiry(tools.After(30*time.Millisecond)))
	h := one(t, a, "r20", "x")
	s, out := finished(t, h, "r20")
	if out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	act := s.Actions()[0]
	if act.State != aggregate.ActionRejected || len(act.Answers) != 1 || act.Answers[0].Answer != events.AnswerExpired {
		t.Fatalf("action %+v", act)
	}
	if c, _ := model.ResultOf(seen, "pay"); !strings.Contains(string(c), "expired") {
		t.Fatalf("model saw %s", c)
	}
	_, err := h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "late", Run: "r20", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
	if !isCode(err, weft.CodeApprovalExpired) && !isCode(err, weft.CodeRunEnded) {
		t.Fatalf("late answer: %v", err)
	}
}

// Scenario 21: cancel a suspended run → cancelled, action not_started;
// approving the old reference → run_ended.
func TestScenario21_CancelSuspended(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove)), "r21", "x")
	s := h.waitStatus("r21", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "x", Run: "r21"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r21")
	if out.Kind != events.OutcomeCancelled {
		t.Fatalf("outcome %+v", out)
	}
	if a, _ := s.Action(act.ID); a.State != aggregate.ActionNotStarted {
		t.Fatalf("action %s", a.State)
	}
	_, err := h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "y", Run: "r21", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
	if !isCode(err, weft.CodeRunEnded) {
		t.Fatalf("approve after cancel: %v", err)
	}
	_, err = h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "z", Run: "r21"})
	if !isCode(err, weft.CodeRunEnded) {
		t.Fatalf("second cancel: %v", err)
	}
}

// Scenario 22: cancel with one tool running, one queued, one awaiting
// approval → uncertain, not_started, not_started.
func TestScenario22_CancelMixed(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "hang"), payCall(2, "ok"), payCall(500, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithMaxConcurrency(1))
	h := one(t, a, "r22", "x")
	h.waitFor("r22", "running + awaiting", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 3 && acts[0].State == aggregate.ActionRunning && acts[2].State == aggregate.ActionAwaitingApproval && b.starts.Load() == 1
	})
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r22"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r22")
	acts := s.Actions()
	if out.Kind != events.OutcomeCancelled || acts[0].State != aggregate.ActionUncertain || acts[1].State != aggregate.ActionNotStarted || acts[2].State != aggregate.ActionNotStarted {
		t.Fatalf("outcome %+v states %s %s %s", out, acts[0].State, acts[1].State, acts[2].State)
	}
}

// Scenario 23: cancel during a model call → reply discarded, cancelled.
func TestScenario23_CancelDuringModelCall(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	m := model.NewScripted("s", counted(&calls, model.Hang()))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "r23", "x")
	// The model call is in flight (not a sleep that hoped it was).
	h.waitFor("r23", "the model call of turn 1", func(aggregate.State) bool { return calls.Load() == 1 })
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r23"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r23")
	if out.Kind != events.OutcomeCancelled {
		t.Fatalf("outcome %+v", out)
	}
	// The reply never came: nothing of turn 1 was recorded.
	if n := len(s.Actions()); n != 0 || calls.Load() != 1 {
		t.Fatalf("%d actions, %d model calls; want none, one", n, calls.Load())
	}
}

// Scenario 24: answer and cancel race, 20 times → always cancelled, the
// tool ran at most once.
func TestScenario24_AnswerCancelRace(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewRules("s", model.Rule{Name: "pay", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return !ok }, Step: model.CallTools(payCall(500, "hang"))},
		model.Rule{Name: "done", Match: func(model.Request) bool { return true }, Step: model.Answer("ok")})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	for i := range 20 {
		run := fmt.Sprint("r24-", i)
		before := b.starts.Load()
		if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
		s := h.waitStatus(run, aggregate.StatusSuspended)
		act, _ := s.Action(aggregate.Status(s).Approvals[0])
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, _ = h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
		}()
		go func() {
			defer wg.Done()
			_, _ = h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: run})
		}()
		wg.Wait()
		if _, out := finished(t, h, run); out.Kind != events.OutcomeCancelled {
			t.Fatalf("%s: outcome %+v", run, out)
		}
		if n := b.starts.Load() - before; n > 1 {
			t.Fatalf("%s: tool started %d times", run, n)
		}
	}
}

// Scenario 36: start under an existing id → already_started(same_input).
func TestScenario36_AlreadyStarted(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "r36", "input")
	finished(t, h, "r36")
	v := h.state("r36").Version()
	_, err := h.client.Start(ctx(t), api.StartRequest{Run: "r36", Agent: "desk", Input: "input", Correlation: "other"})
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput == nil || !*we.SameInput {
		t.Fatalf("same input: %v", err)
	}
	_, err = h.client.Start(ctx(t), api.StartRequest{Run: "r36", Agent: "desk", Input: "other"})
	if !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput == nil || *we.SameInput {
		t.Fatalf("different input: %v", err)
	}
	if h.state("r36").Version() != v {
		t.Fatal("already_started wrote something")
	}
}

// Scenario 38: reconcile an action that is not uncertain →
// not_reconcilable; unconfirmed(note) → reconciled, model sees it.
func TestScenario38_ReconcileUnconfirmed(t *testing.T) {
	t.Parallel()
	var seen model.Request
	m := model.NewScripted("s", model.CallTools(payCall(1, "uncertain"), payCall(2, "ok")), func(ctx context.Context, req model.Request) (model.Reply, error) {
		seen = req
		return model.Answer("ok")(ctx, req)
	})
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "r38", "x")
	h.waitStatus("r38", aggregate.StatusSuspended)
	_, err := h.client.Reconcile(ctx(t), api.ReconcileRequest{CommandID: "a", Run: "r38", Action: "1/call_1_2", Content: json.RawMessage(`{"id":"x"}`)})
	if !isCode(err, weft.CodeNotReconcilable) {
		t.Fatalf("reconcile of a succeeded action: %v", err)
	}
	if _, err := h.client.Reconcile(ctx(t), api.ReconcileRequest{CommandID: "b", Run: "r38", Action: "1/call_1_1", Content: tools.Unconfirmed("asking the bank")}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r38")
	if out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if a, _ := s.Action("1/call_1_1"); a.State != aggregate.ActionReconciled {
		t.Fatalf("state %s", a.State)
	}
	last := seen.Transcript[len(seen.Transcript)-1]
	if !strings.Contains(string(last.Results[0].Content), "unconfirmed") {
		t.Fatalf("model saw %s", last.Results[0].Content)
	}
}
