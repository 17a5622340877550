package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// run is a run this runner drives (or, for a finished run, a transient
// view used to decide one command). Its fields are guarded by sem.
type run struct {
	id     string
	sem    chan struct{}
	state  aggregate.State
	head   eventlog.Head
	agent  *agent.Agent
	driven bool

	dispatched  map[string]bool
	fences      map[string]uint64      // attempt key → version of its attempt_fenced, appended by this runner and not dispatched yet
	armed       map[string]*armedTimer // timer key → its local timer and durable schedule
	modelTurn   int64
	modelCancel context.CancelFunc
	durable     bool      // a durable schedule was armed for the run: purge them when it finishes
	stale       bool      // an append's outcome is unknown: re-read before acting
	keyed       bool      // weft_drivers names this runner for the run
	lastAt      time.Time // recorded time of the run's last event
	snapAt      uint64
	asked       map[string]time.Time // approval requests seen: action#revision → when

	// takeover is the recovery this runner decided to make (its driver is
	// gone) but has not recorded yet: it is recorded together with the
	// command that acquired the run, decided on the recovered state before
	// any effect of the recovery (SEMANTICS §7), or on its own once that
	// command recorded nothing. While it is set, pre is the state in the
	// log and state the recovered view (aggregate.Recovered) that the
	// command's pre-checks read; nothing is acted on.
	takeover *aggregate.Recover
	pre      aggregate.State
	previous string // the gone driver
}

func newRun(id string, s aggregate.State, h eventlog.Head, a *agent.Agent) *run {
	return &run{id: id, sem: make(chan struct{}, 1), state: s, head: h, agent: a, dispatched: map[string]bool{}, armed: map[string]*armedTimer{}, asked: map[string]time.Time{}}
}

// evolve folds rec into rn's state and remembers its recorded time.
func (rn *run) evolve(rec events.Recorded) {
	rn.state = aggregate.Evolve(rn.state, rec)
	if rec.At.After(rn.lastAt) {
		rn.lastAt = rec.At
	}
}

// clock is the store time at which this runner decides for rn: its clock,
// but never before the run's last recorded event (a runner whose clock is
// behind does not record a decision before the events it follows, nor
// judge deadlines by an earlier time than the run already reached).
func (r *Runner) clock(rn *run) time.Time {
	now := r.now().UTC()
	if rn != nil && rn.lastAt.After(now) {
		return rn.lastAt
	}
	return now
}

func (rn *run) lock(ctx context.Context) error {
	select {
	case rn.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s was busy for the whole command timeout", rn.id)}
	}
}

func (rn *run) unlock() { <-rn.sem }

// forwardError says the run is driven by another live runner.
type forwardError struct{ driver string }

func (e *forwardError) Error() string { return "run driven by " + e.driver }

// snapshot is the value of a run's key in weft_snapshots: its state
// folded up to head.
type snapshot struct {
	Schema int             `json:"schema"`
	Head   eventlog.Head   `json:"head"`
	State  aggregate.State `json:"state"`
	// At is the recorded time of the event at Head (absent in snapshots
	// of earlier releases).
	At time.Time `json:"at,omitzero"`
}

// load reads a run: its KV snapshot, if any, then the log's tail after it
// (the whole history when there is no usable snapshot).
func (r *Runner) load(ctx context.Context, id string) (aggregate.State, eventlog.Head, error) {
	s, h, _, err := r.loadAt(ctx, id)
	return s, h, err
}

// loadAt is load that also returns the recorded time of the run's last
// event (zero when unknown: no events, or a snapshot without it).
func (r *Runner) loadAt(ctx context.Context, id string) (aggregate.State, eventlog.Head, time.Time, error) {
	if r.snaps != nil {
		if e, err := r.snaps.Get(ctx, id); err == nil {
			var snap snapshot
			if json.Unmarshal(e.Value(), &snap) == nil && snap.Schema == aggregate.SnapshotSchema {
				tail, head, err := r.evlog.LoadAfter(ctx, id, snap.Head)
				if err == nil {
					recs, rerr := recorded(tail)
					if rerr == nil {
						s, at := snap.State, snap.At
						for _, rec := range recs {
							s = aggregate.Evolve(s, rec)
							at = rec.At
						}
						return s, head, at, nil
					}
				}
			}
		}
	}
	envs, head, err := r.evlog.Load(ctx, id)
	if err != nil {
		return aggregate.State{}, head, time.Time{}, fmt.Errorf("load run %s: %w", id, err)
	}
	recs, err := recorded(envs)
	if err != nil {
		return aggregate.State{}, head, time.Time{}, err
	}
	var at time.Time
	if len(recs) > 0 {
		at = recs[len(recs)-1].At
	}
	return aggregate.Fold(recs), head, at, nil
}

