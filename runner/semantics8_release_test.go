package runner_test

import (
	"encoding/json"
	"fmt"
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
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// moving returns two runner ids such that run's partition moves from the
// first to the second when the second joins (partition.Owner).
func moving(run string) (first, second string) {
	p := partition.Of(run, runner.DefaultPartitions)
	for i := 0; ; i++ {
		a, b := fmt.Sprint("ma-", i), fmt.Sprint("mb-", i)
		if partition.Owner(p, []string{a, b}) == b {
			return a, b
		}
	}
}

// payThenAnswer calls pay(amount) once, then answers.
func payThenAnswer(amount int64) model.Model {
	return model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(amount, "ok"))})
}

// hangBound bounds this package's waits for what a test expects to come
// (until, untilSeen, receive): a bound on a hang, whose failure names what
// never came (the package timeout names no cause), not a timing assertion.
const hangBound = 30 * time.Second

// until polls cond (a state of the runners, which no event announces)
// for up to hangBound.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	untilSeen(t, what, func() (bool, string) { return cond(), "" })
}

// untilSeen is until for a cond that also says what it saw, which the
// failure names: a bound on a hang (the package timeout names no cause),
// not a timing assertion. Call it from the test's goroutine only.
func untilSeen(t *testing.T, what string, cond func() (ok bool, seen string)) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if seen != "" {
				t.Fatalf("never within %v: %s (last seen: %s)", hangBound, what, seen)
			}
			t.Fatalf("never within %v: %s", hangBound, what)
		}
		// wall clock: a poll of the caller's condition, bounded by hangBound
		time.Sleep(5 * time.Millisecond)
	}
}

// receive waits for a value on ch and returns it, failing the test naming
// what never came when none came within hangBound. Call it from the test's
// goroutine only.
func receive[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(hangBound):
		t.Fatalf("never within %v: %s", hangBound, what)
		panic("unreachable")
	}
}

// checkGraceful fails unless run's recoveries are all handed_off and its
// actions all succeeded (docs/semantics.md §8, graceful: nothing uncertain).
func checkGraceful(t *testing.T, h *harness, run string, s aggregate.State) {
	t.Helper()
	for _, a := range s.Actions() {
		if a.State != aggregate.ActionSucceeded {
			t.Errorf("%s: action %s ended %s (nothing may be uncertain after a graceful move)", run, a.ID, a.State)
		}
	}
	for _, rr := range h.recoveries(run) {
		if rr.Cause != events.RecoveredHandedOff {
			t.Errorf("%s: recovered from %s with cause %s, want handed_off (its runner is alive: a graceful move)", run, rr.Previous, rr.Cause)
		}
	}
}

// docs/semantics.md §8 (a live runner never takes over a run it drives itself;
// only a runner that is gone is recovered from), for a partition that
// moves while one of its runs is being acquired: the acquisition passed
// the ownership check before the partition was marked releasing. The
// release must wait for it and hand the run off with the partition; the
// releasing runner must not drive, after the key is gone, a run of a
// partition it gave away.
func TestSemantics8_AnAcquisitionInFlightIsHandedOffWithItsPartition(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "acq-0"
	first, second := moving(run)
	p := partition.Of(run, runner.DefaultPartitions)
	// The body takes a while: the run stays in memory once approved.
	sb := &slowBodies{d: time.Second, starts: map[string]int{}}
	mk := func() *agent.Agent {
		return build(t, payThenAnswer(500), []tools.Tool{sb.tool()}, policy.Func(approvalAbove), agent.WithToolTimeout(tools.After(10*time.Second)))
	}
	var r1p atomic.Pointer[runner.Runner]
	var armed, heldAtDelete atomic.Bool
	entered, gate := make(chan struct{}), make(chan struct{})
	var gateOnce sync.Once
	hook := func(ev string, hp int, hrun string) {
		switch {
		case ev == "acquire-owned" && hrun == run && armed.CompareAndSwap(true, false):
			close(entered)
			<-gate
		case hp == p && (ev == "release-acquiring" || ev == "release-deleted"):
			if r1 := r1p.Load(); ev == "release-deleted" && r1 != nil && runner.Holds(r1, run) {
				heldAtDelete.Store(true)
			}
			gateOnce.Do(func() { close(gate) })
		}
	}
	// Both runners on one fake ownership clock (ownClock): stepped until
	// the first owns every partition and, once the second joined, until
	// the first's release of the partition met the acquisition; it
	// follows the wall clock while the runs' work goes on.
	clk := newOwnClock(t).as(first)
	clk2 := clk.another().as(second)
	h.unbalanced = true // the partitions move on the clock's steps
	r1, _ := h.startRunner([]*agent.Agent{mk()}, clk.options(hook)...)
	r1p.Store(r1)
	clk.advanceUntil(t, first+" owns every partition", 40, func() bool { return ownsAll(r1) })
	clk.follow()
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus(run, aggregate.StatusSuspended)
	until(t, "the suspended run is evicted", func() bool { return !runner.Holds(r1, run) })
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	armed.Store(true)
	approved := make(chan error, 1)
	go func() {
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a1", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
		approved <- err
	}()
	select {
	case <-entered:
	case <-c.Done():
		t.Fatal("the approval never reached the acquisition")
	}
	r2, _ := h.startRunner([]*agent.Agent{mk()}, clk2.options(nil)...)
	clk.advanceUntil(t, first+"'s release of partition "+fmt.Sprint(p)+" met the acquisition in flight", 40, closed(gate))
	clk.follow()
	if err := receive(t, "the approval's answer", approved); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if owner := h.owners()[p]; owner != first && runner.Holds(r1, run) {
		t.Errorf("%s holds %s after its partition %d went to %q: a run acquired while the partition was released is driven by a runner that gave it away", first, run, p, owner)
	}
	if heldAtDelete.Load() {
		t.Errorf("%s deleted partition %d's key holding %s", first, p, run)
	}
	s = h.waitStatus(run, aggregate.StatusFinished)
	clk.balance(t, r1, r2)
	checkGraceful(t, h, run, s)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.starts[run] != 1 {
		t.Errorf("body started %d times", sb.starts[run])
	}
}

