package runner

// Releasing partitions (docs/adr/0019-partitions.md): a runner gives up
// the partitions assigned to another live runner, or all of them when it
// drains, with the hand-off of docs/semantics.md §8 (graceful: nothing
// uncertain).

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner/internal/ownership"
)

// acquiring counts an acquisition of run (a read from the log, a start)
// in flight in its partition until done is called — once the run is
// installed in r.runs, or the acquisition failed: in every case — and
// verifies, after a reconnection, the owned partitions first
// (ownership.Coordinator.Acquiring says why it is counted before the
// ownership check, owns). It returns runner_busy when a key cannot be
// read (checked again at the next acquisition).
func (r *Runner) acquiring(ctx context.Context, run string) (done func(), err error) {
	done, err = r.own.Acquiring(ctx, partition.Of(run, r.nparts))
	if err != nil {
		return done, &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("the partitions of this runner are being verified after a reconnection (%v); retry", err)}
	}
	return done, nil
}

// handOffPartition is a release's part of the command loop: the runs of
// partition p (releasing, its acquisitions waited for) this runner holds
// are judged and handed off in one hold of their locks (handOffJudged: a
// run with work without a deadline postpones the release, its runs
// served meanwhile), their running bodies and model calls are waited for
// — up to their recorded deadlines (a body's attempt deadline, its tool
// timeout, is recorded with the attempt: bounded), at least the drain
// window — and recorded, and the runs are forgotten. A run whose lock or
// hand-off could not be had is tried again, for as long as ctx lasts: it
// returns HandedOff only once every run of the partition is handed off
// and forgotten.
func (r *Runner) handOffPartition(ctx context.Context, p int) ownership.HandOff {
	back := backoff.New(50*time.Millisecond, time.Second)
	for {
		handed, unbounded := r.handOffJudged(ctx, p)
		if ctx.Err() != nil {
			return ownership.Stopped // the drain releases it (Coordinator.Drain, Release)
		}
		if unbounded {
			// A run of it has work without a deadline (a decision that
			// was in progress started it): not released yet, its runs
			// served meanwhile; the runs handed off by an earlier pass
			// are forgotten, and recovered by this partition's owner.
			return ownership.Postponed
		}
		if handed != nil {
			if !r.waitSettled(ctx, handed) {
				return ownership.Stopped
			}
			r.forgetHandedOff(ctx, handed)
		}
		left := r.runsOf(p)
		if len(left) == 0 {
			// Until the key is deleted the partition stays
			// "releasing": none of its runs is acquired here (a run
			// this runner handed off is never recovered by it).
			return ownership.HandedOff
		}
		r.log.Warn("partition release: runs not handed off yet; trying again", "partition", p, "runs", len(left))
		r.testHook("release-retry", p, "")
		if back.Wait(ctx) != nil {
			return ownership.Stopped
		}
	}
}

// unboundedIn reports whether a run of partition p this runner holds has
// work running without a recorded deadline: a body or model call whose
// timeout is tools.Infinity. Such a partition is not released
// (ownership's Table.Pass, through ownershipLoop.Unbounded) until that
// work ends: a release that began would answer every other run of the
// partition runner_busy for as long as it runs, and a hand-off past the
// drain window would make the body uncertain though its runner is not
// lost (docs/semantics.md §3, §8). Its runs stay this runner's and are
// served meanwhile; the assignment moves it once the work ended.
func (r *Runner) unboundedIn(p int) bool {
	_, unbounded, _ := r.runningUntil(r.runsOf(p))
	return unbounded
}

// handOffJudged judges the runs of partition p this runner holds (a
// release that has begun: p marked releasing, its acquisitions waited
// for) and hands them off in one hold of all their locks, taken in run id
// order within one deadline (WithHandOffLockTimeout; a command holds a
// run's lock at most its command timeout). Judging and handing off are
// one hold so that no decision between them — a held run's model reply,
// approval or queued command — starts work without a deadline that the
// release would then wait on for ever (docs/semantics.md §8: a run can always
// be
// answered): once handed off, a run fences no new attempt and requests
// no model turn. When some of that work runs already, nothing is handed
// off and unbounded is true. When a lock is not had by the deadline,
// nothing is handed off and both results are zero (tried again). It
// returns the runs handed off, to wait for (waitSettled) and forget.
func (r *Runner) handOffJudged(ctx context.Context, p int) (handed []*run, unbounded bool) {
	list := r.runsOf(p)
	slices.SortFunc(list, func(a, b *run) int { return strings.Compare(a.id, b.id) })
	lctx, cancel := context.WithTimeout(ctx, r.handOffLock)
	defer cancel()
	held := make([]*run, 0, len(list))
	defer func() {
		for _, rn := range held {
			rn.unlock()
		}
	}()
	for _, rn := range list {
		r.testHook("release-locking", p, rn.id)
		if rn.lock(lctx) != nil {
			return nil, false
		}
		held = append(held, rn)
	}
	for _, rn := range held {
		if _, u := r.inFlight(rn, func(*run, time.Time) {}); u {
			return nil, true
		}
	}
	for _, rn := range held {
		actx, acancel := context.WithTimeout(ctx, r.handOffLock)
		if !r.handOffLocked(actx, rn) {
			handed = append(handed, rn)
		}
		acancel()
	}
	return handed, false
}

