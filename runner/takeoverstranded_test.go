package runner_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// answeringAgent is an agent whose model answers any request (answering).
func answeringAgent(t *testing.T) *agent.Agent {
	t.Helper()
	return build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
}

// ghostEntry puts run's weft_drivers entry naming "ghost", a runner that
// never wrote its liveness key (killed), and returns the bucket.
func ghostEntry(t *testing.T, h *harness, run string) jetstream.KeyValue {
	t.Helper()
	kv, err := h.srv.JS.KeyValue(ctx(t), runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx(t), runner.DriverKey(run, runner.DefaultPartitions), []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	return kv
}

// docs/semantics.md §8 (a run can always be answered; pending work is
// retried, never dropped): a runner ("ghost") was SIGKILLed right after a
// run's run_started append, with its model call in flight and its
// weft_drivers entry naming it. The owner of the run's partition finds the
// entry and takes the run over — but the append of its takeover fails
// (the log is full: refused, nothing recorded). The run is now in the
// owner's memory with its takeover still to record. Once the log takes
// appends again, the run must be taken over and driven without any
// command reaching it: the scan of the partition goes on until the entry's
// run is taken over, not until a wake was merely tried. (Before, the
// failed takeover counted as done, the partition was no longer due, and
// every later scan skipped the run as held: stranded until a command.)
func TestSemantics8_AFailedTakeoverIsTriedAgainWithoutACommand(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "strand1"
	var s aggregate.State
	appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	if w := aggregate.Pending(s); w.Model == nil || len(w.Timers) != 0 {
		t.Fatalf("crafted history: want a model call pending and no timer, got %+v", w)
	}
	ghostEntry(t, h, run)
	// The log refuses every append from now on (an operator's limit).
	capped := provision.EventsConfig()
	capped.MaxMsgs = int64(h.eventsInfo().State.Msgs)
	if _, err := h.srv.JS.UpdateStream(ctx(t), capped); err != nil {
		t.Fatal(err)
	}
	// On the fake ownership clock: the judgement's grace and the scans'
	// rounds pass by hand, not by sleeping.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, clk.options(nil)...)
	// The owner takes the run over (once it can tell that ghost, whose key
	// was never written, is gone: the whole grace, partition.JudgeGrace)
	// and fails to record it.
	clk.advanceUntil(t, "the owner tried to take the run over", 40, func() bool { return runner.Holds(r, run) })
	clk.scansEnd(t, 2) // the scan that tried has returned
	if got := h.eventsOf(run); len(got) != 2 {
		t.Fatalf("the log took an append while full: %d events", len(got))
	}
	if _, err := h.srv.JS.UpdateStream(ctx(t), provision.EventsConfig()); err != nil {
		t.Fatal(err)
	}
	// No command is sent: the owner alone takes the run over — the held
	// run's own retry (finishTakeover: retryLater), whose backoff is the
	// wall clock's, not ownership's: from here the ownership clock follows
	// the wall clock (the scans go on every lease/4, the runner's key stays
	// beaten). A generous bound: the scan of a due partition is every
	// lease/4 (0.5 s here), the full scan every 32 of those.
	clk.follow()
	wctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	for {
		st := h.state(run)
		if _, fin := st.Finished(); fin {
			out, _ := st.Finished()
			if out.Kind != events.OutcomeCompleted {
				t.Fatalf("outcome %s", events.DescribeOutcome(out))
			}
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("the run was not taken over without a command: status %s, events %v", aggregate.Status(st).Kind, h.eventsOf(run))
		}
		// wall clock: a poll of the held run's retry (retryLater), on the wall clock's backoff (see above)
		time.Sleep(50 * time.Millisecond)
	}
	recovered := 0
	for _, ev := range h.eventsOf(run) {
		if ev.EventName() == events.NameRunRecovered {
			recovered++
		}
	}
	if recovered != 1 {
		t.Fatalf("%d run_recovered events, want 1", recovered)
	}
}

// docs/semantics.md §8 (a run can always be answered): a runner wrote a
// run's driver entry (the start's intent) and appended its run_started,
// and was killed; the owner of the partition reads the run before the
// append is visible to it (a read answered by a replica behind, in a
// cluster) and finds no event. The entry is not removed at that first
// look — that would leave the run, once visible, to a command — but
// looked at again by the next scans, which find the run and take it over.
// Here the append is made between the first look and the second, from the
// runner's own hook just before its second read ("acquire-owned").
func TestSemantics8_ARunNotYetVisibleKeepsItsDriverEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "late1"
	ghostEntry(t, h, run)
	var looks atomic.Int64
	appended := make(chan error, 1)
	hook := func(event string, _ int, id string) {
		if event != "acquire-owned" || id != run || looks.Add(1) != 2 {
			return
		}
		now := time.Now()
		evs, err := aggregate.Decide(aggregate.State{}, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"}, now)
		if err == nil {
			_, _, err = h.srv.Log.Append(context.Background(), run, eventlog.Head{}, now, evs...)
		}
		appended <- err
	}
	// On the fake ownership clock: the scans' rounds and the judgement's
	// grace (ghost's key was never written) pass by hand.
	clk := newOwnClock(t)
	h.startRunner([]*agent.Agent{a}, clk.options(hook)...)
	clk.advanceUntil(t, "a second look at the run's entry after finding no event", 40, func() bool {
		select {
		case err := <-appended:
			if err != nil {
				t.Fatal(err)
			}
			return true
		default:
			return false
		}
	})
	clk.advanceUntil(t, "the run taken over and finished", 40, func() bool { _, fin := h.state(run).Finished(); return fin })
	if _, out := finished(t, h, run); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
}

// docs/semantics.md §8: the driver entry of a start whose append never
// landed (no event of the run, ever) is still removed by the owner's
// scans, once the run has stayed unknown to them for two leases: it does
// not cost every later scan a wake.
func TestSemantics8_AnEntryOfARunThatNeverStartedIsRemoved(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	kv := ghostEntry(t, h, "never1")
	key := runner.DriverKey("never1", runner.DefaultPartitions)
	// On the fake ownership clock: the two leases (unknownRunGrace) pass
	// by hand, a scan at each step.
	clk := newOwnClock(t)
	h.startRunner([]*agent.Agent{a}, clk.options(nil)...)
	clk.advanceUntil(t, "the entry of a run that never started removed", 40, func() bool {
		_, err := kv.Get(ctx(t), key)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

// docs/semantics.md §8 (only a runner that is gone is recovered from; a
// partition moves only by compare-and-set): a takeover that is tried again
// after its append failed is decided on the store's owner of the
// partition, not on the check made when the run was first acquired. The
// owner takes a run over while the log refuses appends; while it is
// paused in the middle of trying again (its "takeover" hook), another
// runner claims the partition and the log takes appends again. Resumed
// before its watcher applied the claim, it records no run_recovered: the
// run is the new owner's. (Before, the retry appended its recovery on the
// strength of the first check, in a partition it no longer owned.)
func TestSemantics8_ATakeoverTriedAgainIsDecidedOnTheStoresOwner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "retried1"
	var s aggregate.State
	appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	ghostEntry(t, h, run)
	capped := provision.EventsConfig()
	capped.MaxMsgs = int64(h.eventsInfo().State.Msgs)
	if _, err := h.srv.JS.UpdateStream(ctx(t), capped); err != nil {
		t.Fatal(err)
	}
	h.beating("other", []byte(`{"schema":1,"at":"x"}`))
	parts, err := h.srv.JS.KeyValue(ctx(t), runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("p.%04d", partition.Of(run, runner.DefaultPartitions))
	var tries atomic.Int64
	moved := make(chan error, 1)
	hook := func(event string, _ int, id string) {
		if event != "takeover" || id != run || tries.Add(1) != 2 {
			return
		}
		// Paused here: "other" claims the partition (a compare-and-set at
		// the key's revision) and the log takes appends again.
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e, err := parts.Get(c, key)
		if err == nil {
			_, err = parts.Update(c, key, []byte("other"), e.Revision())
		}
		if err == nil {
			_, err = h.srv.JS.UpdateStream(c, provision.EventsConfig())
		}
		moved <- err
	}
	// On the fake ownership clock: the judgement's grace (ghost's key was
	// never written) and the scans' rounds pass by hand.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, clk.options(hook)...)
	clk.advanceUntil(t, "a first try of the takeover", 40, func() bool { return tries.Load() >= 1 })
	// The second try is the held run's retry (retryLater), on the wall
	// clock's backoff: the ownership clock follows the wall clock from here.
	clk.follow()
	select {
	case err := <-moved:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("the takeover was tried %d times, want a second try", tries.Load())
	}
	// The try that resumed either recorded its takeover or dropped the
	// run; either way the runner lets it go once it has seen the claim.
	deadline := time.Now().Add(30 * time.Second)
	for runner.Holds(r, run) {
		if time.Now().After(deadline) {
			t.Fatal("the runner still holds a run of a partition it lost")
		}
		// wall clock: a poll until the runner's watch of weft_partitions applied the claim: not ownership's time
		time.Sleep(10 * time.Millisecond)
	}
	if rr := h.recoveries(run); len(rr) != 0 {
		t.Fatalf("the run was recovered %+v by a runner that lost its partition", rr)
	}
}

// docs/semantics.md §8 (pending work is retried, never dropped): a takeover
// started by a command, whose append fails (the log is full: the command
// is answered unavailable and not sent again), is tried again by the
// runner without any command once the log takes appends. The runner makes
// no scan here: only the command reached the run. (Before, the run stayed
// held with its takeover still to record until another command came.)
func TestSemantics8_ATakeoverACommandFailedToRecordIsTriedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "strandcmd1"
	var s aggregate.State
	appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	ghostEntry(t, h, run)
	// On the fake ownership clock: the judgement's grace (ghost's key was
	// never written) passes by hand.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, append(clk.withoutScan().options(nil), runner.WithoutScan())...)
	p := partition.Of(run, runner.DefaultPartitions)
	c := ctx(t)
	clk.advanceUntil(t, "the run's partition claimed", 40, func() bool { return slices.Contains(r.Stats().Partitions, p) })
	capped := provision.EventsConfig()
	capped.MaxMsgs = int64(h.eventsInfo().State.Msgs)
	if _, err := h.srv.JS.UpdateStream(c, capped); err != nil {
		t.Fatal(err)
	}
	// runner_busy until the runner can tell that ghost, whose key was
	// never written, is gone.
	var err error
	clk.advanceUntil(t, "a cancel answered other than runner_busy", 40, func() bool {
		_, err = h.client.Cancel(c, api.CancelRequest{CommandID: "c1", Run: run})
		return weft.ErrorCode(err) != weft.CodeRunnerBusy
	})
	if err == nil || !runner.Holds(r, run) {
		t.Fatalf("cancel with the log full: %v, held %v; want a failure that leaves the takeover pending", err, runner.Holds(r, run))
	}
	if got := h.eventsOf(run); len(got) != 2 {
		t.Fatalf("the log took an append while full: %d events", len(got))
	}
	if _, err := h.srv.JS.UpdateStream(c, provision.EventsConfig()); err != nil {
		t.Fatal(err)
	}
	// Tried again by the held run's retry (retryLater), on the wall
	// clock's backoff: the ownership clock follows the wall clock from here.
	clk.follow()
	if _, out := finished(t, h, run); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
	if rr := h.recoveries(run); len(rr) != 1 {
		t.Fatalf("%d run_recovered events, want 1", len(rr))
	}
}

// docs/semantics.md §8 (a run can always be answered): the partition loop
// never waits for a held run. A run's takeover failed (the log is full)
// and the try after it is held up (its "takeover" hook blocks, as a
// command holding the run would): meanwhile a partition's key is deleted
// (its owner released it), and this runner claims it. (Before, the scan
// woke a held run whose takeover failed from the partition loop, waiting
// for the run's lock up to 30 s, and no claim was made meanwhile.)
func TestSemantics8_AHeldRunDoesNotHoldUpPartitionClaims(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := answeringAgent(t)
	const run = "holdup1"
	var s aggregate.State
	appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	ghostEntry(t, h, run)
	capped := provision.EventsConfig()
	capped.MaxMsgs = int64(h.eventsInfo().State.Msgs)
	if _, err := h.srv.JS.UpdateStream(ctx(t), capped); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	blocked, unblock := make(chan struct{}), make(chan struct{})
	defer close(unblock)
	hook := func(event string, _ int, id string) {
		if event == "takeover" && id == run && tries.Add(1) == 2 {
			close(blocked)
			<-unblock
		}
	}
	// On the fake ownership clock: the judgement's grace (ghost's key was
	// never written) and the rounds pass by hand.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, clk.options(hook)...)
	clk.advanceUntil(t, "a first try of the takeover", 40, func() bool { return tries.Load() >= 1 })
	// The second try is the held run's retry (retryLater), on the wall
	// clock's backoff: waited for in real time, the ownership clock
	// following it meanwhile (the runner keeps its key); the next step
	// stops following.
	clk.follow()
	select {
	case <-blocked:
	case <-time.After(40 * time.Second):
		t.Fatalf("the takeover was tried %d times, want a second try", tries.Load())
	}
	parts, err := h.srv.JS.KeyValue(ctx(t), runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	q := (partition.Of(run, runner.DefaultPartitions) + 1) % runner.DefaultPartitions
	key := fmt.Sprintf("p.%04d", q)
	if err := parts.Delete(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	clk.advanceUntil(t, fmt.Sprintf("partition %d, released, claimed while a held run's takeover was being tried", q), 40, func() bool {
		e, err := parts.Get(ctx(t), key)
		return err == nil && string(e.Value()) == r.ID()
	})
}