// snapshotEvery is how many versions a run may grow past its last
// snapshot before a new one is stored; suspended and finished runs are
// always stored.
const snapshotEvery = 16

// maybeSnapshot stores rn's state in weft_snapshots when it is due. A
// snapshot is only an optimisation: a stale one is completed by the tail.
func (r *Runner) maybeSnapshot(rn *run) {
	if r.snaps == nil {
		return
	}
	st := aggregate.Status(rn.state).Kind
	if rn.state.Version() < rn.snapAt+snapshotEvery && st != aggregate.StatusSuspended && st != aggregate.StatusFinished {
		return
	}
	rn.snapAt = rn.state.Version()
	b, err := json.Marshal(snapshot{Schema: aggregate.SnapshotSchema, Head: rn.head, State: rn.state.Clone(), At: rn.lastAt})
	if err != nil {
		r.log.Warn("snapshot", "run", rn.id, "err", err)
		return
	}
	id := rn.id
	go func() {
		if _, err := r.snaps.Put(context.Background(), id, b); err != nil {
			r.log.Debug("snapshot put", "run", id, "err", err)
		}
	}()
}

func recorded(envs []events.Envelope) ([]events.Recorded, error) {
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			return nil, err
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return recs, nil
}

func (r *Runner) agentFor(s aggregate.State) (*agent.Agent, error) {
	ref := s.Started().Agent
	a, ok := r.agents[ref.Name+"@"+ref.Version]
	if !ok {
		return nil, &weft.Error{Code: weft.CodeUnknownAgent, Message: fmt.Sprintf("this runner does not serve agent %s version %s", ref.Name, ref.Version)}
	}
	return a, nil
}

// acquire returns the locked run id, taking it over when its driver is
// gone. It returns a *forwardError when another live runner drives it.
// The caller must call rn.unlock.
//
// Acquisition is single-flight per run in this process: while one caller
// reads the run from the log (and perhaps takes it over), the others wait
// for it and then find the run in memory. Two concurrent takeovers in one
// process would otherwise both decide a recovery, the second from this very
// runner (SEMANTICS §8: only a runner that is gone is recovered from).
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
				return nil, &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s was busy for the whole command timeout", id)}
			}
		}
		if ok {
			if err := rn.lock(ctx); err != nil {
				return nil, err
			}
			r.mu.Lock()
			still := r.runs[id] == rn
			r.mu.Unlock()
			if still {
				return rn, nil
			}
			rn.unlock()
			tries++
			continue
		}
		rn, err := r.acquireFromLog(ctx, id)
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

// errAcquireAgain tells acquire that another writer changed the run while
// it was being taken over: read it again.
var errAcquireAgain = errors.New("acquire again")

// acquireFromLog reads run id from the log for acquire (which holds the
// run's single-flight slot) and takes it over when its driver is gone.
func (r *Runner) acquireFromLog(ctx context.Context, id string) (*run, error) {
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
	// A run this runner evicted while it waited for people (idle.go) is
	// its own still: driven again as it is, without a takeover.
	driver := s.Runner()
	if driver == r.id && r.idle.take(id) {
		rn := newRun(id, s, head, a)
		rn.lastAt, rn.driven, rn.keyed = at, true, true
		_ = rn.lock(ctx)
		r.mu.Lock()
		r.runs[id] = rn
		r.mu.Unlock()
		return rn, nil
	}
	// A live driver keeps its runs, handed off or not: a draining
	// runner records the work still in flight until it is done and
	// deletes its liveness key.
	if driver != r.id && r.alive(ctx, driver) {
		return nil, &forwardError{driver: driver}
	}
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	if draining {
		return nil, &weft.Error{Code: weft.CodeRunnerBusy, Message: "this runner is draining"}
	}
	// Take the run over. A run recorded as ours that is not in memory
	// (and not being acquired: see acquire) was driven by an earlier
	// process with our id: its work is lost all the same. Nothing is
	// recorded yet: the caller's command is decided together with the
	// recovery (see run.takeover).
	rn := newRun(id, s, head, a)
	rn.lastAt = at
	_ = rn.lock(ctx)
	cause := events.RecoveredRunnerLost
	if s.HandedOff() {
		cause = events.RecoveredHandedOff
	}
	t := aggregate.Recover{Runner: r.id, Cause: cause}
	view, err := aggregate.Recovered(s, t, r.clock(rn))
	if err != nil {
		rn.unlock()
		return nil, err
	}
	rn.pre, rn.state, rn.takeover, rn.previous = s, view, &t, driver
	rn.driven = true
	r.mu.Lock()
	r.runs[id] = rn
	r.mu.Unlock()
	return rn, nil
}