// docs/semantics.md §8 for a partition released while a command holds one of
// its
// runs longer than a hand-off waits for a run's lock: the release must
// not delete the partition's key (the new owner would take the run over
// from a live runner that still holds it) until every run of it is
// handed off and forgotten; it tries again.
func TestSemantics8_AReleaseWaitsUntilEveryRunIsHandedOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "ho-0"
	first, second := moving(run)
	p := partition.Of(run, runner.DefaultPartitions)
	var r1p atomic.Pointer[runner.Runner]
	var heldAtDelete, retried atomic.Bool
	var unlock atomic.Pointer[func()]
	release := func() {
		if u := unlock.Load(); u != nil {
			(*u)()
		}
	}
	checked := make(chan struct{})
	var ck sync.Once
	hook := func(ev string, hp int, _ string) {
		if hp != p {
			return
		}
		switch ev {
		case "release-check":
			ck.Do(func() { close(checked) })
		case "release-retry":
			retried.Store(true)
			release()
		case "release-deleted":
			if r1 := r1p.Load(); r1 != nil && runner.Holds(r1, run) {
				heldAtDelete.Store(true)
			}
			release()
		}
	}
	// No worker: the run's attempt is fenced and never runs; the run stays
	// in memory until its tool timeout, which the release waits for once
	// it has the run's lock. Both runners are on one fake ownership clock
	// (ownClock), stepped until the first owns every partition and, once
	// the second joined, until the release checks the partition's runs;
	// from there it follows the wall clock: the timeout is recorded by
	// the run's timer (the wall clock's), and a release on a clock stepped
	// past the recorded deadline would stop waiting before it is
	// recorded, as no release does in production.
	clk := newOwnClock(t).as(first)
	clk2 := clk.another().as(second)
	h.unbalanced = true // the partitions move on the clock's steps
	a := build(t, payThenAnswer(50), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow), agent.WithToolTimeout(tools.After(3*time.Second)))
	r1, _ := h.startRunner([]*agent.Agent{a}, append(clk.options(hook), runner.WithoutWorker(),
		runner.WithHandOffLockTimeout(100*time.Millisecond), runner.WithDrainWindow(300*time.Millisecond))...)
	r1p.Store(r1)
	clk.advanceUntil(t, first+" owns every partition", 40, func() bool { return ownsAll(r1) })
	clk.follow()
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its attempt fenced", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	u, ok := runner.HoldRun(r1, run)
	if !ok {
		t.Fatalf("%s does not hold %s", first, run)
	}
	unlock.Store(&u)
	t.Cleanup(u)
	h.startRunner([]*agent.Agent{a}, append(clk2.options(nil), runner.WithoutWorker())...)
	clk.advanceUntil(t, first+"'s release of partition "+fmt.Sprint(p)+" checked its runs", 40, closed(checked))
	clk.follow()
	until(t, "the run is recovered by the partition's new owner", func() bool { return len(h.recoveries(run)) > 0 })
	if heldAtDelete.Load() {
		t.Errorf("%s deleted partition %d's key while it still held %s (its hand-off could not take the run's lock)", first, p, run)
	}
	if !retried.Load() {
		t.Errorf("the release never tried the hand-off of %s again", run)
	}
	for _, rr := range h.recoveries(run) {
		if rr.Cause != events.RecoveredHandedOff || rr.Previous != first {
			t.Errorf("%s: recovered from %s with cause %s, want handed_off from %s", run, rr.Previous, rr.Cause, first)
		}
	}
}

