package runner

import (
	"context"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/telemetry"
)

// handOffMode says what a hand-off does with the runs once handed off.
type handOffMode int

const (
	// handOffKeep keeps the runs in memory: the reports and the model
	// reply of their work in flight are still recorded here.
	handOffKeep handOffMode = iota
	// handOffForget forgets every run (the end of a drain: the runner is
	// going, whatever was not recorded is recovered from it).
	handOffForget
	// handOffForgetRecorded forgets the runs whose hand-off is recorded
	// (or that are not this runner's any more) and keeps the others — a
	// run whose lock could not be had in time, or whose HandOff the store
	// did not take — for the caller to try again (a partition's release:
	// its key is not deleted while this runner holds one of its runs).
	handOffForgetRecorded
)

// handOffAll hands every run this runner holds off (handOff). Idle runs
// it evicted are not read back: nothing of theirs is in flight, and the
// owner of their partition drives them when a command reaches them.
func (r *Runner) handOffAll(ctx context.Context, mode handOffMode) {
	r.mu.Lock()
	var list []*run
	for _, rn := range r.runs {
		list = append(list, rn)
	}
	r.mu.Unlock()
	r.handOff(ctx, list, mode)
}

// handOff hands the runs of list off: a drain's (all runs), or a released
// partition's. With handOffKeep (the start) the runs stay in memory: a
// handed-off run fences no new attempt and requests no model turn, but
// the reports and the model reply of the work in flight are still
// recorded here. Otherwise (the end) the runs are forgotten as mode says,
// so that the next runner recovers them. A run whose lock is not had
// within r.handOffLock is skipped (and stays in memory).
func (r *Runner) handOff(ctx context.Context, list []*run, mode handOffMode) {
	for _, rn := range list {
		lctx, cancel := context.WithTimeout(ctx, r.handOffLock)
		if err := rn.lock(lctx); err != nil {
			cancel()
			continue
		}
		if !r.handOffLocked(lctx, rn) {
			switch {
			case mode == handOffForget:
				r.drop(rn)
			case mode == handOffForgetRecorded && r.handedOver(rn):
				r.drop(rn)
			case mode == handOffForgetRecorded:
				r.log.Debug("hand-off not recorded; tried again", "run", rn.id)
			}
		}
		rn.unlock()
		cancel()
	}
}

// handOffLocked records rn's (locked) hand-off. A run never taken over
// (its recovery was not recorded) is not ours to hand off: it is dropped,
// and handOffLocked reports true.
func (r *Runner) handOffLocked(ctx context.Context, rn *run) (dropped bool) {
	if rn.takeover != nil {
		r.drop(rn)
		return true
	}
	w := aggregate.Pending(rn.state)
	notCalled := w.Model != nil && rn.modelTurn != w.Model.Turn
	evs, err := r.decideAppend(ctx, rn, aggregate.HandOff{Runner: r.id, ModelNotCalled: notCalled})
	if err == nil && len(evs) > 0 {
		r.tel.Emit(ctx, telemetry.RunHandedOff, "run", rn.id)
	}
	return false
}

// handedOver reports whether rn (locked) is this runner's no more: its
// hand-off is recorded, it finished, or another runner drives it.
func (r *Runner) handedOver(rn *run) bool {
	_, fin := rn.state.Finished()
	return fin || rn.state.HandedOff() || rn.state.Runner() != r.id || !rn.driven
}

// forgetHandedOff forgets the runs of list that are this runner's no
// more (handedOver) and keeps the others — a run whose lock could not be
// had in time, or whose HandOff the store did not take — for the caller
// to judge and hand off again (a partition's release: its key is not
// deleted while this runner holds one of its runs).
func (r *Runner) forgetHandedOff(ctx context.Context, list []*run) {
	for _, rn := range list {
		lctx, cancel := context.WithTimeout(ctx, r.handOffLock)
		if rn.lock(lctx) == nil {
			if r.handedOver(rn) {
				r.drop(rn)
			}
			rn.unlock()
		}
		cancel()
	}
}
