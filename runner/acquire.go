package runner

// Acquiring a run: from memory, or read from the log by the owner of its
// partition, and taken over when another runner drove it (docs/semantics.md
// §8).

import (
	"context"
	"errors"
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/telemetry"
)

// acquire returns the locked run id, taking it over when its driver is
// gone. It returns a *forwardError when another live runner drives it.
// The caller must call rn.unlock.
//
// Acquisition is single-flight per run in this process: while one caller
// reads the run from the log (and perhaps takes it over), the others wait
// for it and then find the run in memory. Two concurrent takeovers in one
// process would otherwise both decide a recovery, the second from this very
// runner (docs/semantics.md §8: only a runner that is gone is recovered from).
func (r *Runner) acquire(ctx context.Context, id string) (*run, error) {
	if err := eventlog.CheckRun(id); err != nil {
		return nil, err
	}
	for tries := 0; tries < 5; {
		r.mu.Lock()
		rn, ok := r.runs[id]
		var wait chan struct{}
		if !ok {
			if ch, loading := r.loading[id]; loading {
				wait = ch
			} else {
				r.loading[id] = make(chan struct{})
			}
		}
		r.mu.Unlock()
		if wait != nil {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, waitEnded(ctx, id)
			}
		}
		if ok {
			if err := rn.lock(ctx); err != nil {
				return nil, err
			}
			r.mu.Lock()
			still := r.runs[id] == rn
			r.mu.Unlock()
			if still && rn.stale && rn.driven && !r.refresh(ctx, rn) {
				// An append's outcome was unknown and its re-read
				// failed: nothing is decided on memory that may be
				// behind the log (docs/semantics.md §8: decisions follow the
				// log). Read again, or runner_busy while the log
				// cannot be read; a run the re-read dropped (another
				// driver, a quarantine) is acquired anew.
				rn.unlock()
				if rn.stale && rn.driven {
					return nil, &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: its last append's outcome is unknown and its log cannot be read now; retry", id)}
				}
				tries++
				continue
			}
			if still {
				return rn, nil
			}
			rn.unlock()
			tries++
			continue
		}
		done, err := r.acquiring(ctx, id) // rn is nil: not held
		if err == nil {
			rn, err = r.acquireFromLog(ctx, id)
		}
		done()
		if err == nil && rn.driven && aggregate.LacksTool(rn.state, rn.binds) {
			// A redeployed agent lacks a live action's tool
			// (aggregate.LacksTool): the run fails tool_changed (act)
			// before any command is decided on it — an answer must not
			// fence an attempt of a tool this runner cannot run. A
			// pending takeover is recorded first.
			rn.lazy = false
			if rn.takeover != nil {
				_ = r.step(ctx, rn, nil)
			} else {
				r.act(ctx, rn, nil, true)
			}
		}
		r.mu.Lock()
		close(r.loading[id])
		delete(r.loading, id)
		r.mu.Unlock()
		if errors.Is(err, errAcquireAgain) {
			tries++
			continue
		}
		return rn, err
	}
	return nil, &weft.Error{Code: weft.CodeContended, Message: fmt.Sprintf("run %s: concurrent writers kept winning", id)}
}

// binds reports whether the agent rn runs under (as this runner serves
// it) binds tool.
func (rn *run) binds(tool string) bool {
	_, ok := rn.agent.Tool(tool)
	return ok
}

// errAcquireAgain tells acquire that another writer changed the run while
// it was being taken over: read it again.
var errAcquireAgain = errors.New("acquire again")

