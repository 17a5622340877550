package runner_test

import (
	"context"
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

// Tests of docs/semantics.md §13 (pause and resume) on a real embedded
// server. "Starts nothing" is read from the log: a fence and the next turn
// are decided in the same append as the decision that frees them (a
// report, a reply's resolution, an approval), so a log that records that
// decision without them proves that nothing was started, without waiting.

// gated is a pay tool whose "hang" bodies wait for release (ok bodies
// answer at once); starts counts every body start.
type gated struct {
	starts  atomic.Int64
	release chan struct{}
}

func newGated() *gated { return &gated{release: make(chan struct{})} }

func (g *gated) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		g.starts.Add(1)
		if in.Mode == "hang" {
			select {
			case <-g.release:
			case <-ctx.Done():
				return payOut{}, ctx.Err()
			}
		}
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// counted wraps step: calls counts every model call.
func counted(calls *atomic.Int64, step model.Step) model.Step {
	return func(ctx context.Context, req model.Request) (model.Reply, error) {
		calls.Add(1)
		return step(ctx, req)
	}
}

func (h *harness) pause(run, id string) api.Reply {
	h.t.Helper()
	rep, err := h.client.Pause(ctx(h.t), api.PauseRequest{CommandID: id, Run: run, By: "alice", Reason: "checking the vendor"})
	if err != nil {
		h.t.Fatal(err)
	}
	return rep
}

func (h *harness) resume(run, id string) api.Reply {
	h.t.Helper()
	rep, err := h.client.Resume(ctx(h.t), api.ResumeRequest{CommandID: id, Run: run, By: "alice"})
	if err != nil {
		h.t.Fatal(err)
	}
	return rep
}

// TestSemantics13_APausedRunStartsNothing: a run paused while its model
// call is in flight records the reply (work in flight finishes), resolves
// its call, but fences nothing and requests no turn; resumed, the body
// runs once and the run completes.
func TestSemantics13_APausedRunStartsNothing(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	gate := make(chan struct{})
	g := newGated()
	m := model.NewScripted("s", counted(&calls, func(ctx context.Context, req model.Request) (model.Reply, error) {
		<-gate
		return model.CallTools(payCall(1, "ok"))(ctx, req)
	}), counted(&calls, model.Answer("paid")))
	h := one(t, build(t, m, []tools.Tool{g.tool()}, policy.Func(allow)), "p1", "pay 1")
	h.waitFor("p1", "the model call of turn 1", func(aggregate.State) bool { return calls.Load() == 1 })
	if rep := h.pause("p1", "p-1"); rep.Status != string(aggregate.StatusPaused) {
		t.Fatalf("pause answered status %q", rep.Status)
	}
	close(gate)
	s := h.waitFor("p1", "the reply recorded and its call resolved", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State != aggregate.ActionRequested
	})
	if a := s.Actions()[0]; a.State != aggregate.ActionQueued || a.Attempts != 0 || g.starts.Load() != 0 || !s.Paused() || aggregate.Status(s).Kind != aggregate.StatusPaused {
		t.Fatalf("paused run: action %s attempts %d, body starts %d, paused %v, status %s", a.State, a.Attempts, g.starts.Load(), s.Paused(), aggregate.Status(s).Kind)
	}
	// A repeat records nothing and answers the status.
	v := s.Version()
	if rep := h.pause("p1", "p-2"); rep.Status != string(aggregate.StatusPaused) || h.state("p1").Version() != v {
		t.Fatalf("second pause: status %q, version %d → %d", rep.Status, v, h.state("p1").Version())
	}
	h.resume("p1", "r-1")
	s, out := finished(t, h, "p1")
	if out.Kind != events.OutcomeCompleted || g.starts.Load() != 1 || calls.Load() != 2 {
		t.Fatalf("outcome %+v, body starts %d, model calls %d", out, g.starts.Load(), calls.Load())
	}
	_, err := h.client.Resume(ctx(t), api.ResumeRequest{CommandID: "r-2", Run: "p1"})
	if !isCode(err, weft.CodeRunEnded) {
		t.Fatalf("resume of a finished run: %v", err)
	}
	_, err = h.client.Pause(ctx(t), api.PauseRequest{CommandID: "p-3", Run: "p1"})
	if !isCode(err, weft.CodeRunEnded) {
		t.Fatalf("pause of a finished run: %v", err)
	}
}

