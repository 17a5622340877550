package runner

import (
	"context"
	"time"

	"github.com/weftrun/weft/aggregate"
)

// Idle runs (docs/adr/0014, docs/adr/0019-partitions.md). A run that waits
// only for people — aggregate.Idle: suspended with nothing in flight, no
// timer but approval expiries (armed durably) — needs nothing from a
// runner until a command, a report or a timer reaches it. Its driver
// evicts it from memory (once, with a head key, no signed head is owed:
// signhead.go) and deletes its weft_drivers entry: nothing of it
// is kept, so that neither the driver's memory nor the takeover of its
// partition grows with the runs waiting for approvals. A command or timer
// for it reaches the owner of its partition, which reads it again (its
// snapshot, stored when it was suspended, and the tail) and drives it:
// as it is when the log names this runner, otherwise with a takeover
// recorded only together with the first decision that records something
// (acquireFromLog): nothing was in flight, so there is nothing to recover.

// restsWithoutDriver reports whether a run in state s needs no runner and
// no weft_drivers entry: it is finished (or does not exist) or idle
// (aggregate.Idle) — unless this runner signs heads and a signature is
// owed (aggregate.State.HeadBehind: a person's decision, the run's end or
// an append after it follows the last head_signed). Such a run keeps its
// entry until it is signed (signHead, signBehind; a decision sealed
// with its signed head leaves none owed, sealFor), so that the owner of
// its partition finds it when its driver dies first
// (docs/adr/0026-signed-heads.md). It is the one answer to "does this
// run rest without a driver?": what keeps a run in memory (isIdle),
// whether a takeover is recorded lazily (lazyTakeover), which runs an
// append puts the entry of (keyBeforeAppend), which finished runs keep it
// (act), and which runs the driver index rebuild gives one
// (rebuildDrivers: docs/semantics.md §8, what was not recorded is derived
// again from the log). A caller that knows the run idle or finished
// already asks owesHead, its answer then.
func (r *Runner) restsWithoutDriver(s aggregate.State) bool {
	if r.owesHead(s) {
		return false
	}
	_, fin := s.Finished()
	return fin || !s.Exists() || aggregate.Idle(s)
}

// owesHead reports whether this runner signs heads and a signature is
// owed in state s (aggregate.State.HeadBehind): for a run that is idle or
// finished, the negation of restsWithoutDriver, without computing
// aggregate.Idle again.
func (r *Runner) owesHead(s aggregate.State) bool { return r.headKey != nil && s.HeadBehind() }

// isIdle reports whether rn waits only for people (see above) and rests
// without a driver (restsWithoutDriver, for an idle run owesHead: no
// signature owed — else it is kept, with its entry, until signed), its
// approval expiries armed durably and nothing of it kept in memory.
func (r *Runner) isIdle(rn *run) bool {
	if !rn.driven || rn.takeover != nil || rn.stale || rn.modelTurn != 0 || !aggregate.Idle(rn.state) || r.owesHead(rn.state) {
		return false
	}
	for _, t := range aggregate.Pending(rn.state).Timers {
		if a, ok := rn.armed[timerKey(t)]; !ok || !a.isDurable() {
			return false // its durable schedule is not armed yet
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, kicked := r.kicks[rn.id]
	_, reply := r.replies[rn.id]
	return !kicked && !reply && !r.draining
}

// maybeEvict evicts rn, which the caller holds, when it is idle, and
// deletes its weft_drivers entry.
func (r *Runner) maybeEvict(rn *run) {
	if !r.isIdle(rn) {
		return
	}
	for key, t := range rn.armed {
		t.local.Stop()
		delete(rn.armed, key)
	}
	r.mu.Lock()
	if r.runs[rn.id] == rn {
		delete(r.runs, rn.id)
	}
	r.mu.Unlock()
	rn.driven = false
	if rn.keyed {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if rn.keyRev != 0 {
			err = r.removeDriverKey(ctx, rn.id, rn.keyRev)
		} else {
			r.deleteDriver(rn.id, 0)
		}
		if err != nil {
			// Left behind: the partition's next scan finds the run idle
			// and deletes it (wakeOrphan).
			r.log.Debug("driver key delete", "run", rn.id, "err", err)
		}
		rn.keyed, rn.keyRev = false, 0
	}
}
