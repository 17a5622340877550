package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// recoveries lists run's RunRecovered events in log order.
func (h *harness) recoveries(run string) []events.RunRecovered {
	h.t.Helper()
	envs, _, err := h.srv.Log.Load(ctx(h.t), run)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []events.RunRecovered
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			h.t.Fatal(err)
		}
		if rr, ok := ev.(events.RunRecovered); ok {
			out = append(out, rr)
		}
	}
	return out
}

// release marks runner id as released until the test ends: its liveness
// key deleted, as a drained runner deletes it (the delete marker says it is
// gone; it is renewed within the lease).
func (h *harness) release(id string) {
	h.t.Helper()
	live, err := h.srv.JS.KeyValue(ctx(h.t), runner.RunnersBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := live.Delete(ctx(h.t), id); err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
				_ = live.Delete(context.Background(), id)
			}
		}
	}()
	h.t.Cleanup(func() { close(done); <-stopped })
}

// docs/semantics.md §8 "only a runner that is gone is recovered from": a live
// runner never takes over a run it drives itself. Many commands for runs
// whose driver ("ghost") is gone reach one runner at once (a takeover scan,
// redelivered reports, timer firings): acquisition of a run is
// single-flight in the process, so each run is recovered exactly once, from
// ghost, and never from the runner itself.
func TestRecoverOnlyFromAGoneRunner_ConcurrentAcquisitionsAreSingleFlight(t *testing.T) {
	t.Parallel()
	const runs, concurrent = 12, 16
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.Answer("unused"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))

	// Each run waits for its first model call; its driver ghost never ran
	// here. (Not for an approval: a run waiting only for people is idle,
	// and its takeover is recorded only with a command that records
	// something — never for a wake.)
	for i := range runs {
		run := fmt.Sprint("sf-", i)
		var s aggregate.State
		appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	}
	// ghost has released its runs (so nobody waits for a grace to judge it).
	h.release("ghost")
	rb, _ := h.startRunner([]*agent.Agent{a})

	// Every run gets concurrent wake-ups at the same moment.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range runs {
		run := fmt.Sprint("sf-", i)
		wake, _ := json.Marshal(map[string]any{"kind": "wake", "run": run})
		for range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, _ = h.srv.Conn.Request(runner.ForwardPrefix+rb.ID()+".cmd", wake, 10*time.Second)
			}()
		}
	}
	close(start)
	wg.Wait()
	for i := range runs {
		run := fmt.Sprint("sf-", i)
		h.waitFor(run, "the takeover", func(s aggregate.State) bool { return s.Runner() == rb.ID() })
		rs := h.recoveries(run)
		if len(rs) != 1 {
			t.Errorf("%s: %d recoveries %+v, want exactly one (from ghost)", run, len(rs), rs)
		}
		for _, rr := range rs {
			if rr.Previous == rb.ID() {
				t.Errorf("%s: runner %s recovered the run from itself: %+v", run, rb.ID(), rr)
			}
		}
	}
}
