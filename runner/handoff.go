package runner

import (
	"context"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/telemetry"
)

// handOffAll hands every run this runner holds off (handOff). Idle runs
// it evicted are not read back: nothing of theirs is in flight, and the
// owner of their partition drives them when a command reaches them.
func (r *Runner) handOffAll(ctx context.Context, release bool) {
	r.mu.Lock()
	var list []*run
	for _, rn := range r.runs {
		list = append(list, rn)
	}
	r.mu.Unlock()
	r.handOff(ctx, list, release)
}

// handOff hands the runs of list off: a drain's (all runs), or a released
// partition's. At the start (release false) the runs stay in memory: a
// handed-off run fences no new attempt and requests no model turn, but the
// reports and the model reply of the work in flight are still recorded
// here. At the end (release true) the runs are forgotten, so that the next
// runner recovers them.
func (r *Runner) handOff(ctx context.Context, list []*run, release bool) {
	for _, rn := range list {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := rn.lock(lctx); err != nil {
			cancel()
			continue
		}
		if rn.takeover != nil {
			// Never taken over (its recovery was not recorded): not ours
			// to hand off.
			r.drop(rn)
			rn.unlock()
			cancel()
			continue
		}
		w := aggregate.Pending(rn.state)
		notCalled := w.Model != nil && rn.modelTurn != w.Model.Turn
		if evs, err := r.decideAppend(lctx, rn, aggregate.HandOff{Runner: r.id, ModelNotCalled: notCalled}); err == nil && len(evs) > 0 {
			r.tel.Emit(lctx, telemetry.RunHandedOff, "run", rn.id)
		}
		if release {
			r.drop(rn)
		}
		rn.unlock()
		cancel()
	}
}
