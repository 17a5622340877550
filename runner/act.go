package runner

import (
	"context"
	"errors"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/telemetry"
)

// step decides c, appends, and acts; ResolveCalls follow-ups are decided
// in the same step. It returns Decide's refusal.
//
// On a run whose takeover is pending (run.takeover) the takeover is
// recorded with c (c may be nil then: the takeover alone), and everything
// the run needs is acted on.
func (r *Runner) step(ctx context.Context, rn *run, c aggregate.Command) error {
	takeover := rn.takeover != nil
	var err error
	func() {
		// Fenced and not dispatched by this act (also when it panics),
		// before anything else is decided.
		defer r.abortPrepared(rn)
		var evs []events.Event
		evs, err = r.decideAppend(ctx, rn, c)
		if len(evs) > 0 && rn.driven {
			r.act(ctx, rn, evs, takeover)
		}
	}()
	rn.resolved = nil
	if c != nil && derived(c) && internalRefusal(err) {
		return r.refused(ctx, rn.id, rn, c.CommandName(), err)
	}
	return err
}

// act performs the effects of rn's Pending work (append first, then act).
// Work is acknowledged by being recorded, never by having been attempted
// (raft's Ready/Advance): whatever could not be performed or recorded here
// — a task publish, a durable timer, the model's reply, the resolution of
// a tool request, a stop, a child run to tend — makes the run be woken
// again after a backoff (retryLater), and that wake derives the work again
// from the run's state and does what is still missing (docs/semantics.md §8).
func (r *Runner) act(ctx context.Context, rn *run, appended []events.Event, all bool) {
	if !rn.driven || rn.takeover != nil {
		return
	}
	if rn.stale && !r.refresh(ctx, rn) {
		r.retryLater(rn.id)
		return
	}
	if r.actOnce(ctx, rn, appended, all) {
		r.retryLater(rn.id)
	} else {
		r.retried(rn.id)
		r.maybeEvict(rn)
	}
}

// actOnce is one pass of act. It reports whether some work failed.
func (r *Runner) actOnce(ctx context.Context, rn *run, appended []events.Event, all bool) (failed bool) {
	for _, ev := range appended {
		switch e := ev.(type) {
		case events.AttemptLost:
			if e.Cause == events.CauseStopped {
				if err := r.nc.Publish(api.StopSubjectPrefix+rn.id, nil); err != nil {
					failed = true
				}
			}
		case events.CancelRequested:
			if rn.modelCancel != nil {
				rn.modelCancel()
			}
		}
	}
	if r.afterAppend(ctx, rn, appended, all) {
		return false // the run failed tool_changed
	}
	if !rn.driven {
		return false
	}
	w := aggregate.Pending(rn.state)
	if w.Finished {
		r.drop(rn)
		r.disarmRun(rn)
		if r.headKey != nil && rn.state.HeadBehind() {
			// Its end head could not be appended (signHead logged it): the
			// entry stays, and the wake of the finished run signs it
			// (signBehind) before it deletes the entry.
			return true
		}
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// At the revision this runner put or found (no read of the key
		// first); an entry replaced since is removed as the key has it.
		var err error
		if rn.keyed && rn.keyRev != 0 {
			err = r.removeDriverKey(dctx, rn.id, rn.keyRev)
		}
		if !rn.keyed || rn.keyRev == 0 || errors.Is(err, errDriverKeyChanged) {
			err = r.removeDriverKey(dctx, rn.id, 0)
		}
		if err != nil {
			r.log.Warn("driver key delete", "run", rn.id, "err", err)
			return true // the wake of a finished run deletes it
		}
		r.finished.add(rn.id)
		return false
	}
	// Timers: a local one for precision, a durable one as the backstop;
	// those no longer pending are stopped and disarmed (timers.go).
	r.syncTimers(rn, w.Timers)
	// The run's weft_drivers entry, before any effect, so that the owner
	// of its partition finds it after a loss — unless the run is idle
	// (evicted at the end of act: nothing to find).
	if !rn.keyed && !r.isIdle(rn) {
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rev, err := r.drivers.Put(kctx, r.driverKey(rn.id), []byte(r.id))
		cancel()
		if err != nil {
			r.log.Warn("driver key", "run", rn.id, "err", err)
			failed = true
		} else {
			rn.keyed, rn.keyRev = true, rev
		}
	}
	// Dispatch fenced attempts, each once (again when its copy was lost).
	rn.undispatchLost()
	for _, d := range w.Dispatch {
		key := attemptKey(d.Action, d.Attempt, d.Fence.Incarnation)
		if rn.dispatched[key] {
			continue
		}
		if err := r.dispatch(ctx, rn, d); err != nil {
			r.log.Error("dispatch", "run", rn.id, "action", d.Action, "err", err)
			failed = true
			continue
		}
		rn.dispatched[key] = true
		delete(rn.fences, key)
	}
	// A draining runner starts no model call and resolves no new calls
	// (aggregate's Work.Draining): the runner that takes the run over does.
	r.mu.Lock()
	if r.draining {
		w = w.Draining()
	}
	r.mu.Unlock()
	// The model call of a requested turn, or the answer of a call already
	// made that could not be recorded.
	if w.Model != nil {
		if c := r.takeReply(rn.id, w.Model.Turn); c != nil {
			if err := r.commandLocked(ctx, rn, c); transient(err) {
				r.log.Warn("model answer", "run", rn.id, "turn", w.Model.Turn, "err", err)
				r.keepReply(rn.id, c)
				return true
			} else if weft.ErrorCode(err) == weft.CodeQuarantined {
				// Kept until the repair wakes the run (watchQuarantined).
				r.keepReply(rn.id, c)
				return false
			}
			return false // the step acted on what followed
		}
		if rn.modelTurn != w.Model.Turn && !w.Model.RecordOnly {
			r.callModel(rn, *w.Model)
		}
	}
	// Validation and policy for a tool request, decided at once.
	if w.Resolve != nil {
		cmd, ok := rn.resolution(*w.Resolve)
		if !ok {
			cmd = r.resolve(ctx, rn, *w.Resolve)
		}
		if err := r.step(ctx, rn, cmd); err != nil {
			r.log.Error("resolve calls", "run", rn.id, "err", err)
			if transient(err) {
				failed = true
			}
		}
	}
	return failed
}

