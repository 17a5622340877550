package runner

import (
	"context"
	"errors"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
)

// wake makes sure run is driven (taking it over when its driver is gone)
// and applies the timers that are due.
func (r *Runner) wake(ctx context.Context, id string) error {
	if r.finished.has(id) {
		return nil // finished, its driver key deleted: nothing to wake
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx, end := r.bounded(ctx)
	defer end()
	rn, err := r.acquire(ctx, id)
	if err != nil {
		var fe *forwardError
		if errors.As(err, &fe) {
			return r.forwardWake(ctx, fe.driver, id)
		}
		var we *weft.Error
		if errors.As(err, &we) && we.Code == weft.CodeUnknownRun {
			return nil
		}
		return err
	}
	err = r.wakeLocked(ctx, rn, true)
	rn.unlock()
	if we := (*weft.Error)(nil); errors.As(err, &we) && we.Code == weft.CodeOutcomeUnknown {
		return unknownAnswer("wake", "", we.Message) // unavailable: a timer's firing is redelivered
	}
	if fe := (*forwardError)(nil); errors.As(err, &fe) {
		// A takeover found the partition owned by another runner
		// (verifyOwner): the owner wakes it.
		return r.forwardWake(ctx, fe.driver, id)
	}
	return err
}

// wakeLocked applies the timers of rn that are due and, with all, makes
// sure everything the run needs is in hand (act with all); a pending
// takeover is recorded with the first due timer or on its own.
func (r *Runner) wakeLocked(ctx context.Context, rn *run, all bool) error {
	if !rn.driven {
		if _, fin := rn.state.Finished(); fin {
			// Its driver died between the last append and the key delete.
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			// Perhaps before it signed the run's end, too: signed here,
			// or the entry stays and the wake is made again.
			if err := r.signBehind(dctx, rn); err != nil {
				return &weft.Error{Code: weft.CodeUnavailable, Message: "end head not signed: " + err.Error()}
			}
			if err := r.removeDriverKey(dctx, rn.id, 0); err != nil {
				return &weft.Error{Code: weft.CodeUnavailable, Message: "driver key delete: " + err.Error()}
			}
			r.finished.add(rn.id)
		}
		return nil
	}
	dueErr := r.applyDue(ctx, rn)
	if rn.takeover != nil {
		r.finishTakeover(ctx, rn)
		return dueErr
	}
	if err := r.recordKeptCloses(ctx, rn); err != nil && dueErr == nil {
		dueErr = err
	}
	// A worker that marked its claim after the decision that read it and
	// died before its report reached the run (docs/adr/0023-closing-attempts.md,
	// "Late evidence: a mark after the decision").
	if err := r.recordLateMarks(ctx, rn, ""); err != nil && dueErr == nil {
		dueErr = err
	}
	// A signature its driver (this runner, or one before it) still owes:
	// the head after a decision a person made (docs/adr/0026-signed-heads.md).
	if err := r.signBehind(ctx, rn); err != nil {
		r.log.Warn("head not signed", "run", rn.id, "version", rn.head.Version, "err", err)
		r.retryLater(rn.id)
	}
	if all {
		r.act(ctx, rn, nil, true)
	}
	return dueErr
}

// applyDue decides every timer of rn that is due (the first one records a
// pending takeover with it). A due timer whose decision could not be
// recorded (the store refused or did not answer) stays pending: the run
// is woken again later (retryLater) and the error is returned, so that a
// durable timer's delivery is redelivered too — its local timer has fired
// already and nothing else would apply it (docs/semantics.md §8: pending work
// is
// retried, never dropped).
func (r *Runner) applyDue(ctx context.Context, rn *run) error {
	now := r.clock(rn)
	var failed error
	for _, t := range aggregate.Pending(rn.state).Timers {
		if !t.At.After(now) {
			if err := r.step(ctx, rn, t.Command()); err != nil {
				r.log.Debug("due timer", "run", rn.id, "err", err)
				if retryTimer(err) && failed == nil {
					failed = err
				}
			}
		}
	}
	if failed != nil {
		r.retryLater(rn.id)
	}
	return failed
}
