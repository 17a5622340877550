package runner_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
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

// eventsOf lists run's events in log order.
func (h *harness) eventsOf(run string) []events.Event {
	h.t.Helper()
	envs, _, err := h.srv.Log.Load(ctx(h.t), run)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []events.Event
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			h.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// docs/semantics.md §7: a cancel that reaches a run needing takeover is decided
// on
// the recovered state before any effect of the recovery is performed. The
// run's driver (ghost) is gone while a replayable attempt ran; the cancel
// that takes the run over fences no replay, starts no body, and the action
// that may have acted ends uncertain.
func TestCancelAfterTakeoverStartsNothing_NoReplayFenced(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.Answer("unused"))
	a := build(t, m, []tools.Tool{tools.WithReplay(b.tool(), 3)}, policy.Func(allow))
	var s aggregate.State
	hd := appendDecided(t, h, "tc2", &s, aggregate.Start{Run: "tc2", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	call := payCall(5, "ok")
	call.ID = "call_1_1"
	hd = appendDecidedAt(t, h, "tc2", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	cfg, _ := a.ToolConfig("pay")
	appendDecidedAt(t, h, "tc2", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}, Tool: cfg}}})
	if act := s.Actions()[0]; act.State != aggregate.ActionRunning || act.Attempt.MaxAttempts != 3 {
		t.Fatalf("crafted history: %+v", act)
	}
	claimAsWorker(t, h, "tc2", "1/call_1_1", 1, 1) // the ghost's worker took it: it may have acted
	h.release("ghost")
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithoutScan())

	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "tc2"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "tc2")
	if out.Kind != events.OutcomeCancelled {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
	for _, ev := range h.eventsOf("tc2") {
		if f, ok := ev.(events.AttemptFenced); ok && f.Attempt > 1 {
			t.Errorf("the takeover for the cancel fenced a replay: %+v", f)
		}
	}
	if act := s.Actions()[0]; act.State != aggregate.ActionUncertain {
		t.Errorf("action %s (%s), want uncertain: attempt 1 may have acted", act.State, act.Detail)
	}
	// A task the runner gives its own worker has no stream copy
	// (docs/adr/0039-the-stream-copy-only-when-needed.md): the queue,
	// empty, says nothing about it, so none may have been given.
	h.waitTasksConsumed()
	if n := r.HandedOff(); n != 0 {
		t.Errorf("the runner handed %d tasks to its worker after the cancel", n)
	}
	if n := b.starts.Load(); n != 0 {
		t.Errorf("a body started %d times after the cancel", n)
	}
}

// docs/semantics.md §7: a lost model call is not issued again when the command
// that
// took the run over cancels it.
func TestCancelAfterTakeoverStartsNothing_NoModelCall(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var calls atomic.Int64
	m := model.NewScripted("s", func(ctx context.Context, req model.Request) (model.Reply, error) {
		calls.Add(1)
		return model.Answer("late")(ctx, req)
	})
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	var s aggregate.State
	appendDecided(t, h, "tc3", &s, aggregate.Start{Run: "tc3", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	h.release("ghost")
	h.startRunner([]*agent.Agent{a}, runner.WithoutScan())

	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "tc3"}); err != nil {
		t.Fatal(err)
	}
	_, out := finished(t, h, "tc3")
	if out.Kind != events.OutcomeCancelled {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
	for _, ev := range h.eventsOf("tc3") {
		if mr, ok := ev.(events.ModelRequested); ok && mr.Turn > 1 {
			b, _ := json.Marshal(mr)
			t.Errorf("the takeover for the cancel requested another model call: %s", b)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the model was called %d times after the cancel", n)
	}
}
