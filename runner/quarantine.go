package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/weftrun/weft/aggregate"
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

// impossible turns err, when it is an *aggregate.ImpossibleError met
// folding run's log up to head, into the *eventlog.PoisonError that
// quarantines the run (code quarantined, naming the run, the version and
// the event), so that it takes the path of any message no reader can
// fold (noteQuarantine). The stream sequence is known only when the event
// is the run's last (head.Seq); otherwise it is 0. Either way the log's
// own reader folds the message, so `weft repair drop` refuses to void it:
// the run stays quarantined until an operator removes the message.
func impossible(run string, head eventlog.Head, err error) error {
	var ie *aggregate.ImpossibleError
	if !errors.As(err, &ie) {
		return err
	}
	p := &eventlog.PoisonError{Run: run, Reason: fmt.Sprintf("event %s at version %d is impossible: %s", ie.Event, ie.Version, ie.Detail)}
	if ie.Version == head.Version {
		p.Seq = head.Seq
	}
	return p
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
		// The log's reader folds every message; the decision core may
		// still meet an impossible event (impossible).
		if _, _, err := r.load(ctx, run); err != nil {
			r.noteQuarantine(err)
			continue
		}
		r.mu.Lock()
		delete(r.quarantined, run)
		r.mu.Unlock()
		r.log.Info("quarantined run repaired; waking it", "run", run)
		r.retryLater(run)
	}
}