// acquireFromLog reads run id from the log for acquire (which holds the
// run's single-flight slot) and takes it over when another runner drove
// it. Only the owner of the run's partition reads it: any other runner
// gets a *forwardError naming the owner (or runner_busy while nobody owns
// it), before anything is read.
//
// The owner drives every unfinished run of its partition, whoever the log
// names: a runner that drove one before gave the partition up — it
// released it after handing off, waiting for and forgetting every run of
// it that it held, or it was judged gone (docs/adr/0019-partitions.md) —
// so it drives the run no more (docs/semantics.md §8: only a runner that is
// gone
// is recovered from). A run recorded as this runner's (not handed off) is
// driven as it is when it is idle (evicted, idle.go: nothing in flight) or
// when this process forgot it (drop: a partition lost while paused, a
// quarantine), and otherwise taken over: an earlier process with this id
// drove it, its work is lost all the same. A run of another runner
// is taken over; when it is idle the takeover is recorded only together
// with the first decision that records something (run.lazy), so that the
// takeover of a partition of idle runs records nothing for them.
func (r *Runner) acquireFromLog(ctx context.Context, id string) (*run, error) {
	if err := r.owns(id); err != nil {
		return nil, err
	}
	r.testHook("acquire-owned", partition.Of(id, r.nparts), id)
	s, head, at, err := r.loadAt(ctx, id)
	if err != nil {
		return nil, err
	}
	if !s.Exists() {
		return nil, weft.UnknownRun(id)
	}
	a, err := r.agentFor(s)
	if err != nil {
		return nil, err
	}
	if _, finished := s.Finished(); finished {
		fin := newRun(id, s, head, a)
		fin.lastAt = at
		_ = fin.lock(ctx)
		return fin, nil
	}
	// A draining runner reads no run back (docs/semantics.md §8: what it gives
	// up, the next runner drives); install checks again under r.mu.
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	if draining {
		return nil, errDraining
	}
	driver, idle := s.Runner(), aggregate.Idle(s)
	r.mu.Lock()
	_, dropped := r.mine[id]
	delete(r.mine, id)
	r.mu.Unlock()
	if driver == r.id && (idle || dropped && !s.HandedOff()) {
		rn := newRun(id, s, head, a)
		rn.lastAt, rn.driven = at, true
		_ = rn.lock(ctx)
		if err := r.install(rn); err != nil {
			rn.unlock()
			return nil, err
		}
		return rn, nil
	}
	lazy := r.lazyTakeover(s)
	if !lazy {
		// A takeover recorded at once — of a run with work in flight, or
		// of an idle one whose head is behind — is decided on the store's
		// owner of the partition, not on this runner's view of it
		// (ownership.go), before the run is installed; its first try to
		// record it relies on this read (run.ownerChecked), a lazy one
		// and any later try read again (takeOver).
		if err := r.verifyOwner(ctx, id); err != nil {
			return nil, err
		}
	}
	if !idle {
		// Never from a live runner that takes no part in the partitions
		// (an older release still driving its runs).
		if driver != r.id && !s.HandedOff() && r.own.NonParticipant(ctx, driver) {
			return nil, &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s is driven by runner %s, which is alive and takes no part in the partitions (an older release?); retry", id, driver)}
		}
	}
	// Take the run over. Nothing is recorded yet: the caller's command is
	// decided together with the recovery (see run.takeover).
	rn := newRun(id, s, head, a)
	rn.lastAt = at
	_ = rn.lock(ctx)
	t := aggregate.Recover{Runner: r.id, Cause: aggregate.RecoveryCause(s)}
	view, err := aggregate.Recovered(s, t, r.clock(rn))
	if err != nil {
		rn.unlock()
		return nil, r.refused(ctx, id, nil, t.CommandName(), err)
	}
	rn.pre, rn.state, rn.takeover, rn.previous = s, view, &t, driver
	rn.driven, rn.lazy, rn.ownerChecked = true, lazy, !lazy
	if err := r.install(rn); err != nil {
		rn.unlock()
		return nil, err
	}
	return rn, nil
}

