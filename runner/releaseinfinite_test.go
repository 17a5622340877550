package runner_test

import (
	"context"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// TestSemantics8_AJoiningRunnerLeavesAnInfiniteBodyCertain (docs/semantics.md
// §8,
// graceful row; §3: only a lost runner or worker makes a body uncertain):
// a partition released because a runner joined waits for a running body
// whose tool timeout is tools.Infinity (no recorded deadline) until it
// ends, not only the drain window; the joiner recovers the run handed
// off, with nothing uncertain, and the body runs once. (The release once forgot
// the run with its body running.)
func TestSemantics8_AJoiningRunnerLeavesAnInfiniteBodyCertain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "long-0"
	first, second := moving(run)
	sb := &slowBodies{d: 1500 * time.Millisecond, starts: map[string]int{}}
	mk := func() *agent.Agent {
		return build(t, payThenAnswer(50), []tools.Tool{sb.tool()}, policy.Func(allow), agent.WithToolTimeout(tools.Infinity()))
	}
	h.startRunner([]*agent.Agent{mk()}, runner.WithID(first), runner.WithDrainWindow(200*time.Millisecond))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	h.startRunner([]*agent.Agent{mk()}, runner.WithID(second), runner.WithDrainWindow(200*time.Millisecond))
	s := h.waitFor(run, "finished or suspended", func(s aggregate.State) bool {
		st := aggregate.Status(s)
		return st.Kind == aggregate.StatusFinished || st.Kind == aggregate.StatusSuspended
	})
	checkGraceful(t, h, run, s)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.starts[run] != 1 {
		t.Errorf("body started %d times", sb.starts[run])
	}
}

// slowFirst delays its first call by d.
type slowFirst struct {
	model.Model
	d     time.Duration
	calls atomic.Int64
}

func (m *slowFirst) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	if m.calls.Add(1) == 1 {
		select {
		case <-time.After(m.d):
		case <-ctx.Done():
			return model.Reply{}, ctx.Err()
		}
	}
	return m.Model.Complete(ctx, req)
}

// TestSemantics8_AJoiningRunnerLetsAnInfiniteModelCallFinish (docs/semantics.md
// §8,
// graceful row): the same for a model call without a recorded deadline
// (model timeout tools.Infinity): the release waits for its reply, which
// is recorded; no turn is spent on the rebalance (with max turns 1 the run
// completes, not budget_exhausted).
func TestSemantics8_AJoiningRunnerLetsAnInfiniteModelCallFinish(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "model-0"
	first, second := moving(run)
	mk := func(m model.Model) *agent.Agent {
		return build(t, m, nil, policy.Func(allow), agent.WithModelTimeout(tools.Infinity()), agent.WithMaxTurns(1))
	}
	m1 := &slowFirst{Model: model.NewScripted("s", model.Answer("ok")), d: 1500 * time.Millisecond}
	h.startRunner([]*agent.Agent{mk(m1)}, runner.WithID(first), runner.WithDrainWindow(200*time.Millisecond))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	until(t, "the model called", func() bool { return m1.calls.Load() == 1 })
	h.startRunner([]*agent.Agent{mk(model.NewScripted("s", model.Answer("ok")))}, runner.WithID(second), runner.WithDrainWindow(200*time.Millisecond))
	s := h.waitStatus(run, aggregate.StatusFinished)
	out, _ := s.Finished()
	if out.Kind != events.OutcomeCompleted {
		t.Errorf("run ended %s, want completed (its model call was in flight at a graceful move)", out.Kind)
	}
	checkGraceful(t, h, run, s)
}
