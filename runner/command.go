package runner

// The command loop. Every command a run receives passes the functions of
// this file, in this order (load → decide → append → act on pending); no
// other runner file holds a step of it. The helpers it calls out to hold
// the detail, named here by what they do (docs/architecture.md walks an
// approval through it).
//
// A command enters by one of two doors, and the runner's own work by a
// third:
//
//   - route, for the API's commands (weft.api.<endpoint>, served by
//     api.Serve): each handler — approve, reject and decide (answers.go),
//     reconcile and cancel (backend.go), resolve (resolve.go), a worker's
//     report and a settlement (reports.go), pause and resume (pause.go) —
//     passes route a function that checks its request on the locked run
//     and calls step. A start (startFork, backend.go) has no run to load:
//     it makes one and calls decideAppend and act itself.
//   - command, for the runner's own commands: a model's reply or failure
//     (callModel, effects.go), a timer's firing (timers.go), a child run's
//     end settled on its parent (delegate.go); commandLocked calls step.
//   - the runner's own work on a run it already holds locked, which skips
//     the load and enters at step (or lower): a wake's due timers (wake.go)
//     and the recovery a takeover records (acquire.go) call step, and the
//     wake and an acquisition act on what is pending (act); the claims a
//     decision closes record their outcomes by step (close.go); a tool the
//     catalog lost is recorded by step (delegate.go); a drain's hand-off
//     (handoff.go) calls decideAppend alone and acts on nothing.
//
// Then:
//
//  1. Load (route, command). acquire (acquire.go) returns the run locked:
//     from memory when this runner drives it, else read back (a snapshot
//     and the log's tail, loadAt in drive.go), by the owner of the run's
//     partition only; a run another runner drove is taken over (the
//     recovery waits in run.takeover and is recorded with this command's
//     decision). A run driven elsewhere has the command forwarded to its
//     driver (forward.go). After the command, finishTakeover (acquire.go)
//     records a takeover the command did not record; a command whose run
//     was lost or retaken meanwhile is routed once more, and a refusal
//     decided without an append is first checked against the log's head
//     (current, backend.go).
//  2. Decide (step → decideAppend): aggregate.Decide on the run's state at
//     the store's time (clock, drive.go), or, with a takeover pending, the
//     recovery and the command together (takeOver, acquire.go). The claims
//     a decision ends are closed first and the decision made again with
//     their outcomes (closeFirst, close.go); a model reply takes its tool
//     request's resolution along in the same message (withResolution,
//     drive.go).
//  3. Append (decideAppend): the run's driver entry first when the append
//     puts work in flight, or owes a signed head it is not sealed with
//     (keyBeforeAppend, drive.go), the in-process worker's claims of the attempts it fences
//     with it (prepareHandOffs, handtask.go), then eventlog.AppendSealed
//     against the head decided on, sealed with the runner's signed head
//     when the decision owes one (sealFor, signhead.go). Recorded, the
//     events are folded into the run (run.evolve, drive.go), a head still
//     owed signed (signHead, signhead.go),
//     observed (observe.go) and now and then snapshotted (maybeSnapshot,
//     drive.go). A conflict folds the tail another writer appended and
//     decides again (afterConflict, drive.go); an append of unknown
//     outcome reads the run back (appendUnknown and resync, drive.go); a
//     refusal of the store, or an append that failed before it was sent
//     (eventlog.NotSentError: a seal that could not be made), returns with
//     nothing recorded and nothing read again.
//  4. Act on pending (step → act → actOnce), after an append (or on a
//     wake) and only while this runner drives the run: the stop of the
//     bodies the appended events stopped, the model call of a cancelled
//     run cut short; delegation's tending (afterAppend, delegate.go); then
//     aggregate.Pending of the state — the run's end
//     (drop, drive.go; its timers disarmed and driver entry deleted), the
//     timers (syncTimers, timers.go), the driver entry, the fenced attempts
//     (dispatch, effects.go), the model call (callModel, effects.go) or a
//     reply kept from before (takeReply, retry.go) recorded through
//     commandLocked, a tool request's validation and policy (resolve,
//     effects.go) decided as a step of its own. What failed makes the run
//     be woken again (retryLater, retry.go); the wake (wake.go) derives the
//     work again from the state and acts (docs/semantics.md §8).
//
// step also aborts the in-process worker's claims that act did not
// dispatch (abortPrepared, handtask.go) and answers the refusal of a
// command the runner derived itself as an internal refusal (refused,
// refusals.go).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// route runs fn on the locked run when this runner drives it (or takes it
// over), and otherwise forwards the request to the live driver and decodes
// its reply into out.
//
// The command waits for the run at most the command timeout (the largest
// of the served agents'), then answers runner_busy and is never applied
// later.
//
// When the command's append finds that another runner took the run over
// meanwhile (this runner's lease had lapsed; it drops the run and its
// decision is void), the command is routed once more, to the new driver,
// instead of being refused with conflict; so is a command whose takeover
// met the previous driver's hand-off (the takeover is recorded alone, and
// the command decided again on the run as it is then).
func (r *Runner) route(ctx context.Context, id, kind string, req, out any, fn func(context.Context, *run) error) error {
	r.commands.Add()
	defer r.commands.Done()
	ctx, cancel := r.bounded(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeoutCause(ctx, r.commandTimeout(), errCommandTimeout)
		rn, err := r.acquire(actx, id)
		cancel()
		if err != nil {
			var fe *forwardError
			if !errors.As(err, &fe) {
				r.noteQuarantine(err)
				return err
			}
			return r.forward(ctx, fe.driver, kind, id, req, out)
		}
		wasDriven, head := rn.driven, rn.head
		pending := rn.takeover != nil
		err = fn(ctx, rn)
		if fe := (*forwardError)(nil); errors.As(err, &fe) && !rn.driven {
			// The takeover this command was to record found the
			// partition owned by another runner (verifyOwner): nothing
			// was recorded, the run is forgotten; its owner decides.
			rn.unlock()
			return r.forward(ctx, fe.driver, kind, id, req, out)
		}
		r.finishTakeover(ctx, rn)
		if err != nil && !transient(err) && rn.driven && rn.takeover == nil && rn.head == head && attempt < 2 {
			// A refusal decided without an append: it is a decision all
			// the same, so it must have been made on the log as it is. A
			// runner that lost the run without noticing (paused while
			// another took it over) re-reads and routes the command to
			// the run's driver instead of answering from stale memory.
			current, cerr := r.current(ctx, rn)
			if cerr != nil {
				rn.unlock()
				if r.noteQuarantine(cerr) {
					return cerr
				}
				return &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("run %s: could not check the run's head before refusing: %v", id, cerr)}
			}
			if !current {
				rn.unlock()
				continue
			}
		}
		lost := wasDriven && !rn.driven && rn.state.Runner() != r.id
		// A takeover the command was to record met the previous driver's
		// hand-off (its append came first): the run stays held, the
		// takeover alone is recorded now (finishTakeover), and the
		// command, decided on the state before the hand-off, was not
		// applied. Like a lost run, it is routed once more, to the run
		// as it is now, instead of being refused with conflict.
		retaken := pending && rn.driven && rn.takeover == nil && rn.state.Runner() == r.id
		rn.unlock()
		r.noteQuarantine(err)
		if we := (*weft.Error)(nil); errors.As(err, &we) && we.Code == weft.CodeOutcomeUnknown {
			return unknownAnswer(kind, ReasonAppendUnknown, we.Message)
		}
		var conflict *eventlog.ConflictError
		if attempt == 0 && (lost || retaken) && errors.As(err, &conflict) {
			continue
		}
		return err
	}
}

