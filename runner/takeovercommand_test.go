package runner_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (a command to a run whose driver is gone takes it
// over with the command): the takeover a cancel was to record meets the
// previous driver's hand-off, appended first. The run stays this runner's
// to take over (handed off), and the cancel is applied with it, as it was
// when such a conflict dropped the run and the command went round again —
// not answered conflict.
func TestSemantics8_ACommandWhoseTakeoverMeetsTheHandOffIsApplied(t *testing.T) {
	h := newHarness(t)
	// The model never answers before the cancel: a run that finished
	// meanwhile would answer the cancel run_ended, which is right but not
	// what this test is about (it did, once, in CI, with a model that
	// answered at once).
	a := build(t, model.NewScripted("s", func(ctx context.Context, _ model.Request) (model.Reply, error) {
		<-ctx.Done()
		return model.Reply{}, ctx.Err()
	}), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	const run = "revcmd1"
	var s aggregate.State
	head := appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	ghostEntry(t, h, run)
	var tries atomic.Int64
	hook := func(event string, part int, id string) {
		if event != "takeover" || id != run || tries.Add(1) != 1 {
			return
		}
		now := time.Now()
		evs, err := aggregate.Decide(s, aggregate.HandOff{Runner: "ghost", ModelNotCalled: true}, now)
		if err == nil {
			_, _, err = h.srv.Log.Append(context.Background(), run, head, now, evs...)
		}
		if err != nil {
			t.Error(err)
		}
	}
	// On the fake ownership clock: the judgement's grace (ghost's key was
	// never written) passes by hand, a cancel sent at each step.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, append(clk.withoutScan().options(hook), runner.WithoutScan())...)
	p := partition.Of(run, runner.DefaultPartitions)
	c := ctx(t)
	clk.advanceUntil(t, "the run's partition claimed", 40, func() bool { return slices.Contains(r.Stats().Partitions, p) })
	var err error
	clk.advanceUntil(t, "a cancel answered other than runner_busy", 40, func() bool {
		_, err = h.client.Cancel(c, api.CancelRequest{CommandID: "c1", Run: run})
		return weft.ErrorCode(err) != weft.CodeRunnerBusy
	})
	clk.follow()
	if err != nil {
		t.Fatalf("cancel answered %v (takeover tries %d, recoveries %+v)", err, tries.Load(), h.recoveries(run))
	}
	if tries.Load() < 2 {
		t.Fatalf("the hand-off was not met: %d takeover tries", tries.Load())
	}
	if o, _ := h.waitStatus(run, aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCancelled {
		t.Errorf("run ended %s after the cancel, want canceled", events.DescribeOutcome(o))
	}
}
