package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
)

// AttemptCheck reports whether task's attempt is still the one the run
// waits for, right before its body would start. A body whose attempt is
// no longer current (the run was handed off or recovered, the attempt was
// lost, reported, stopped or the run ended) is never started: recovery
// already decided what happened to it (docs/semantics.md §8), and a late start
// would be an effect nobody knows about. An error means the run could not
// be read.
type AttemptCheck func(ctx context.Context, task api.Task) (current bool, err error)

// WithAttemptCheck replaces the check of an attempt before its body
// starts (default: LogCheck over the worker's JetStream).
func WithAttemptCheck(c AttemptCheck) Option { return func(w *Worker) { w.check = c } }

// WithoutAttemptCheck starts every task's body without reading its run
// (tests that publish tasks of runs that have no log).
func WithoutAttemptCheck() Option { return func(w *Worker) { w.check = nil; w.noCheck = true } }

// LogCheck is the default AttemptCheck: it folds the task's run from the
// event log (WEFT_EVENTS in js) and accepts the attempt only while its
// action is running that very attempt in the run's current incarnation,
// and — when the run was handed off — only while the runner that handed it
// off still lives (a draining runner records the work in flight; once it
// is gone, recovery decides). A log that has not reached the task's fence
// yet (a lagging replica) is an error, so the worker reads again.
//
// A task that names its fence's version (api.Task.FenceVersion) is checked on
// the run's last message alone when that message holds the fence: an
// attempt fenced by the run's last decision is current (the aggregate
// guarantees it: property (n) of its tests), so one direct get answers the
// check (docs/adr/0014). Otherwise the run is read and folded.
func LogCheck(js jetstream.JetStream) AttemptCheck {
	l := eventlog.New(js)
	return func(ctx context.Context, t api.Task) (bool, error) {
		if t.FenceVersion > 0 {
			last, head, err := l.Last(ctx, t.Run)
			if err != nil {
				return false, err
			}
			if head.Version < t.FenceVersion {
				// A replica behind the leader: the fence is committed
				// before its task is published, so read again.
				return false, fmt.Errorf("worker: run %s: the fence of %s attempt %d (version %d) is not visible yet", t.Run, t.Action, t.Attempt, t.FenceVersion)
			}
			if fencedLast(last, t) {
				return true, nil
			}
		}
		envs, _, err := l.Load(ctx, t.Run)
		if err != nil {
			return false, err
		}
		recs := make([]events.Recorded, 0, len(envs))
		for _, env := range envs {
			ev, err := env.Event()
			if err != nil {
				return false, fmt.Errorf("worker: run %s: %w", t.Run, err)
			}
			recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
		}
		s, err := aggregate.FoldChecked(recs)
		if err != nil {
			// A well-formed message naming an impossible transition: the
			// run is quarantined, like a run whose log holds a message no
			// reader can fold (retried, never dropped).
			return false, &weft.Error{Code: weft.CodeQuarantined, Message: fmt.Sprintf("run %s quarantined: %v", t.Run, err)}
		}
		if !aggregate.FenceVisible(s, t.Action, t.Attempt, t.Incarnation) {
			// A replica behind the leader (direct gets on R3): the fence
			// is committed before its task is published, so read again.
			return false, fmt.Errorf("worker: run %s: the fence of %s attempt %d (incarnation %d) is not visible yet", t.Run, t.Action, t.Attempt, t.Incarnation)
		}
		if !s.HandedOff() {
			return Current(s, t), nil
		}
		live, err := js.KeyValue(ctx, api.RunnersBucket)
		if err != nil {
			return false, err
		}
		if _, err := live.Get(ctx, s.Runner()); err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return false, nil // handed off and its runner gone
			}
			return false, err
		}
		return aggregate.AttemptRunning(s, t.Action, t.Attempt, t.Incarnation), nil
	}
}

// fencedLast reports whether last, the events of a run's last message,
// hold t's fence at t.FenceVersion.
func fencedLast(last []events.Envelope, t api.Task) bool {
	if len(last) == 0 || t.FenceVersion < last[0].Version || t.FenceVersion > last[len(last)-1].Version {
		return false
	}
	env := last[t.FenceVersion-last[0].Version]
	if env.Type != events.NameAttemptFenced {
		return false
	}
	ev, err := env.Event()
	if err != nil {
		return false
	}
	f, ok := ev.(events.AttemptFenced)
	return ok && f.Action == t.Action && f.Attempt == t.Attempt && f.Incarnation == t.Incarnation
}

// Current reports whether t's attempt is the running attempt of its action
// in state s: same attempt, the run's current incarnation, not handed off,
// not finished (aggregate.AttemptCurrent).
func Current(s aggregate.State, t api.Task) bool {
	return aggregate.AttemptCurrent(s, t.Action, t.Attempt, t.Incarnation)
}
