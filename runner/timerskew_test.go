package runner_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (a run can always be answered) with the store clock
// behind the wall clock (runner.WithClock): a tool timeout's local timer is
// armed by the wall clock (runner/timers.go), at which the attempt's
// recorded deadline has passed, so it fires at once; its decision, made at
// the store clock, finds the deadline not reached and records nothing. It
// fires once — it is not armed again for the same deadline, and its firing
// is not retried — so it holds the run only for that one decision, never
// in a loop that keeps a command from the run (the suspicion when
// TestScenario27_SettleWaitsByTheStoreClock was once answered runner_busy).
// What it cannot see: it watches for a second firing over eight rounds of
// rebalancing (two leases) only, so a re-arm after a backoff longer than
// that would pass unseen.
func TestSemantics8_ATimerFiredEarlyByASkewedClockFiresOnce(t *testing.T) {
	t.Parallel()
	var fired, passes atomic.Int64
	hook := runner.WithHook(func(event string, _ int, run string) {
		switch {
		case event == "timer-fired" && run == "skew1":
			fired.Add(1)
		case event == "partition-pass":
			passes.Add(1)
		}
	})
	behind := runner.WithClock(func() time.Time { return time.Now().Add(-time.Minute) })
	h, _ := runningExternal(t, "skew1", tools.After(30*time.Second), behind, hook)
	deadline := time.Now().Add(20 * time.Second)
	for fired.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the tool timeout's timer never fired")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Eight rounds of rebalancing (a quarter lease each): a timer armed
	// again at each firing would have fired many times by then.
	from := passes.Load()
	for passes.Load() < from+8 {
		if time.Now().After(deadline.Add(20 * time.Second)) {
			t.Fatal("the partition loop stopped")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := fired.Load(); n != 1 {
		t.Fatalf("the early timer fired %d times, want 1", n)
	}
	if a := h.state("skew1").Actions()[0]; a.State != aggregate.ActionRunning {
		t.Fatalf("action %s: the early timer's decision recorded something", a.State)
	}
}