// settleGrace is how long past a recorded deadline a release still waits
// for the work's outcome (the timeout's own recording).
const settleGrace = time.Second

// waitSettled waits until nothing of list (runs handed off) runs any more:
// no body running, no model call in flight. It waits at least the drain
// window and, for the work whose deadline is recorded, up to that
// deadline and settleGrace; for work without one (a tool or model call
// whose timeout is tools.Infinity) until it ends: a graceful release
// leaves nothing uncertain that was not lost (docs/semantics.md §8: it is a
// live
// runner's work, and only a runner that is gone is recovered from). It
// returns false when ctx ends first.
func (r *Runner) waitSettled(ctx context.Context, list []*run) bool {
	limit := r.clk.Now().Add(r.drain)
	for {
		busy, unbounded, until := r.runningUntil(list)
		if !busy {
			return true
		}
		if until.After(limit) {
			limit = until
		}
		if !unbounded && r.clk.Now().After(limit) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.clk.After(20 * time.Millisecond):
		}
	}
}

// runningUntil reports whether something of list runs (as busyIn), whether
// some of it has no recorded deadline (unbounded), and the latest
// wall-clock time its recorded deadlines (a running attempt's, an
// in-flight model call's) allow it, plus settleGrace. A run whose lock is
// held is busy, its deadline unknown (zero): a command being applied ends
// within the command timeout.
func (r *Runner) runningUntil(list []*run) (busy, unbounded bool, until time.Time) {
	later := func(rn *run, at time.Time) {
		if w := r.clk.Now().Add(at.Sub(r.clock(rn)) + settleGrace); w.After(until) {
			until = w
		}
	}
	for _, rn := range list {
		select {
		case rn.sem <- struct{}{}:
		default:
			busy = true // a command is being applied
			continue
		}
		b, u := r.inFlight(rn, later)
		busy, unbounded = busy || b, unbounded || u
		rn.unlock()
	}
	return busy, unbounded, until
}

// inFlight reports whether rn (locked) has work running — a body, a model
// call — and whether some of it has no recorded deadline (unbounded); it
// calls later with each recorded deadline.
func (r *Runner) inFlight(rn *run, later func(*run, time.Time)) (busy, unbounded bool) {
	if rn.takeover != nil || !rn.driven {
		return false, false
	}
	if rn.modelTurn != 0 {
		busy = true
		switch m := aggregate.Pending(rn.state).Model; {
		case m == nil:
		case m.Deadline.IsZero():
			unbounded = true
		default:
			later(rn, m.Deadline)
		}
	}
	for _, a := range rn.state.Actions() {
		if a.State == aggregate.ActionRunning {
			busy = true
			if a.Attempt.Deadline != nil {
				later(rn, *a.Attempt.Deadline)
			} else {
				unbounded = true
			}
		}
	}
	return busy, unbounded
}

// handOffQuiet is a drain's quiet release's part of the command loop
// (ownership.Coordinator.Drain): the runs of partition p (releasing, its
// acquisitions waited for), handed off at the start of the drain, are
// forgotten when nothing of them runs any more. It returns HandedOff only
// when no run of p is held afterwards (the key is then deleted),
// Postponed otherwise (the partition is tried again, and at the end of
// the drain released with the runner).
func (r *Runner) handOffQuiet(ctx context.Context, p int) ownership.HandOff {
	list := r.runsOf(p)
	if r.busyIn(list) {
		return ownership.Postponed
	}
	r.handOff(ctx, list, handOffForgetRecorded)
	if len(r.runsOf(p)) == 0 {
		return ownership.HandedOff
	}
	return ownership.Postponed
}

// heldPartitions lists the partitions of which this runner holds a run
// (a drained runner's: their keys are deleted only once it stopped
// driving them, ownership.Coordinator.Release).
func (r *Runner) heldPartitions() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[int]bool{}
	var list []int
	for id := range r.runs {
		if p := partition.Of(id, r.nparts); !seen[p] {
			seen[p] = true
			list = append(list, p)
		}
	}
	return list
}