// takeOver records rn's pending takeover with c (nil for none) as the
// command it is for: Recover{Then: c} decided on the state in the log, so
// that c is judged on the recovered state before any follow-on of the
// recovery. It returns what decideAppend returns. When the takeover did
// not land and rn is still this runner's, it stays pending.
func (r *Runner) takeOver(ctx context.Context, rn *run, c aggregate.Command) ([]events.Event, error) {
	t := *rn.takeover
	t.Then = c
	before := rn.pre.Incarnation()
	rn.state, rn.takeover = rn.pre, nil
	evs, err := r.decideAppend(ctx, rn, t)
	if rn.state.Runner() == r.id && rn.state.Incarnation() > before {
		rn.pre, rn.keyed = aggregate.State{}, false // act puts the key
		r.tel.Emit(ctx, telemetry.RunTakenOver, "run", rn.id, "previous", rn.previous, "cause", t.Cause)
		return evs, err
	}
	if rn.driven {
		// Not recorded (the store did not answer): still to do.
		t.Then = nil
		rn.pre, rn.takeover = rn.state, &t
		if view, verr := aggregate.Recovered(rn.pre, t, r.clock(rn)); verr == nil {
			rn.state = view
		}
	}
	return evs, err
}

// finishTakeover records rn's pending takeover on its own, when the
// command that acquired the run recorded nothing, and performs its work.
func (r *Runner) finishTakeover(ctx context.Context, rn *run) {
	if rn.takeover == nil || !rn.driven {
		return
	}
	if err := r.step(ctx, rn, nil); err != nil {
		r.log.Warn("takeover", "run", rn.id, "err", err)
	}
}

