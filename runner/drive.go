package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/telemetry"
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

	dispatched map[string]bool
	// copyLost are the attempt keys whose stream copies were not
	// acknowledged (copyAcked), under lostMu — not the run's lock: the next
	// act marks them not dispatched (undispatchLost).
	lostMu      sync.Mutex
	copyLost    map[string]bool
	fences      map[string]uint64      // attempt key → version of its attempt_fenced, appended by this runner and not dispatched yet
	armed       map[string]*armedTimer // timer key → its local timer and durable schedule
	modelTurn   int64
	modelCancel context.CancelFunc
	// resolved is the resolution (validation and policy) decideAppend
	// found for a model reply's tool request and did not record with the
	// reply: the act that follows the reply's append decides it instead of
	// asking the policy again (taken by resolution, cleared by step).
	resolved *aggregate.ResolveCalls
	// prepared are the in-process worker's tasks whose claims went out
	// with the append of their fences (prepareHandOffs), by attemptKey:
	// given their go by dispatch, aborted when not recorded or not
	// dispatched (abortPrepared).
	prepared map[string]*worker.Prepared
	// aborting are the ends of aborted preparations' tasks, by attemptKey,
	// that may still be removing their claims: a close of such an attempt
	// waits for its end (waitAbortedClaim).
	aborting map[string]<-chan struct{}
	durable  bool      // a durable schedule was armed for the run: purge them when it finishes
	stale    bool      // an append's outcome is unknown: re-read before acting
	keyed    bool      // weft_drivers names this runner for the run
	keyRev   uint64    // the revision of that entry, when known
	lastAt   time.Time // recorded time of the run's last event
	snapAt   uint64
	asked    map[string]time.Time // approval requests seen: action#revision → when

	// takeover is the recovery this runner decided to make (its driver is
	// gone) but has not recorded yet: it is recorded together with the
	// command that acquired the run, decided on the recovered state before
	// any effect of the recovery (docs/semantics.md §7), or on its own once
	// that
	// command recorded nothing. While it is set, pre is the state in the
	// log and state the recovered view (aggregate.Recovered) that the
	// command's pre-checks read; nothing is acted on.
	takeover *aggregate.Recover
	pre      aggregate.State
	previous string // the gone driver
	// lazy is set for the takeover of an idle run: it is recorded only
	// with a command that records something, never on its own.
	lazy bool
	// ownerChecked is set when the acquisition that decided the takeover
	// read the store's owner of the partition (verifyOwner); the first
	// try to record it (takeOver) spends it, any later try reads again.
	ownerChecked bool
}

func newRun(id string, s aggregate.State, h eventlog.Head, a *agent.Agent) *run {
	return &run{id: id, sem: make(chan struct{}, 1), state: s, head: h, agent: a, dispatched: map[string]bool{}, armed: map[string]*armedTimer{}, asked: map[string]time.Time{}}
}

// evolve folds rec, an event this runner decided and appended, into rn's
// state and remembers its recorded time.
func (rn *run) evolve(rec events.Recorded) {
	rn.state = aggregate.Evolve(rn.state, rec)
	if rec.At.After(rn.lastAt) {
		rn.lastAt = rec.At
	}
}

// evolveRead is evolve for an event read from the log (a tail re-read
// after a conflict or an unknown outcome), which may be impossible: a
// well-formed message continuing the chain can name a transition no
// decision makes. Then rn's state is half folded: evolveRead drops rn,
// notes the run quarantined and returns the quarantine (impossible).
func (r *Runner) evolveRead(rn *run, rec events.Recorded, head eventlog.Head) error {
	s, err := aggregate.EvolveChecked(rn.state, rec)
	if err != nil {
		r.drop(rn)
		err = impossible(rn.id, head, err)
		r.noteQuarantine(err)
		return err
	}
	rn.state = s
	if rec.At.After(rn.lastAt) {
		rn.lastAt = rec.At
	}
	return nil
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
		return waitEnded(ctx, rn.id)
	}
}

// errNotServing is the cause with which a command's context ends when the
// runner stops serving at the end of its drain window (bounded).
var errNotServing = errors.New("the runner stopped serving: its drain window ended")

