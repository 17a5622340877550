package runner_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (a run can always be answered; graceful row: a live
// runner's work is not cut off): a partition's release judges each of its
// runs and hands it off in one hold of the runs' locks, so that no
// decision between the two — a model reply that calls a tool whose
// timeout is tools.Infinity, recorded on a run the check has passed while
// it waits for another run's lock — starts work without a deadline that
// the release would then wait on for ever, with every other run of the
// partition answered runner_busy. Here run x's model answers while the
// release waits for run y's lock (y's approval holds it): a start of a
// third run of the partition is served within its retries.
func TestSemantics8_AReleaseJudgesAndHandsOffEachRunInOneLockHold(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true
	const x = "infd-0"
	first, second := moving(x)
	p := partition.Of(x, runner.DefaultPartitions)
	var ys []string
	for i := 1; len(ys) < 2; i++ {
		if id := fmt.Sprint("infd-", i); partition.Of(id, runner.DefaultPartitions) == p {
			ys = append(ys, id)
		}
	}
	y, other := ys[0], ys[1]
	g := &gate{open: make(chan struct{})}
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.open) }) }
	t.Cleanup(open)
	inY, relY := make(chan struct{}, 1), make(chan struct{})
	var rel sync.Once
	releaseY := func() { rel.Do(func() { close(relY) }) }
	t.Cleanup(releaseY)
	pol := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		if _, ok := policy.Reviewer(ctx); ok && a.Run == y {
			select {
			case inY <- struct{}{}:
			default:
			}
			<-relY
			return policy.Deny("no"), nil
		}
		return approvalAbove(ctx, a)
	})
	checked, lockingY, appendingX := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var ck, ly, ax sync.Once
	hook := func(event string, q int, run string) {
		switch {
		case event == "release-check" && q == p:
			ck.Do(func() { close(checked) })
		case event == "release-locking" && q == p && run == y:
			ly.Do(func() { close(lockingY) })
		case event == "resolution-appending" && run == x:
			ax.Do(func() { close(appendingX) })
		}
	}
	var blockX atomic.Bool
	relX, answeredX := make(chan struct{}), make(chan struct{})
	var rx, ansX sync.Once
	releaseX := func() { rx.Do(func() { close(relX) }) }
	t.Cleanup(releaseX)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			if blockX.Load() {
				<-relX
				defer ansX.Do(func() { close(answeredX) })
				return model.CallTools(payCall(50, "ok"))(ctx, req)
			}
			return model.CallTools(payCall(500, "ok"))(ctx, req)
		}})
	mk := func() *agent.Agent {
		return build(t, m, []tools.Tool{g.tool()}, pol, agent.WithToolTimeout(tools.Infinity()))
	}
	// Both runners on one fake ownership clock (ownClock): stepped until
	// the first owns every partition and, once the second joined, until
	// the release checks the partition's runs; it follows the wall clock
	// while the runs' work and the release's waits go on.
	clk := newOwnClock(t).as(first)
	clk2 := clk.another().as(second)
	r1, _ := h.startRunner([]*agent.Agent{mk()}, append(clk.options(hook), runner.WithDrainWindow(200*time.Millisecond))...)
	clk.advanceUntil(t, "the first runner owns every partition", 40, func() bool { return ownsAll(r1) })
	clk.follow()
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: y, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	sy := h.waitStatus(y, aggregate.StatusSuspended)
	ay := sy.Actions()[0]
	blockX.Store(true)
	if _, err := h.client.Start(c, api.StartRequest{Run: x, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	approvedY := make(chan struct{})
	go func() {
		defer close(approvedY)
		_, _ = h.client.Approve(c, api.ApproveRequest{CommandID: "ay", Run: y, Action: ay.ID, Revision: ay.Request.Revision, Approver: "desk", Credential: "alice"})
	}()
	receive(t, "y's lock held by its approval", inY)
	r2, _ := h.startRunner([]*agent.Agent{mk()}, append(clk2.options(nil), runner.WithDrainWindow(200*time.Millisecond))...)
	clk.advanceUntil(t, "the release's check", 40, closed(checked))
	clk.follow()
	// The release's lock waits (handOffJudged, in run id order: x before
	// y) are ordered by its hook against x's model reply and y's
	// approval: the release is past x, about to wait for y's lock, which
	// y's approval holds; x's model then answers (pay 50, allowed, its
	// body without a deadline), and its reply is being recorded with its
	// resolution or x's lock is held (the release's, which the reply then
	// waits for) before y's approval lets go of y's.
	receive(t, "the release about to wait for y's lock", lockingY)
	releaseX()
	receive(t, "x's model answered", answeredX)
	untilSeen(t, "x's reply being recorded with its resolution, or x's lock held", func() (bool, string) {
		return closed(appendingX)() || runner.RunLocked(r1, x), fmt.Sprintf("x's bodies started %d", g.starts.Load())
	})
	releaseY()
	receive(t, "y's approval answered, its lock let go", approvedY)
	rc := api.NewClient(h.srv.Conn, api.WithRetry(10*time.Second))
	if _, err := rc.Start(c, api.StartRequest{Run: other, Agent: "desk", Input: "x"}); err != nil {
		t.Fatalf("a start in the partition while x's infinite body runs: %v (r1 %v, r2 %v; x runner %s handed off %v)", err, r1.Stats().Partitions, r2.Stats().Partitions, h.state(x).Runner(), h.state(x).HandedOff())
	}
	t.Logf("ok: served; x runner %s", h.state(x).Runner())
}