// decideAppend decides c on rn's state and appends the events, re-reading
// the run after a conflict. It returns the appended events and Decide's
// refusal (events and a refusal may come together). After a conflict that
// made another runner the driver it returns the *eventlog.ConflictError.
func (r *Runner) decideAppend(ctx context.Context, rn *run, c aggregate.Command) ([]events.Event, error) {
	if rn.takeover != nil {
		return r.takeOver(ctx, rn, c)
	}
	for range 8 {
		now := r.clock(rn)
		evs, derr := aggregate.Decide(rn.state, c, now)
		if len(evs) == 0 {
			return nil, derr
		}
		envs, head, err := r.evlog.Append(ctx, rn.id, rn.head, now, evs...)
		if err != nil {
			var conflict *eventlog.ConflictError
			if !errors.As(err, &conflict) {
				switch weft.ErrorCode(err) {
				case weft.CodePayloadTooLarge, weft.CodeInvalidName:
					return nil, err // refused by the store: nothing landed
				case weft.CodeQuarantined:
					// Refused: another message is the run's last, and no
					// reader can fold it.
					r.noteQuarantine(err)
					return nil, err
				}
				// The outcome is unknown: the decision may have landed
				// (its acknowledgement lost). Re-read, so that what did
				// land is acted on now, not whenever the run is next
				// touched.
				if ours := r.resync(ctx, rn, evs); ours {
					return evs, derr
				}
				return nil, &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
			}
			// Re-read and re-decide; never act on the lost decision.
			tail, head, lerr := r.evlog.LoadAfter(ctx, rn.id, rn.head)
			if lerr != nil {
				if r.noteQuarantine(lerr) {
					return nil, lerr // nothing acts on the run until it is repaired
				}
				return nil, &weft.Error{Code: weft.CodeUnavailable, Message: lerr.Error()}
			}
			recs, rerr := recorded(tail)
			if rerr != nil {
				return nil, rerr
			}
			for _, rec := range recs {
				rn.evolve(rec)
			}
			rn.head = head
			if rn.driven && rn.state.Runner() != r.id {
				r.tel.Emit(ctx, telemetry.LeaseLost, "run", rn.id, "driver", rn.state.Runner())
				r.drop(rn)
				return nil, err
			}
			if _, isRecover := c.(aggregate.Recover); isRecover {
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
		r.observe(ctx, rn, evs)
		r.maybeSnapshot(rn)
		return evs, derr
	}
	return nil, &weft.Error{Code: weft.CodeContended, Message: fmt.Sprintf("run %s: concurrent writers kept winning", rn.id)}
}

// resync re-reads rn's tail after an append of evs whose outcome is
// unknown and, when something landed (our decision or another writer's)
// and rn is still driven by this runner, performs the committed work
// (append first, then act: everything acted on is in the log). It reports
// whether the tail starts with exactly evs: our decision landed.
func (r *Runner) resync(ctx context.Context, rn *run, evs []events.Event) bool {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tail, head, err := r.evlog.LoadAfter(rctx, rn.id, rn.head)
	if err != nil {
		rn.stale = true // the decision may have landed: read before acting
		return false
	}
	if len(tail) == 0 {
		return false
	}
	recs, err := recorded(tail)
	if err != nil {
		rn.stale = true
		return false
	}
	ours := len(recs) >= len(evs)
	landed := make([]events.Event, 0, len(recs))
	for i, rec := range recs {
		if i < len(evs) && ours {
			a, _ := json.Marshal(rec.Event)
			b, _ := json.Marshal(evs[i])
			ours = rec.Event.EventName() == evs[i].EventName() && string(a) == string(b)
		}
		rn.evolve(rec)
		landed = append(landed, rec.Event)
	}
	rn.head = head
	if rn.driven && rn.state.Runner() != r.id {
		r.tel.Emit(ctx, telemetry.LeaseLost, "run", rn.id, "driver", rn.state.Runner())
		r.drop(rn)
		return false
	}
	r.observe(ctx, rn, landed)
	r.maybeSnapshot(rn)
	if !ours {
		r.act(ctx, rn, landed, true)
	}
	return ours
}

// drop forgets a run this runner no longer drives.
func (r *Runner) drop(rn *run) {
	rn.driven = false
	for key, t := range rn.armed {
		t.stop()
		delete(rn.armed, key)
	}
	if rn.modelCancel != nil {
		rn.modelCancel()
	}
	r.mu.Lock()
	if r.runs[rn.id] == rn {
		delete(r.runs, rn.id)
		delete(r.replies, rn.id)
	}
	r.mu.Unlock()
}

// step decides c, appends, and acts; ResolveCalls follow-ups are decided
// in the same step. It returns Decide's refusal.
//
// On a run whose takeover is pending (run.takeover) the takeover is
// recorded with c (c may be nil then: the takeover alone), and everything
// the run needs is acted on.
func (r *Runner) step(ctx context.Context, rn *run, c aggregate.Command) error {
	takeover := rn.takeover != nil
	evs, err := r.decideAppend(ctx, rn, c)
	if len(evs) > 0 && rn.driven {
		r.act(ctx, rn, evs, takeover)
	}
	return err
}

// act performs the effects of rn's Pending work (append first, then act).
// Work is acknowledged by being recorded, never by having been attempted
// (raft's Ready/Advance): whatever could not be performed or recorded here
// — a task publish, a durable timer, the model's reply, the resolution of
// a tool request, a stop, a child run to tend — makes the run be woken
// again after a backoff (retryLater), and that wake derives the work again
// from the run's state and does what is still missing (SEMANTICS §8).
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
				if err := r.nc.Publish(worker.StopSubjectPrefix+rn.id, nil); err != nil {
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
	if !rn.keyed && !w.Finished {
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.drivers.Put(kctx, rn.id, []byte(r.id))
		cancel()
		if err != nil {
			r.log.Warn("driver key", "run", rn.id, "err", err)
			failed = true
		} else {
			rn.keyed = true
		}
	}
	if w.Finished {
		r.drop(rn)
		r.disarmRun(rn)
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := r.drivers.Delete(dctx, rn.id); err != nil {
			r.log.Warn("driver key delete", "run", rn.id, "err", err)
			return true // the wake of a finished run deletes it
		}
		r.finished.add(rn.id)
		return false
	}
	// Timers: a local one for precision, a durable one as the backstop;
	// those no longer pending are stopped and disarmed (timers.go).
	r.syncTimers(rn, w.Timers)
	// Dispatch fenced attempts, each once.
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
			}
			return false // the step acted on what followed
		}
		if rn.modelTurn != w.Model.Turn && !w.Model.RecordOnly {
			r.callModel(rn, *w.Model)
		}
	}
	// Validation and policy for a tool request, decided at once.
	if w.Resolve != nil {
		cmd := r.resolve(ctx, rn, *w.Resolve)
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
	switch we.Code {
	case weft.CodeUnavailable, weft.CodeContended, weft.CodeRunnerBusy, weft.CodeConflict:
		return true
	}
	return false
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
		rn.evolve(rec)
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
		e, err := r.drivers.Get(ctx, run)
		if err != nil || string(e.Value()) != r.id {
			return
		}
		rev = e.Revision()
	}
	if err := r.drivers.Delete(ctx, run, jetstream.LastRevision(rev)); err != nil {
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
		err = r.drivers.Delete(ctx, run)
	} else {
		_, err = r.drivers.Put(ctx, run, []byte(s.Runner()))
	}
	if err != nil {
		r.log.Warn("driver key", "run", run, "err", err)
	}
}