// errCommandTimeout is the cause with which a command's wait for its run
// ends when the command timeout passed (route): any other deadline is the
// caller's own.
var errCommandTimeout = errors.New("the command timeout passed")

// waitEnded is the runner_busy answer of a command that waited for run id
// — its lock, or its read by another command (acquire) — until ctx ended,
// saying why it ended: the command timeout passed while another command
// held the run; the runner stopped serving (the end of its drain window,
// bounded); or the caller's context ended first (a worker that gives up a
// report, a forwarder that stopped waiting).
func waitEnded(ctx context.Context, id string) error {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, errNotServing):
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: this runner stopped serving (its drain window ended) while the command waited for the run; retry", id)}
	case errors.Is(cause, errCommandTimeout):
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s was busy for the whole command timeout", id)}
	default:
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: the command ended while it waited for the run (%v); retry", id, cause)}
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
	r.loaded.Add(1)
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
							if s, err = aggregate.EvolveChecked(s, rec); err != nil {
								return aggregate.State{}, head, time.Time{}, impossible(id, head, err)
							}
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
	s, err := aggregate.FoldChecked(recs)
	if err != nil {
		return aggregate.State{}, head, time.Time{}, impossible(id, head, err)
	}
	return s, head, at, nil
}

// snapshotEvery is how many versions a run may grow past its last
// snapshot before a new one is stored; suspended runs are always stored.
// A finished run is stored only when due like a running one: a load of it
// then folds a tail of fewer than snapshotEvery versions, no longer than a
// takeover of a running run folds, and a short run does not pay an fsync
// (under sync_interval: always) for a snapshot it will likely never be
// read from (docs/adr/0032-fewer-writes-per-run.md).
const snapshotEvery = 16