// TestSemantics13_APausedRunFencesNoQueuedCall: concurrency 1, the first
// body runs, the second call waits for the slot. Paused, the first body's
// report is recorded and the freed slot fences nothing; the next turn is
// not requested. Resumed, the second body runs and the run completes.
func TestSemantics13_APausedRunFencesNoQueuedCall(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	g := newGated()
	m := model.NewScripted("s", counted(&calls, model.CallTools(payCall(1, "hang"), payCall(2, "ok"))), counted(&calls, model.Answer("paid")))
	h := one(t, build(t, m, []tools.Tool{g.tool()}, policy.Func(allow), agent.WithMaxConcurrency(1)), "p2", "pay twice")
	h.waitFor("p2", "the first body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 2 && acts[0].State == aggregate.ActionRunning && g.starts.Load() == 1
	})
	h.pause("p2", "p-1")
	close(g.release)
	s := h.waitFor("p2", "the first report", func(s aggregate.State) bool { return s.Actions()[0].State == aggregate.ActionSucceeded })
	if a := s.Actions()[1]; a.State != aggregate.ActionQueued || a.Attempts != 0 || s.Turn() != 1 || g.starts.Load() != 1 || calls.Load() != 1 {
		t.Fatalf("paused run after the report: second action %s attempts %d, turn %d, body starts %d, model calls %d", a.State, a.Attempts, s.Turn(), g.starts.Load(), calls.Load())
	}
	if rep := h.resume("p2", "r-1"); rep.Status == string(aggregate.StatusPaused) {
		t.Fatalf("resume answered status %q", rep.Status)
	}
	s, out := finished(t, h, "p2")
	if out.Kind != events.OutcomeCompleted || g.starts.Load() != 2 || calls.Load() != 2 || s.Actions()[1].State != aggregate.ActionSucceeded {
		t.Fatalf("outcome %+v, body starts %d, model calls %d", out, g.starts.Load(), calls.Load())
	}
}

// TestSemantics13_AnApprovalAnsweredWhilePausedTakesEffectOnResume: the
// approval is accepted while paused (the action is queued, not fenced);
// the body runs once after the resume.
func TestSemantics13_AnApprovalAnsweredWhilePausedTakesEffectOnResume(t *testing.T) {
	t.Parallel()
	g := newGated()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	h := one(t, build(t, m, []tools.Tool{g.tool()}, policy.Func(approvalAbove)), "p3", "pay 500")
	s := h.waitStatus("p3", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	h.pause("p3", "p-1")
	rep, err := h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "a-1", Run: "p3", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	s = h.state("p3")
	if a, _ := s.Action(act.ID); rep.Status != string(aggregate.StatusPaused) || a.State != aggregate.ActionQueued || a.Attempts != 0 || g.starts.Load() != 0 {
		t.Fatalf("approved while paused: status %q, action %s attempts %d, body starts %d", rep.Status, a.State, a.Attempts, g.starts.Load())
	}
	h.resume("p3", "r-1")
	if _, out := finished(t, h, "p3"); out.Kind != events.OutcomeCompleted || g.starts.Load() != 1 {
		t.Fatalf("outcome %+v, body starts %d", out, g.starts.Load())
	}
}

// TestSemantics13_CancelWorksOnAPausedRun: a paused run waiting for an
// approval is cancelled; its action ends not_started.
func TestSemantics13_CancelWorksOnAPausedRun(t *testing.T) {
	t.Parallel()
	g := newGated()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	h := one(t, build(t, m, []tools.Tool{g.tool()}, policy.Func(approvalAbove)), "p4", "pay 500")
	h.waitStatus("p4", aggregate.StatusSuspended)
	h.pause("p4", "p-1")
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c-1", Run: "p4", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "p4")
	if out.Kind != events.OutcomeCancelled || s.Actions()[0].State != aggregate.ActionNotStarted || g.starts.Load() != 0 {
		t.Fatalf("outcome %+v, action %s, body starts %d", out, s.Actions()[0].State, g.starts.Load())
	}
}

// TestSemantics13_AnApprovalExpiresWhilePausedAtItsRecordedDeadline: the
// expiry timer fires while paused, recorded at or after the request's
// deadline; the next turn waits for the resume.
func TestSemantics13_AnApprovalExpiresWhilePausedAtItsRecordedDeadline(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	// The run is paused while its first model call is in flight, before
	// the approval is requested: a pause sent once the run was suspended
	// raced the 300 ms expiry, and one that came after it found the next
	// turn requested (or the run finished: run_ended).
	gate := make(chan struct{})
	m := model.NewScripted("s", counted(&calls, func(ctx context.Context, req model.Request) (model.Reply, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return model.Reply{}, ctx.Err()
		}
		return model.CallTools(payCall(500, "ok"))(ctx, req)
	}), counted(&calls, model.Answer("ok")))
	a := build(t, m, []tools.Tool{newGated().tool()}, policy.Func(approvalAbove), agent.WithApprovalExpiry(tools.After(300*time.Millisecond)))
	h := one(t, a, "p5", "pay 500")
	h.waitFor("p5", "the model call of turn 1", func(aggregate.State) bool { return calls.Load() == 1 })
	h.pause("p5", "p-1")
	close(gate)
	s := h.waitFor("p5", "the approval request", func(s aggregate.State) bool { return len(s.Actions()) == 1 && s.Actions()[0].Request.Revision > 0 })
	act := s.Actions()[0]
	s = h.waitFor("p5", "the expiry", func(s aggregate.State) bool {
		a, _ := s.Action(act.ID)
		return a.State == aggregate.ActionRejected
	})
	if got, _ := s.Action(act.ID); len(got.Answers) != 1 || got.Answers[0].Answer != events.AnswerExpired || !s.Paused() || s.Turn() != 1 || calls.Load() != 1 {
		t.Fatalf("expired while paused: answers %+v, paused %v, turn %d, model calls %d", got.Answers, s.Paused(), s.Turn(), calls.Load())
	}
	envs, _, err := h.srv.Log.Load(context.Background(), "p5")
	if err != nil {
		t.Fatal(err)
	}
	var paused, requested uint64
	for _, env := range envs {
		switch env.Type {
		case events.NameRunPaused:
			paused = env.Version
		case events.NameApprovalRequested:
			requested = env.Version
		}
		if ev, _ := env.Event(); ev != nil {
			if e, ok := ev.(events.ApprovalAnswered); ok && env.Recorded.Before(act.Request.Expires) {
				t.Fatalf("expiry %+v recorded at %s, before the deadline %s", e, env.Recorded, act.Request.Expires)
			}
		}
	}
	if paused == 0 || requested < paused {
		t.Fatalf("run_paused at %d, approval_requested at %d: want the request recorded while paused", paused, requested)
	}
	h.resume("p5", "r-1")
	if _, out := finished(t, h, "p5"); out.Kind != events.OutcomeCompleted || calls.Load() != 2 {
		t.Fatalf("outcome %+v, model calls %d", out, calls.Load())
	}
}

