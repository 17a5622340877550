package runner_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/runner"
)

// docs/semantics.md §8 (a run can always be answered; pending work is
// retried, never dropped): the owner of a partition takes over a run of
// its previous driver ("ghost"), which gave the partition up — paused
// while another runner claimed it, then resumed and releasing it: it
// appends the run's hand-off (or a report of its work in flight) between
// the owner's read of the run and the owner's append of its takeover. The
// takeover's append conflicts; the run is still the owner's to take over
// (with the cause the log says now, handed off), and it is, without any
// command: the run stays held with its takeover to record, tried again.
// (Before, the conflict dropped the run as driven by another runner — the
// very driver it was taken over from — and nothing tried the takeover
// again: the run waited for the next full scan of its entry, a command,
// or for ever once the entry was gone. Chaos seed 2: run_stranded after a
// run_handed_off by a runner resumed from SIGSTOP.)
func TestSemantics8_ATakeoverThatMeetsThePreviousDriversHandOffIsTriedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "handedoff1"
	var s aggregate.State
	head := appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	if w := aggregate.Pending(s); w.Model == nil {
		t.Fatalf("crafted history: want a model call pending, got %+v", w)
	}
	ghostEntry(t, h, run)
	var tries atomic.Int64
	handed := make(chan error, 1)
	hook := func(event string, part int, id string) {
		if event != "takeover" || id != run || tries.Add(1) != 1 {
			return
		}
		// The owner read the run and is about to record its takeover:
		// ghost's hand-off lands first.
		now := time.Now()
		evs, err := aggregate.Decide(s, aggregate.HandOff{Runner: "ghost", ModelNotCalled: true}, now)
		if err == nil {
			_, _, err = h.srv.Log.Append(context.Background(), run, head, now, evs...)
		}
		handed <- err
	}
	// On the fake ownership clock: the judgement's grace (ghost's key was
	// never written) and the scans' rounds pass by hand.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, clk.options(hook)...)
	clk.advanceUntil(t, "the owner tried to take the run over", 40, func() bool {
		select {
		case err := <-handed:
			if err != nil {
				t.Fatal(err)
			}
			return true
		default:
			return false
		}
	})
	// Once the scan that tried has returned, the run is recovered, or
	// still held with its takeover to record (tried again): never dropped
	// as another runner's — nothing would drive it until the next full
	// scan, or a command, or never once its entry is gone. From here the
	// ownership clock follows the wall clock, on which the held run's
	// retry (retryLater) is made.
	clk.follow()
	clk.waitScans(t, 2)
	if !runner.Holds(r, run) && len(h.recoveries(run)) == 0 {
		t.Fatalf("the run handed off during its takeover was dropped: not held, not recovered; events %v", h.eventsOf(run))
	}
	// No command is sent: the owner's retry alone takes the run over.
	wctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for {
		st := h.state(run)
		if out, fin := st.Finished(); fin {
			if out.Kind != events.OutcomeCompleted {
				t.Fatalf("outcome %s", events.DescribeOutcome(out))
			}
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("the run handed off during its takeover was never taken over without a command: status %s, events %v", aggregate.Status(st).Kind, h.eventsOf(run))
		}
		// wall clock: a poll of the held run's retry (retryLater), on the wall clock's backoff (see above)
		time.Sleep(50 * time.Millisecond)
	}
	rr := h.recoveries(run)
	if len(rr) != 1 || rr[0].Cause != events.RecoveredHandedOff || rr[0].Previous != "ghost" {
		t.Fatalf("recoveries %+v, want one from ghost, handed off", rr)
	}
}

// docs/semantics.md §8: the same race, where the previous driver's append
// that lands first ends the run (here a cancel decided on its side): the
// owner's takeover is not kept to try again — a recovery of a finished run
// would be refused by the decision core (an internal refusal) — the run
// is dropped, never recovered, and stays finished.
func TestSemantics8_ATakeoverThatMeetsThePreviousDriversEndIsDropped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "endedfirst1"
	var s aggregate.State
	head := appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	ghostEntry(t, h, run)
	var tries atomic.Int64
	ended := make(chan error, 1)
	hook := func(event string, part int, id string) {
		if event != "takeover" || id != run || tries.Add(1) != 1 {
			return
		}
		now := time.Now()
		evs, err := aggregate.Decide(s, aggregate.Cancel{By: "tester", Reason: "ended first"}, now)
		if err == nil {
			_, _, err = h.srv.Log.Append(context.Background(), run, head, now, evs...)
		}
		ended <- err
	}
	// On the fake ownership clock: the judgement's grace (ghost's key was
	// never written) and the scans' rounds pass by hand.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, clk.options(hook)...)
	clk.advanceUntil(t, "the owner tried to take the run over", 40, func() bool {
		select {
		case err := <-ended:
			if err != nil {
				t.Fatal(err)
			}
			return true
		default:
			return false
		}
	})
	// The scans that follow are waited for on the wall clock (the clock
	// follows it): the second began after the scan that tried had
	// returned, and a retry of the takeover (retryLater) is the wall
	// clock's, and would have been made meanwhile.
	clk.follow()
	clk.waitScans(t, 2)
	if n := r.Stats().InternalRefusals; n != 0 {
		t.Fatalf("%d internal refusals: the takeover of a run its previous driver ended was tried again", n)
	}
	if rr := h.recoveries(run); len(rr) != 0 {
		t.Fatalf("a run its previous driver ended was recovered: %+v", rr)
	}
	if _, fin := h.state(run).Finished(); !fin {
		t.Fatalf("the run is not finished: %v", h.eventsOf(run))
	}
}
