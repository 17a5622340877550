package runner_test

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 "only a runner that is gone is recovered from", as
// the tests' ownership clock (ownClock) keeps it: a step that waits on a
// runner that does not answer — here the second runner's scan held for
// two leases of the wall clock, as a slow scan under load would be — does
// not leave the clock still for longer than the runners bucket's max age
// (a lease of the server's time). Both runners live, so both keep their
// liveness keys: neither is judged gone and the partitions stay as they
// settled. Before, a step waited 5 s of the wall clock on the clock
// standing still: both keys lapsed on the server, and the first runner
// judged the live second one gone ("liveness key absent") and took its
// partitions.
func TestOwnClock_AStepWaitingOnARunnerLapsesNoLiveRunnersKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true // the partitions move on the clock's steps
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	logs := newJudgedLog()
	var holding atomic.Bool
	release := make(chan struct{})
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // before the runners stop
	clk := newOwnClock(t)
	clk2 := clk.another()
	r1, _ := h.startRunner([]*agent.Agent{a}, append(clk.options(nil), runner.WithLogger(slog.New(logs)))...)
	clk.balance(t, r1)
	r2, _ := h.startRunner([]*agent.Agent{a}, append(clk2.options(func(event string, _ int, _ string) {
		if event == "partition-scanned" && holding.Load() {
			<-release // the scan's wake holds its token: no scan of r2 ends until then
		}
	}), runner.WithLogger(slog.New(logs)))...)
	clk.balance(t, r1, r2)
	holding.Store(true)
	held := time.Now()
	for time.Since(held) < 2*clk.lease {
		clk.step()
	}
	holding.Store(false)
	free()
	// The peers' views see the keys again (or judge them gone) within a
	// few rounds: a lease of ownership's time.
	for range 8 {
		clk.step()
	}
	for _, r := range []*runner.Runner{r1, r2} {
		if why := logs.of(r.ID()); len(why) > 0 {
			t.Errorf("the live runner %s was judged gone (%v) after the steps waited %s of the wall clock on the second runner's held scan", r.ID(), why, 2*clk.lease)
		}
	}
	if !assigned(r1, r2) {
		t.Errorf("the partitions did not stay settled between the two live runners: r1 owns %d, r2 %d", len(r1.Stats().Partitions), len(r2.Stats().Partitions))
	}
}
