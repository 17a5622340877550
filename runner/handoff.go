package runner

import (
	"context"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/telemetry"
)

// handOffAll hands every driven run off. At the start of a drain
// (release false) the runs stay in memory: a handed-off run fences no new
// attempt and requests no model turn, but the reports and the model reply
// of the work in flight are still recorded here. At its end (release true)
// the runs are forgotten, so that the next runner recovers them.
func (r *Runner) handOffAll(ctx context.Context, release bool) {
	r.adoptIdle(ctx)
	r.mu.Lock()
	var list []*run
	for _, rn := range r.runs {
		list = append(list, rn)
	}
	r.mu.Unlock()
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
