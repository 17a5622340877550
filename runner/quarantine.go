package runner

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/weftrun/weft/eventlog"
)

// noteQuarantine reports whether err says a run is quarantined (its log
// holds a message no reader can fold, eventlog.PoisonError) and, if so,
// remembers the run: nothing acts on it — commands are refused with
// quarantined, its timer firings and retries are dropped instead of
// redelivered, the recovery scan leaves it alone — until watchQuarantined
// finds it repaired and wakes it (docs/adr/0011). It logs a run's
// quarantine once.
func (r *Runner) noteQuarantine(err error) bool {
	var p *eventlog.PoisonError
	if err == nil || !errors.As(err, &p) || p.Run == "" {
		return false
	}
	r.mu.Lock()
	if r.quarantined == nil {
		r.quarantined = map[string]uint64{}
	}
	seen, ok := r.quarantined[p.Run]
	r.quarantined[p.Run] = p.Seq
	r.mu.Unlock()
	if !ok || seen != p.Seq {
		r.log.Error("run quarantined: a message of its log cannot be folded; nothing acts on it until it is repaired (weft repair show)",
			"run", p.Run, "seq", p.Seq, "reason", p.Reason)
	}
	return true
}

// isQuarantined reports whether run is known quarantined.
func (r *Runner) isQuarantined(run string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.quarantined[run]
	return ok
}

// watchQuarantined reads each run known quarantined again (one load each,
// at every scan) and wakes those a repair voided the bad message of: the
// wake derives their pending work (timers due meanwhile, dispatches,
// model calls) from the log, as after any loss.
func (r *Runner) watchQuarantined(ctx context.Context) {
	r.mu.Lock()
	runs := slices.Sorted(maps.Keys(r.quarantined))
	r.mu.Unlock()
	for _, run := range runs {
		p, err := r.evlog.Quarantine(ctx, run)
		if err != nil || p != nil {
			if p != nil {
				r.noteQuarantine(p)
			}
			continue
		}
		r.mu.Lock()
		delete(r.quarantined, run)
		r.mu.Unlock()
		r.log.Info("quarantined run repaired; waking it", "run", run)
		r.retryLater(run)
	}
}