// TestSemantics13_APauseSurvivesARunnerRestart: paused while a body runs,
// the run's runner stops (drain, hand-off) and another takes it over: the
// run stays paused — the pause is in the log — and no turn is requested
// until the resume.
func TestSemantics13_APauseSurvivesARunnerRestart(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	g := newGated()
	m := model.NewScripted("s", counted(&calls, model.CallTools(payCall(1, "hang"))), counted(&calls, model.Answer("paid")))
	a := build(t, m, []tools.Tool{g.tool()}, policy.Func(allow))
	h := newHarness(t)
	_, stop := h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "p6", Agent: "desk", Input: "pay 1"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("p6", "the body running", func(s aggregate.State) bool { return g.starts.Load() == 1 })
	h.pause("p6", "p-1")
	close(g.release)
	h.waitFor("p6", "the report", func(s aggregate.State) bool { return s.Actions()[0].State == aggregate.ActionSucceeded })
	stop()
	h.startRunner([]*agent.Agent{a})
	// The new runner decides from the log: a second pause finds the run
	// paused and records nothing of its own.
	if rep := h.pause("p6", "p-2"); rep.Status != string(aggregate.StatusPaused) {
		t.Fatalf("after the restart: status %q", rep.Status)
	}
	if s := h.state("p6"); !s.Paused() || s.Turn() != 1 || calls.Load() != 1 {
		t.Fatalf("after the restart: paused %v, turn %d, model calls %d", s.Paused(), s.Turn(), calls.Load())
	}
	h.resume("p6", "r-1")
	if _, out := finished(t, h, "p6"); out.Kind != events.OutcomeCompleted || calls.Load() != 2 || g.starts.Load() != 1 {
		t.Fatalf("outcome %+v, model calls %d, body starts %d", out, calls.Load(), g.starts.Load())
	}
}

// TestSemantics13_ADelegationAllowedWhilePausedStartsItsChildOnResume: a
// reply recorded while paused calls a sub-agent; its call is allowed but
// the action is queued, not delegated (the child run would call its
// model), in the same append as the resolution; resumed, the child runs
// and the parent completes with its answer.
func TestSemantics13_ADelegationAllowedWhilePausedStartsItsChildOnResume(t *testing.T) {
	t.Parallel()
	var calls, childCalls atomic.Int64
	gate := make(chan struct{})
	var b bodies
	child := researcherAgent(t, &b, counted(&childCalls, model.CallTools(payCall(5, "ok"))), counted(&childCalls, model.Answer("invoice 7 is paid")))
	parent := build(t, model.NewScripted("desk",
		counted(&calls, func(ctx context.Context, req model.Request) (model.Reply, error) {
			<-gate
			return model.CallTools(model.Call("researcher", `{"input":"check invoice 7"}`))(ctx, req)
		}),
		echoResults,
	), []tools.Tool{agent.Delegate(child, "Looks facts up.")}, policy.Func(allow))
	h := one(t, parent, "p7", "is invoice 7 paid?")
	h.waitFor("p7", "the model call of turn 1", func(aggregate.State) bool { return calls.Load() == 1 })
	h.pause("p7", "p-1")
	close(gate)
	s := h.waitFor("p7", "the reply recorded and its call resolved", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State != aggregate.ActionRequested
	})
	if a := s.Actions()[0]; a.State != aggregate.ActionQueued || a.Child != nil || a.Agent == nil || !s.Paused() {
		t.Fatalf("paused run: delegation %s child %v agent %v, paused %v", a.State, a.Child, a.Agent, s.Paused())
	}
	h.resume("p7", "r-1")
	s, out := finished(t, h, "p7")
	act := s.Actions()[0]
	if out.Kind != events.OutcomeCompleted || string(out.Answer) != `"\"invoice 7 is paid\""` || act.State != aggregate.ActionChildSettled || childCalls.Load() != 2 {
		t.Fatalf("outcome %s, delegation %s, child model calls %d", events.DescribeOutcome(out), act.State, childCalls.Load())
	}
}