// command applies an internal command (model answer, timer firing, report)
// to run, routing it to the driver.
func (r *Runner) command(ctx context.Context, id string, c aggregate.Command) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ctx, end := r.bounded(ctx)
	defer end()
	for attempt := 0; ; attempt++ {
		rn, err := r.acquire(ctx, id)
		if err != nil {
			var fe *forwardError
			if errors.As(err, &fe) {
				if _, ok := c.(aggregate.TimerFired); ok {
					return r.forwardWake(ctx, fe.driver, id)
				}
			}
			return err
		}
		wasDriven := rn.driven
		err = r.commandLocked(ctx, rn, c)
		if fe := (*forwardError)(nil); errors.As(err, &fe) && !rn.driven {
			// Its takeover found the partition owned by another runner
			// (verifyOwner): nothing was recorded.
			rn.unlock()
			if _, ok := c.(aggregate.TimerFired); ok {
				return r.forwardWake(ctx, fe.driver, id)
			}
			return &weft.Error{Code: weft.CodeRunnerBusy, Message: "run " + id + ": its partition moved to runner " + fe.driver + "; retry"}
		}
		r.finishTakeover(ctx, rn)
		lost := wasDriven && !rn.driven && rn.state.Runner() != r.id
		rn.unlock()
		var conflict *eventlog.ConflictError
		if attempt == 0 && lost && errors.As(err, &conflict) {
			continue // another runner drives it now: route it there
		}
		return err
	}
}

func (r *Runner) commandLocked(ctx context.Context, rn *run, c aggregate.Command) error {
	if mr, ok := c.(aggregate.ModelReply); ok && rn.modelTurn == mr.Turn {
		rn.modelTurn, rn.modelCancel = 0, nil
	}
	if mf, ok := c.(aggregate.ModelFailure); ok && rn.modelTurn == mf.Turn {
		rn.modelTurn, rn.modelCancel = 0, nil
	}
	err := r.step(ctx, rn, c)
	if mr, ok := c.(aggregate.ModelReply); ok && weft.ErrorCode(err) == weft.CodePayloadTooLarge {
		// A reply too large to record cannot be decided on: the
		// aggregate's UnrecordableReply says what the turn became.
		return r.step(ctx, rn, aggregate.UnrecordableReply(mr.Turn, err.Error()))
	}
	return err
}

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