// kick is a pending wake-up of a run some of whose work failed.
type kick struct {
	timer   *time.Timer
	backoff time.Duration
}

// The backoff of retryLater: the first retry after retryFirst, doubling up
// to retryMax while the work keeps failing.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// retryLater wakes run id again after a backoff because some of its
// pending work could not be performed or recorded. The wake (on whichever
// runner drives the run then) derives the work again from the run's state
// and does what is still missing. A wake already scheduled is kept.
func (r *Runner) retryLater(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	k := r.kicks[id]
	if k == nil {
		k = &kick{backoff: retryFirst}
		r.kicks[id] = k
	}
	if k.timer != nil {
		return
	}
	d := k.backoff
	k.backoff = min(2*k.backoff, retryMax)
	k.timer = time.AfterFunc(d, func() {
		r.mu.Lock()
		k.timer = nil
		r.mu.Unlock()
		if err := r.retry(id); err != nil {
			if r.noteQuarantine(err) {
				return // woken again once repaired (watchQuarantined)
			}
			r.log.Warn("retry", "run", id, "err", err)
			if transient(err) {
				r.retryLater(id)
			}
		}
	})
}

// retry is the wake of retryLater. It first checks that the run's state
// in memory is the log's (current), so that work is derived from the log
// as it is, not from the memory of a runner that lost the run.
func (r *Runner) retry(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx, end := r.bounded(ctx)
	defer end()
	for range 2 {
		rn, err := r.acquire(ctx, id)
		if err != nil {
			var fe *forwardError
			switch {
			case errors.As(err, &fe):
				return r.forwardWake(ctx, fe.driver, id)
			case weft.ErrorCode(err) == weft.CodeUnknownRun:
				return nil
			}
			return err
		}
		if rn.driven && rn.takeover == nil {
			current, err := r.current(ctx, rn)
			if err != nil {
				rn.unlock()
				if r.noteQuarantine(err) {
					return err
				}
				return &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
			}
			if !current && !rn.driven {
				rn.unlock()
				continue // another runner drives it: route the wake there
			}
		}
		err = r.wakeLocked(ctx, rn, true)
		rn.unlock()
		return err
	}
	return nil
}

// retried resets run id's backoff after a pass of act in which nothing
// failed.
func (r *Runner) retried(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.kicks[id]; k != nil && k.timer == nil {
		delete(r.kicks, id)
	}
}

// stopRetries stops every scheduled retry (the runner stops).
func (r *Runner) stopRetries() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for id, k := range r.kicks {
		if k.timer != nil {
			k.timer.Stop()
		}
		delete(r.kicks, id)
	}
}

// keepReply keeps the model's answer c of run id, which could not be
// recorded, for the next pass of act; takeReply returns it (and forgets
// it) when it answers the turn still requested.
func (r *Runner) keepReply(id string, c aggregate.Command) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replies[id] = c
}

func (r *Runner) takeReply(id string, turn int64) aggregate.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.replies[id]
	if !ok {
		return nil
	}
	delete(r.replies, id)
	if modelTurnOf(c) != turn {
		return nil
	}
	return c
}

// modelTurnOf is the turn a model answer answers, 0 for another command.
func modelTurnOf(c aggregate.Command) int64 {
	switch c := c.(type) {
	case aggregate.ModelReply:
		return c.Turn
	case aggregate.ModelFailure:
		return c.Turn
	}
	return 0
}