// docs/semantics.md §8 for a draining runner: it reads no run back from the
// log.
// A command forwarded to it for an idle run of a partition it still owns
// (another run of that partition has its body running) is answered
// runner_busy; the run is not driven again by the draining runner.
func TestSemantics8_ADrainingRunnerAcquiresNothingFromTheLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const busy = "dr-busy"
	p := partition.Of(busy, runner.DefaultPartitions)
	idle := ""
	for i := 0; idle == ""; i++ {
		if id := fmt.Sprint("dr-idle-", i); partition.Of(id, runner.DefaultPartitions) == p {
			idle = id
		}
	}
	first, second := keeping(busy)
	sb := &slowBodies{d: 2 * time.Second, starts: map[string]int{}}
	mk := func() *agent.Agent {
		return build(t, payThenAnswer(500), []tools.Tool{sb.tool()}, policy.Func(approvalAbove))
	}
	// Both runners on one fake ownership clock (ownClock): stepped until
	// the first owns every partition and, once the second joined, until
	// the partitions settled between them; it follows the wall clock while
	// the runs' work and the drain go on.
	clk := newOwnClock(t).as(first)
	clk2 := clk.another().as(second)
	h.unbalanced = true // the partitions move on the clock's steps
	r1, stop1 := h.startRunner([]*agent.Agent{mk()}, clk.options(nil)...)
	clk.advanceUntil(t, first+" owns every partition", 40, func() bool { return ownsAll(r1) })
	clk.follow()
	c := ctx(t)
	for _, run := range []string{busy, idle} {
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	approve := func(run, cid string) error {
		s := h.waitStatus(run, aggregate.StatusSuspended)
		act, _ := s.Action(aggregate.Status(s).Approvals[0])
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: cid, Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
		return err
	}
	h.waitStatus(idle, aggregate.StatusSuspended)
	// The second runner runs no body: the busy run's body runs in the
	// first one's worker, which keeps the partition while it drains.
	r2, _ := h.startRunner([]*agent.Agent{mk()}, append(clk2.options(nil), runner.WithoutWorker())...)
	clk.balance(t, r1, r2)
	clk.follow()
	if err := approve(busy, "b1"); err != nil {
		t.Fatal(err)
	}
	until(t, "the busy run's body started", func() bool {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return sb.starts[busy] == 1
	})
	until(t, "the idle run is evicted", func() bool { return !runner.Holds(r1, idle) })
	go stop1()
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	until(t, first+" says it drains", func() bool {
		e, err := live.Get(c, first)
		if err != nil {
			return false
		}
		var b struct {
			Draining bool `json:"draining"`
		}
		return json.Unmarshal(e.Value(), &b) == nil && b.Draining
	})
	if owner := h.owners()[p]; owner != first {
		t.Fatalf("partition %d is %q's already; the test needs it still with the draining %s", p, owner, first)
	}
	err = approve(idle, "i1")
	if weft.ErrorCode(err) != weft.CodeRunnerBusy {
		t.Errorf("approving %s, forwarded to the draining %s: %v, want runner_busy (a draining runner acquires nothing from the log)", idle, first, err)
	}
	if runner.Holds(r1, idle) {
		t.Errorf("the draining %s read %s back from the log", first, idle)
	}
	s := h.waitStatus(busy, aggregate.StatusFinished)
	checkGraceful(t, h, busy, s)
}

// docs/semantics.md §8, graceful: a partition released because a runner joined
// leaves nothing uncertain, also for a body that runs longer than the
// drain window: the release waits for it up to its recorded attempt
// deadline (bounded: the tool timeout is recorded with the attempt),
// then hands the run off.
func TestSemantics8_AJoiningRunnerLeavesALongBodyCertain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "long-0"
	first, second := moving(run)
	sb := &slowBodies{d: 1500 * time.Millisecond, starts: map[string]int{}}
	mk := func() *agent.Agent {
		return build(t, payThenAnswer(50), []tools.Tool{sb.tool()}, policy.Func(allow), agent.WithToolTimeout(tools.After(10*time.Second)))
	}
	// Both runners on one fake ownership clock (ownClock), stepped until
	// the first owns every partition and, once the second joined, until
	// the first's release of the run's partition checks its runs; it
	// follows the wall clock while the body runs (the release waits for
	// it on that clock: waitSettled) and the run finishes.
	clk := newOwnClock(t).as(first)
	clk2 := clk.another().as(second)
	h.unbalanced = true // the partitions move on the clock's steps
	p := partition.Of(run, runner.DefaultPartitions)
	checked := make(chan struct{})
	var ck sync.Once
	hook := func(ev string, hp int, _ string) {
		if ev == "release-check" && hp == p {
			ck.Do(func() { close(checked) })
		}
	}
	r1, _ := h.startRunner([]*agent.Agent{mk()}, append(clk.options(hook), runner.WithDrainWindow(200*time.Millisecond))...)
	clk.advanceUntil(t, first+" owns every partition", 40, func() bool { return ownsAll(r1) })
	clk.follow()
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	r2, _ := h.startRunner([]*agent.Agent{mk()}, append(clk2.options(nil), runner.WithDrainWindow(200*time.Millisecond))...)
	clk.advanceUntil(t, first+"'s release of the body's partition checked its runs", 40, closed(checked))
	clk.follow()
	s := h.waitStatus(run, aggregate.StatusFinished)
	clk.balance(t, r1, r2)
	checkGraceful(t, h, run, s)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.starts[run] != 1 {
		t.Errorf("body started %d times", sb.starts[run])
	}
}