// decideAppend decides c on rn's state and appends the events, re-reading
// the run after a conflict. It returns the appended events and Decide's
// refusal (events and a refusal may come together). After a conflict that
// made another runner the driver it returns the *eventlog.ConflictError.
// An append whose outcome is unknown is read back (resync): when the read
// fails too it returns outcome_unknown (rn is stale: read before acting),
// which a command's answer maps by its kind (unknownAnswer) and the
// runner's own work treats as transient.
//
// Closes that won for a decision that is then not recorded are kept and
// recorded on the run's next wake (keepCloses).
func (r *Runner) decideAppend(ctx context.Context, rn *run, c aggregate.Command) (out []events.Event, err error) {
	if rn.takeover != nil {
		return r.takeOver(ctx, rn, c)
	}
	var won []aggregate.Close
	defer func() {
		if out == nil && len(won) > 0 {
			r.keepCloses(rn.id, won)
		}
		if out == nil {
			r.abortPrepared(rn) // nothing recorded: no claim may stay
		}
	}()
	alone := false // the model reply is appended without its resolution
	// The resolution of the reply's tool request, found once per call:
	// every pass of the loop and the act after it reuse it.
	var resolved *aggregate.ResolveCalls
	if _, ok := c.(aggregate.ModelReply); ok {
		defer func() { rn.resolved = resolved }()
	}
	for range 8 {
		now := r.clock(rn)
		evs, derr := aggregate.Decide(rn.state, c, now)
		decided := c
		if cl := r.closeFirst(ctx, rn, c, evs, now); cl != nil {
			evs, derr = aggregate.Decide(rn.state, cl, now) // close.go
			won = wonCloses(cl, won)
			decided = cl
		}
		if len(evs) == 0 {
			return nil, derr
		}
		reply := len(evs)
		if _, ok := c.(aggregate.ModelReply); ok && derr == nil && !alone {
			evs, now = r.withResolution(ctx, rn, decided, evs, now, &resolved)
		}
		// A decision that leaves a signature owed carries the signed
		// head in its own message (sealFor, signhead.go).
		seal := r.sealFor(rn, evs)
		if err := r.keyBeforeAppend(ctx, rn, c, evs, now, seal != nil); err != nil {
			return nil, err
		}
		// The claims of the attempts this append fences go out with it
		// (docs/adr/0031-claim-with-the-fence.md).
		r.prepareHandOffs(rn, evs[reply:])
		if len(evs) > reply {
			r.testHook("resolution-appending", -1, rn.id)
		}
		envs, head, err := r.evlog.AppendSealed(ctx, rn.id, rn.head, now, seal, evs...)
		if err != nil {
			var notSent *eventlog.NotSentError
			if errors.As(err, &notSent) {
				// Failed before anything was sent (a seal that could
				// not be made: sealFor): nothing landed, nothing is
				// owed, and nothing needs reading again.
				return nil, err
			}
			var conflict *eventlog.ConflictError
			if !errors.As(err, &conflict) {
				switch weft.ErrorCode(err) {
				case weft.CodePayloadTooLarge, weft.CodeInvalidName:
					if len(evs) > reply && weft.ErrorCode(err) == weft.CodePayloadTooLarge {
						// The reply with its resolution is too large for
						// one message: the reply alone may not be; its
						// resolution follows in act, as its own decision.
						alone = true
						continue
					}
					return nil, err // refused by the store: nothing landed
				case weft.CodeQuarantined:
					// Refused: another message is the run's last, and no
					// reader can fold it.
					r.noteQuarantine(err)
					return nil, err
				}
				return r.appendUnknown(ctx, rn, evs, derr, err)
			}
			// Re-read and re-decide; never act on the lost decision.
			if err := r.afterConflict(ctx, rn, c, err); err != nil {
				return nil, err
			}
			continue
		}
		recs, rerr := recorded(envs)
		if rerr != nil {
			return nil, rerr
		}
		for _, rec := range recs {
			rn.evolve(rec)
			if f, ok := rec.Event.(events.AttemptFenced); ok {
				if rn.fences == nil {
					rn.fences = map[string]uint64{}
				}
				rn.fences[attemptKey(f.Action, f.Attempt, f.Incarnation)] = rec.Version
			}
		}
		rn.head = head
		r.signHead(ctx, rn)
		r.observe(ctx, rn, evs)
		r.maybeSnapshot(rn)
		return evs, derr
	}
	return nil, &weft.Error{Code: weft.CodeContended, Message: fmt.Sprintf("run %s: concurrent writers kept winning", rn.id)}
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
		if !r.restsWithoutDriver(rn.state) {
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