// timerKey names a timer within its run: one subject token, injective
// (two timers never share a key, so arming one never replaces another's
// durable schedule). The action id keeps its ASCII letters and digits;
// every other byte is "_" and two hex digits ("1/call_1" is
// "1_2Fcall_5F1"), and the kind, attempt, revision and turn are joined by
// "-", which no part contains.
func timerKey(t aggregate.Timer) string {
	var a strings.Builder
	for _, c := range []byte(t.Action) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			a.WriteByte(c)
		default:
			fmt.Fprintf(&a, "_%02X", c)
		}
	}
	return fmt.Sprintf("%s-%s-%d-%d-%d", t.Kind, a.String(), t.Attempt, t.Revision, t.Turn)
}

// attemptKey names an attempt of a run: action, attempt, incarnation.
func attemptKey(action string, attempt, incarnation int) string {
	return fmt.Sprintf("%s/%d/%d", action, attempt, incarnation)
}

// dispatch publishes a fenced attempt as a task. It names the fence's
// version when this runner appended it, so that the worker's check reads
// only the run's last message (worker.LogCheck).
func (r *Runner) dispatch(ctx context.Context, rn *run, d aggregate.Dispatch) error {
	s := rn.state
	ref := s.Started().Agent
	task := worker.Task{
		Schema: worker.Schema, Run: rn.id, Action: d.Action, Agent: ref.Name, Version: ref.Version, Tool: d.Tool, Attempt: d.Attempt,
		Incarnation: d.Fence.Incarnation, Claim: worker.ClaimKey(rn.id, d.Action, d.Attempt, d.Fence.Incarnation), Arguments: d.Arguments, TimeoutMS: int64(d.Fence.Timeout),
		Deadline: d.Fence.Deadline, MaxResultBytes: s.Limits().MaxResultBytes, SettleWithinMS: int64(d.Fence.SettleWithin),
		IdempotencyKey: tools.Call{Run: rn.id, Action: d.Action, Attempt: d.Attempt}.IdempotencyKey(),
		Correlation:    s.Started().Correlation,
		FenceVersion:   rn.fences[attemptKey(d.Action, d.Attempt, d.Fence.Incarnation)],
	}
	if a, ok := s.Action(d.Action); ok && a.Approved && len(a.Answers) > 0 {
		task.Reviewer = a.Answers[len(a.Answers)-1].Reviewer
	}
	b, err := json.Marshal(task)
	if err != nil {
		return err
	}
	// Addressed by the run's agent identity: only the body bound in that
	// agent@version takes it (SEMANTICS §3).
	subject := worker.Queue{Agent: ref.Name, Version: ref.Version, Tool: d.Tool}.Subject()
	msg := nats.NewMsg(subject)
	msg.Data = b
	msg.Header.Set(worker.HeaderMsgID, fmt.Sprintf("%s/%s/%d/%d", rn.id, d.Action, d.Attempt, d.Fence.Incarnation))
	// The producer span of the publish (in the run's trace): the task
	// carries it as traceparent and the worker's attempt span is its child.
	sctx, span := r.tel.StartDispatch(ctx, rn.id, d.Action, d.Tool, d.Attempt, subject)
	r.tel.Inject(sctx, msg.Header)
	_, err = r.js.PublishMsg(ctx, msg)
	if err != nil {
		span.RecordError(err)
	}
	span.End()
	if err != nil {
		return err
	}
	r.tel.Emit(ctx, telemetry.ToolDispatched, "run", rn.id, "action", d.Action, "tool", d.Tool, "attempt", fmt.Sprint(d.Attempt))
	return nil
}