// transient reports whether err says that something could not be done or
// recorded now (the store or NATS did not answer, writers contended, the
// run was busy) rather than a decision's refusal: the work stays pending.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var conflict *eventlog.ConflictError
	if errors.As(err, &conflict) {
		return true
	}
	var we *weft.Error
	if !errors.As(err, &we) {
		return true
	}
	// settle_unconfirmed is no answer the runner's own work meets; an
	// append of unknown outcome (decideAppend) leaves the work pending:
	// the run is read again before it is derived again.
	return we.Code.Retryable() || we.Code == weft.CodeOutcomeUnknown
}

// refresh re-reads rn's tail after an append whose outcome was unknown
// (rn.stale), so that act derives its work from what the log holds. It
// reports whether rn is current and still driven by this runner.
func (r *Runner) refresh(ctx context.Context, rn *run) bool {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tail, head, err := r.evlog.LoadAfter(rctx, rn.id, rn.head)
	if err != nil {
		return false
	}
	recs, err := recorded(tail)
	if err != nil {
		return false
	}
	landed := make([]events.Event, 0, len(recs))
	for _, rec := range recs {
		if r.evolveRead(rn, rec, head) != nil {
			return false // quarantined (evolveRead dropped rn)
		}
		landed = append(landed, rec.Event)
	}
	rn.head, rn.stale = head, false
	if !rn.state.Exists() {
		// A start whose append's outcome was unknown: it did not land.
		r.drop(rn)
		r.deleteDriver(rn.id, 0)
		return false
	}
	if rn.state.Runner() != r.id {
		r.tel.Emit(ctx, telemetry.LeaseLost, "run", rn.id, "driver", rn.state.Runner())
		r.drop(rn)
		return false
	}
	r.observe(ctx, rn, landed)
	return true
}

// deleteDriver deletes run's weft_drivers key: only at revision rev when
// rev is not 0, else only while it names this runner.
func (r *Runner) deleteDriver(run string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rev == 0 {
		e, err := r.drivers.Get(ctx, r.driverKey(run))
		if err != nil || string(e.Value()) != r.id {
			return
		}
		rev = e.Revision()
	}
	if err := r.removeDriverKey(ctx, run, rev); err != nil {
		r.log.Debug("driver key delete", "run", run, "err", err)
	}
}

// correctDriver makes run's weft_drivers key name the driver the log
// records (s), or deletes it for a finished run.
func (r *Runner) correctDriver(run string, s aggregate.State) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if _, fin := s.Finished(); fin || !s.Exists() {
		err = r.removeDriverKey(ctx, run, 0)
	} else {
		_, err = r.drivers.Put(ctx, r.driverKey(run), []byte(s.Runner()))
	}
	if err != nil {
		r.log.Warn("driver key", "run", run, "err", err)
	}
}