// maybeSnapshot stores rn's state in weft_snapshots when it is due. A
// snapshot is only an optimisation: a stale one is completed by the tail.
func (r *Runner) maybeSnapshot(rn *run) {
	if r.snaps == nil {
		return
	}
	st := aggregate.Status(rn.state).Kind
	if rn.state.Version() < rn.snapAt+snapshotEvery && st != aggregate.StatusSuspended {
		return
	}
	rn.snapAt = rn.state.Version()
	b, err := json.Marshal(snapshot{Schema: aggregate.SnapshotSchema, Head: rn.head, State: rn.state.Clone(), At: rn.lastAt})
	if err != nil {
		r.log.Warn("snapshot", "run", rn.id, "err", err)
		return
	}
	id := rn.id
	// A put cut short by the shutdown leaves an older snapshot (or none):
	// the next load reads more of the log, and cuts one again.
	r.bg.Go(func(ctx context.Context) {
		if _, err := r.snaps.Put(ctx, id, b); err != nil {
			r.log.Debug("snapshot put", "run", id, "err", err)
		}
	})
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

// resync re-reads rn's tail after an append of evs whose outcome is
// unknown and, when something landed (our decision or another writer's)
// and rn is still driven by this runner, performs the committed work
// (append first, then act: everything acted on is in the log). It reports
// whether the tail starts with exactly evs: our decision landed. A tail
// holding an impossible event quarantines the run (evolveRead): resync
// returns false and the quarantine.
func (r *Runner) resync(ctx context.Context, rn *run, evs []events.Event) (bool, error) {
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tail, head, err := r.evlog.LoadAfter(rctx, rn.id, rn.head)
	if err != nil {
		rn.stale = true // the decision may have landed: read before acting
		return false, nil
	}
	if len(tail) == 0 {
		return false, nil
	}
	recs, err := recorded(tail)
	if err != nil {
		rn.stale = true
		return false, nil
	}
	ours := len(recs) >= len(evs)
	landed := make([]events.Event, 0, len(recs))
	for i, rec := range recs {
		if i < len(evs) && ours {
			a, _ := json.Marshal(rec.Event)
			b, _ := json.Marshal(evs[i])
			ours = rec.Event.EventName() == evs[i].EventName() && string(a) == string(b)
		}
		if err := r.evolveRead(rn, rec, head); err != nil {
			return false, err
		}
		landed = append(landed, rec.Event)
	}
	rn.head = head
	if rn.driven && rn.state.Runner() != r.id {
		r.tel.Emit(ctx, telemetry.LeaseLost, "run", rn.id, "driver", rn.state.Runner())
		r.drop(rn)
		return false, nil
	}
	r.observe(ctx, rn, landed)
	r.maybeSnapshot(rn)
	if !ours {
		r.act(ctx, rn, landed, true)
	}
	return ours, nil
}

// appendUnknown answers an append of evs (the decision derr came with)
// that failed with err, neither a conflict nor a refusal of the store:
// its outcome is unknown (decideAppend).
func (r *Runner) appendUnknown(ctx context.Context, rn *run, evs []events.Event, derr, err error) ([]events.Event, error) {
	r.testHook("append-unknown", -1, rn.id)
	// The outcome is unknown: the decision may have landed
	// (its acknowledgement lost). Re-read, so that what did
	// land is acted on now, not whenever the run is next
	// touched.
	ours, qerr := r.resync(ctx, rn, evs)
	if ours {
		// Landed: its head is signed as after an acknowledged
		// append (docs/adr/0026-signed-heads.md).
		r.signHead(ctx, rn)
		return evs, derr
	}
	if qerr != nil {
		return nil, qerr // an impossible event: nothing acts on the run until it is repaired
	}
	if rn.stale {
		// The run could not be read: the decision may have
		// landed, so "not applied — retry" would be a guess
		// (docs/semantics.md §8, "A run can always be answered").
		// The
		// caller answers it by its kind (unknownAnswer). The
		// run is read again soon, so that what did land is
		// acted on (docs/semantics.md §8: pending work is retried).
		if rn.driven {
			r.retryLater(rn.id)
		}
		return nil, &weft.Error{Code: weft.CodeOutcomeUnknown, Message: fmt.Sprintf(
			"run %s: whether the decision was recorded is not known (%v), and the run could not be read to learn it; read the run", rn.id, err)}
	}
	return nil, &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
}

// afterConflict reads the tail another writer appended when the append of
// c's decision met a conflict (err) and folds it into rn. It returns nil
// when decideAppend is to decide c again on the run as it is now, else
// the error decideAppend returns (err itself when the run is another
// runner's now, or for a takeover).
func (r *Runner) afterConflict(ctx context.Context, rn *run, c aggregate.Command, err error) error {
	wasRunner, wasIncarnation := rn.state.Runner(), rn.state.Incarnation()
	tail, head, lerr := r.evlog.LoadAfter(ctx, rn.id, rn.head)
	if lerr != nil {
		if r.noteQuarantine(lerr) {
			return lerr // nothing acts on the run until it is repaired
		}
		return &weft.Error{Code: weft.CodeUnavailable, Message: lerr.Error()}
	}
	recs, rerr := recorded(tail)
	if rerr != nil {
		return rerr
	}
	for _, rec := range recs {
		if err := r.evolveRead(rn, rec, head); err != nil {
			return err // quarantined: nothing acts on the run until it is repaired
		}
	}
	rn.head = head
	_, fin := rn.state.Finished()
	if _, isRecover := c.(aggregate.Recover); isRecover && rn.driven && !fin && rn.state.HandedOff() &&
		rn.state.Runner() == wasRunner && rn.state.Incarnation() == wasIncarnation {
		// A takeover met the hand-off of the driver it takes the run
		// over from (and perhaps the reports of its work in flight),
		// recorded while that driver gave the partition up (paused,
		// then released): the run is still this runner's to take
		// over, now with the cause handed_off (takeOver keeps it
		// pending, tried again). Dropped, nobody would drive it: its
		// previous driver gave it up, and the scan that woke it
		// removes the entry of a run it does not hold
		// (docs/semantics.md §8: a run can always be answered). A run
		// its previous driver still drives (no hand-off) is left to
		// it as before, and one it finished needs no takeover. The
		// equal incarnation is the test that nobody recovered the
		// run meanwhile (the runner changes only with a recovery);
		// the runner's is compared all the same.
		return err
	}
	if rn.driven && rn.state.Runner() != r.id {
		r.tel.Emit(ctx, telemetry.LeaseLost, "run", rn.id, "driver", rn.state.Runner())
		r.drop(rn)
		return err
	}
	if _, isRecover := c.(aggregate.Recover); isRecover {
		return err
	}
	return nil
}

// drop forgets a run this runner no longer drives.
//
// A run the log still names this runner the driver of (not handed off,
// not finished, no takeover pending) is remembered (r.mine): this process
// drove it and may still have work of it in flight — a body in its
// worker — so when it acquires the run again (its partition came back,
// its quarantine was repaired) it drives it as its own, never recovering
// it from itself (docs/semantics.md §8).
func (r *Runner) drop(rn *run) {
	if _, fin := rn.state.Finished(); rn.driven && rn.takeover == nil && rn.state.Exists() && !fin && !rn.state.HandedOff() && rn.state.Runner() == r.id {
		r.mu.Lock()
		if r.mine == nil {
			r.mine = map[string]struct{}{}
		}
		r.mine[rn.id] = struct{}{}
		r.mu.Unlock()
	}
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

// keyBeforeAppend puts rn's weft_drivers entry before an append of evs
// that gives a run without one (an idle run, idle.go, or a run read
// from the log) work in flight: an approval that fences an attempt, a
// takeover. A runner that dies between the append and act's put would
// otherwise leave a run with work in flight that no partition scan finds
// (docs/semantics.md §8: pending work is retried, never dropped). When the put
// fails nothing is appended: the command answers unavailable, nothing is
// acted on. An append that leaves the run idle needs no entry, and
// neither does one that finishes it, nor a hand-off (a drain's or a
// release's: the run's next owner finds it when a command reaches it, as
// an idle run).
//
// With a head key, an append sealed with its signed head (sealed:
// sealFor, docs/adr/0044) owes nothing once appended, and one whose
// acknowledgement is lost either landed signed or did not land: it needs
// no entry for its signature; a seal that cannot be made fails the append
// before it is sent (sealFor), so nothing is owed either. One not sealed
// (WithoutSeal, in tests: a runner before docs/adr/0044) that owes a
// signature — a person's decision that leaves the run idle, the end, an
// append to a finished run — puts the entry: its signed head follows
// (signHead), and a runner that dies between the two leaves the entry,
// whose wake signs it (signBehind); signHead deletes it once a finished
// run's head is signed.
func (r *Runner) keyBeforeAppend(ctx context.Context, rn *run, c aggregate.Command, evs []events.Event, now time.Time, sealed bool) error {
	if rn.keyed {
		return nil
	}
	if _, ended := rn.state.Finished(); ended {
		// An append to a finished run (a late report refused, a
		// settlement) not sealed is followed by a signed head
		// (signHead): with a head key, the entry first, so that a
		// signature that fails or a runner that dies before it leaves
		// the entry, whose wake signs the tail (signBehind).
		if r.headKey == nil || sealed {
			return nil
		}
	} else {
		if _, handOff := c.(aggregate.HandOff); !rn.driven || handOff {
			return nil
		}
		// With a head key, an append after which a signature is owed
		// (a person's decision, the end: HeadBehind) keeps its entry
		// until signed, even when it leaves the run idle or finished
		// (restsWithoutDriver); sealed, the signature is in it.
		if sealed {
			evs = append(evs[:len(evs):len(evs)], events.HeadSigned{})
		}
		if r.restsWithoutDriver(rn.after(evs, now)) {
			return nil
		}
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rev, err := r.drivers.Put(kctx, r.driverKey(rn.id), []byte(r.id))
	if err != nil {
		return &weft.Error{Code: weft.CodeUnavailable, Message: fmt.Sprintf("run %s: its driver entry could not be put before an append that puts work in flight or owes a signed head (%v); nothing was recorded", rn.id, err)}
	}
	rn.keyed, rn.keyRev = true, rev
	return nil
}

// after is rn's state once evs, a decision about to be appended at now,
// are folded in (rn's state is left as it is).
func (rn *run) after(evs []events.Event, now time.Time) aggregate.State {
	next := rn.state.Clone()
	for i, ev := range evs {
		next = aggregate.Evolve(next, events.Recorded{Run: rn.id, Version: rn.state.Version() + uint64(i) + 1, At: now, Event: ev})
	}
	return next
}

// withResolution returns evs, the decision of the model reply c on rn at
// now, followed by the resolution of the tool request the reply makes —
// validation, policy, queue and fence (aggregate.ResolveCalls), decided on
// the state evs give — so that both are recorded in one message of the log
// (docs/adr/0001-one-message-per-decision.md: a decision may carry several
// events; docs/adr/0027-fewer-writes-per-step.md), and the time to append
// them at. The events and their order are those of the reply's append
// followed by the resolution's: a reader of the log folds the same state.
// When the combined append is not recorded, nothing of it is: the reply is
// kept and recorded again by the next pass of act, as any unrecorded reply
// (docs/semantics.md §8, "work not recorded is derived again from the log,
// never dropped"), and its resolution decided again with it.
//
// The resolution is decided at the time the policy answered, never before:
// a fence's deadline is its time plus the tool's timeout, and an approval's
// expiry its time plus the approval timeout (docs/semantics.md §5), so a
// slow policy must not shorten them. The reply is decided again at that
// time, and the whole message is recorded then (as a reply that waited for
// the run's lock is).
//
// It returns evs alone, at now, when there is nothing to resolve, when the
// runner drains (the runner that takes the run over resolves), when rn is
// not driven (a pending takeover never reaches here: decideAppend records
// the reply with the recovery, takeOver), when the reply decided again at the later time is not the
// same decision, or when the resolution is refused or would close claims:
// then act derives the resolution from the log after the reply's append
// and decides it on its own, as before.
func (r *Runner) withResolution(ctx context.Context, rn *run, c aggregate.Command, evs []events.Event, now time.Time, resolved **aggregate.ResolveCalls) ([]events.Event, time.Time) {
	if !rn.driven {
		return evs, now
	}
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	if draining {
		return evs, now
	}
	next := rn.after(evs, now)
	w := aggregate.Pending(next)
	if w.Resolve == nil {
		return evs, now
	}
	// The policy is asked once per reply: a pass after a conflict reuses
	// what the first found for the same calls (the aggregate derives the
	// delegation bounds again as it decides).
	if *resolved == nil || !sameBatch(**resolved, *w.Resolve) {
		// resolve reads the run's state (limits, delegation bounds): the
		// state the reply gives, for the time of the decision (put back
		// even if resolve panics: the reply is not recorded yet).
		cmd := func() aggregate.ResolveCalls {
			pre := rn.state
			rn.state = next
			defer func() { rn.state = pre }()
			return r.resolve(ctx, rn, *w.Resolve)
		}()
		*resolved = &cmd
	}
	cmd := **resolved
	at := r.clock(rn) // the policy answered
	again, derr := aggregate.Decide(rn.state, c, at)
	if derr != nil || !sameNames(again, evs) {
		return evs, now
	}
	next = rn.after(again, at)
	more, err := aggregate.Decide(next, cmd, at)
	if err != nil || len(more) == 0 || len(aggregate.ToClose(next, cmd, more)) > 0 {
		return evs, now
	}
	return append(again[:len(again):len(again)], more...), at
}

// sameBatch reports whether cmd resolves the calls of b.
func sameBatch(cmd aggregate.ResolveCalls, b aggregate.CallBatch) bool {
	return cmd.Turn == b.Turn && slices.EqualFunc(cmd.Calls, b.Calls, func(r aggregate.Resolution, c events.ToolCall) bool { return r.CallID == c.ID })
}

// resolution takes the resolution decideAppend found for b's calls
// (rn.resolved), if any.
func (rn *run) resolution(b aggregate.CallBatch) (aggregate.ResolveCalls, bool) {
	res := rn.resolved
	rn.resolved = nil
	if res == nil || !sameBatch(*res, b) {
		return aggregate.ResolveCalls{}, false
	}
	return *res, true
}

// sameNames reports whether a and b hold the same events by name, in order.
func sameNames(a, b []events.Event) bool {
	return slices.EqualFunc(a, b, func(x, y events.Event) bool { return x.EventName() == y.EventName() })
}