// resolve validates every call of the batch and runs the policy on the
// valid ones, failing closed.
func (r *Runner) resolve(ctx context.Context, rn *run, b aggregate.CallBatch) aggregate.ResolveCalls {
	ag := rn.agent
	timeout, _ := rn.state.Limits().PolicyTimeout.Duration()
	out := aggregate.ResolveCalls{Turn: b.Turn}
	limited := delegationLimits(rn, b) // checked before policy
	for _, c := range b.Calls {
		res := aggregate.Resolution{CallID: c.ID}
		res.Validation, res.Detail, res.Normalized = ag.ValidateCall(c.Name, c.Arguments)
		target, over := delegationTarget(rn, c, &res, limited)
		if res.Validation == events.CallValid && !over {
			args := res.Normalized
			if args == nil {
				args = c.Arguments
			}
			pctx, span := r.tel.StartPolicy(ctx, rn.id, aggregate.ActionID(b.Turn, c.ID))
			dec, err := policy.Evaluate(pctx, ag.Policy(), policy.Action{Run: rn.id, ActionID: aggregate.ActionID(b.Turn, c.ID), Tool: c.Name, Arguments: args, Target: target}, timeout)
			span.End()
			res.Policy = policyResult(dec, err)
			res.Tool, _ = ag.ToolConfig(c.Name)
		}
		out.Calls = append(out.Calls, res)
	}
	return out
}

func policyResult(dec policy.Decision, err error) aggregate.PolicyResult {
	if err != nil {
		return aggregate.PolicyResult{Decision: events.PolicyError, Reason: err.Error()}
	}
	switch dec.Kind() {
	case policy.KindAllow:
		return aggregate.PolicyResult{Decision: events.PolicyAllow}
	case policy.KindDeny:
		return aggregate.PolicyResult{Decision: events.PolicyDeny, Reason: dec.Reason()}
	case policy.KindRequireApproval:
		q := dec.Requirement()
		return aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: q.Name, Version: q.Version}}
	}
	return aggregate.PolicyResult{Decision: events.PolicyError, Reason: "invalid policy decision"}
}

// callModel makes the model call for a requested turn in its own goroutine
// and feeds the answer back as a command.
func (r *Runner) callModel(rn *run, mc aggregate.ModelCall) {
	ag := rn.agent
	req := ag.Request(aggregate.ModelRequest(rn.state))
	ctx, cancel := context.WithCancel(context.Background())
	if !mc.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(context.Background(), mc.Deadline)
	}
	rn.modelTurn, rn.modelCancel = mc.Turn, cancel
	r.inflight.Add(1)
	id := rn.id
	typed := ag.Typed()
	go func() {
		defer r.inflight.Done()
		defer cancel()
		sctx, span := r.tel.StartModel(ctx, id, mc.Turn, ag.Model().Name())
		reply, err := ag.Model().Complete(sctx, req)
		var cmd aggregate.Command
		if err != nil {
			var me *model.Error
			kind, msg, status, after := model.ErrOther, err.Error(), 0, time.Duration(0)
			switch {
			case errors.As(err, &me):
				kind, msg, status, after = me.Kind, me.Message, me.Status, me.RetryAfter
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				kind, msg = model.ErrTimedOut, "the model timeout stopped the call"
			}
			if ctx.Err() == context.DeadlineExceeded {
				kind = model.ErrTimedOut
			}
			telemetry.EndModel(span, "", nil, string(kind))
			cmd = aggregate.ModelFailure{Turn: mc.Turn, Kind: kind, Status: status, Message: msg, RetryAfter: after}
		} else {
			telemetry.EndModel(span, string(reply.Kind), reply.Usage, "")
			mr := aggregate.ModelReply{Turn: mc.Turn, Reply: reply}
			if typed && reply.Kind == model.ReplyFinalAnswer {
				ans, derr := ag.DecodeAnswer(reply.Turn.Text)
				if derr != nil {
					mr.AnswerError = derr.Error()
				} else {
					mr.Answer = ans
				}
			}
			cmd = mr
		}
		if err := r.command(context.Background(), id, cmd); err != nil {
			r.log.Debug("model answer", "run", id, "turn", mc.Turn, "err", err)
			if transient(err) {
				// Not recorded: kept, and recorded by the next pass of act
				// (the turn stays requested in the log).
				r.keepReply(id, cmd)
				r.retryLater(id)
			}
		}
	}()
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
	defer rn.unlock()
	return r.wakeLocked(ctx, rn, true)
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
			if err := r.drivers.Delete(dctx, rn.id); err != nil {
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
// already and nothing else would apply it (SEMANTICS §8: pending work is
// retried, never dropped).
func (r *Runner) applyDue(ctx context.Context, rn *run) error {
	now := r.clock(rn)
	var failed error
	for _, t := range aggregate.Pending(rn.state).Timers {
		if !t.At.After(now) {
			if err := r.step(ctx, rn, t.Command()); err != nil {
				r.log.Debug("due timer", "run", rn.id, "err", err)
				if transient(err) && failed == nil {
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