// takeOver records rn's pending takeover with c (nil for none) as the
// command it is for: Recover{Then: c} decided on the state in the log, so
// that c is judged on the recovered state before any follow-on of the
// recovery. It returns what decideAppend returns. When the takeover did
// not land and rn is still this runner's, it stays pending.
func (r *Runner) takeOver(ctx context.Context, rn *run, c aggregate.Command) ([]events.Event, error) {
	r.testHook("takeover", -1, rn.id)
	t := *rn.takeover
	t.Then = c
	if _, err := aggregate.Recovered(rn.pre, t, r.clock(rn)); err != nil {
		// The takeover itself refused, whatever c is: never c's answer.
		return nil, r.refused(ctx, rn.id, rn, t.CommandName(), err)
	}
	// Every takeover recorded is decided on the store's owner of the
	// partition, not on this runner's view (ownership.go): read by the
	// acquisition that decided it for its first try (acquireFromLog), read
	// here for the first decision that records a lazy one and for every
	// try after one that failed — which may come long after, from a
	// retry, a scan or a command, when the partition has moved on and
	// this runner's watcher has not seen it yet.
	checked := rn.ownerChecked
	rn.ownerChecked = false
	if !checked {
		if evs, _ := aggregate.Decide(rn.pre, t, r.clock(rn)); len(evs) > 0 {
			if err := r.verifyOwner(ctx, rn.id); err != nil {
				// Another runner owns the partition, or this one lost it:
				// the run is not this runner's. An owner that cannot be
				// read leaves the takeover pending, tried again.
				if fe := (*forwardError)(nil); errors.As(err, &fe) || r.owns(rn.id) != nil {
					r.drop(rn)
				}
				return nil, err
			}
		}
	}
	before := rn.pre.Incarnation()
	rn.state, rn.takeover = rn.pre, nil
	evs, err := r.decideAppend(ctx, rn, t)
	if rn.state.Runner() == r.id && rn.state.Incarnation() > before {
		rn.pre, rn.lazy = aggregate.State{}, false // its entry: keyBeforeAppend, or act
		r.takenOver.Add(1)
		r.tel.Emit(ctx, telemetry.RunTakenOver, "run", rn.id, "previous", rn.previous, "cause", t.Cause)
		return evs, err
	}
	if rn.driven {
		// Not recorded (the store did not answer, or another writer
		// came first): still to do, with the cause the log says now.
		t.Then, t.Cause = nil, aggregate.RecoveryCause(rn.state)
		rn.pre, rn.takeover, rn.lazy = rn.state, &t, r.lazyTakeover(rn.state)
		if view, verr := aggregate.Recovered(rn.pre, t, r.clock(rn)); verr == nil {
			rn.state = view
		}
	}
	return evs, err
}

// finishTakeover records rn's pending takeover on its own, when the
// command that acquired the run recorded nothing, and performs its work.
//
// A lazy takeover (an idle run) is not recorded on its own: the run is
// forgotten instead, and costs nothing until the next command — unless
// the takeover records more than itself: approval expiries that fell due
// (applied after the recovery, docs/semantics.md §8), which nothing else would
// record once the timer that woke the run is spent.
func (r *Runner) finishTakeover(ctx context.Context, rn *run) {
	if rn.takeover == nil || !rn.driven {
		return
	}
	if evs, _ := aggregate.Decide(rn.pre, *rn.takeover, r.clock(rn)); rn.lazy && len(evs) <= 1 {
		r.drop(rn)
		return
	}
	if err := r.step(ctx, rn, nil); err != nil {
		if conflict := (*eventlog.ConflictError)(nil); errors.As(err, &conflict) {
			// Expected: the previous driver's hand-off came first; the
			// takeover stays pending when it is still to record.
			r.log.Info("takeover", "run", rn.id, "err", err)
		} else {
			r.log.Warn("takeover", "run", rn.id, "err", err)
		}
		if rn.driven && rn.takeover != nil {
			// Still to record, whoever started it (a command, a scan, a
			// timer): tried again without a command (docs/semantics.md §8:
			// pending work is retried, never dropped), off the caller's
			// path; the retry decides it on the store's owner (takeOver).
			r.retryLater(rn.id)
		}
	}
}

// lazyTakeover reports whether the takeover of a run in state s is
// recorded only with the first decision that records something (run.lazy):
// the run is idle — unless this runner holds a head key and the run's head
// is behind (its driver died between a person's decision and its
// signature; keyBeforeAppend kept its entry): that takeover is recorded
// at once, its record sealed with the signed head it owes (sealFor):
// restsWithoutDriver, which for an idle run is !owesHead.
func (r *Runner) lazyTakeover(s aggregate.State) bool {
	return aggregate.Idle(s) && !r.owesHead(s)
}
