package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/aggregate"
)

// The timers of a driven run (docs/adr/0002, docs/adr/0014). Every timer
// aggregate.Pending lists gets a local timer, for precision; a durable
// schedule (timer.Timers) is the backstop for a run nobody has loaded. A
// timer that is no longer pending (its attempt reported, its approval
// answered, the run finished) is stopped, and its durable schedule — if it
// had one — removed, so that nothing wakes the run for it later.
//
// Timers that guard work in flight — a tool body's timeout, a settle
// window, a model retry delay — only matter while the run has a driver:
// the driver holds the run in memory with its local timers, and a driver
// that is gone has its runs taken over within about 1.25 leases, when the
// recovery (not the timer) decides what happened to the work in flight
// and the new driver arms its own timers. Their durable schedule is armed
// only once the work has been in flight for durableGrace, so that the
// common step that ends within it writes no schedule and needs no
// disarming. An approval expiry, which guards a suspended run, is armed
// durably at once.

// durableGrace is how long work in flight goes without a durable schedule
// for its timer.
const durableGrace = 10 * time.Second

// armedTimer is one pending timer of a driven run.
type armedTimer struct {
	at    time.Time
	local *time.Timer // fires the timer's command at its time
	lazy  *time.Timer // arms the durable schedule after durableGrace

	mu      sync.Mutex
	arming  bool // a durable arm is in flight
	durable bool // the durable schedule is armed
	gone    bool // no longer pending: an arm that lands now is undone
}

// stop stops the local timers; it reports whether a durable schedule is
// armed (or being armed: it is undone once it lands).
func (t *armedTimer) stop() (durable bool) {
	t.local.Stop()
	if t.lazy != nil {
		t.lazy.Stop()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone = true
	return t.durable && !t.arming
}

// isDurable reports whether the durable schedule is armed.
func (t *armedTimer) isDurable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.durable && !t.gone
}

// inFlight reports whether a timer kind guards work in flight (see the
// comment above).
func inFlight(k aggregate.TimerKind) bool {
	switch k {
	case aggregate.TimerToolTimeout, aggregate.TimerSettleWindow, aggregate.TimerModelRetry:
		return true
	}
	return false
}

// syncTimers makes rn's timers the pending ones: arms those that are new
// and stops (and disarms) those that are no longer pending. The caller
// holds rn.
func (r *Runner) syncTimers(rn *run, pending []aggregate.Timer) {
	keep := make(map[string]bool, len(pending))
	for _, t := range pending {
		key := timerKey(t)
		keep[key] = true
		if a, ok := rn.armed[key]; ok && a.at.Equal(t.At) {
			continue
		} else if ok {
			r.disarmTimer(rn.id, key, a)
		}
		cmd := t.Command()
		id := rn.id
		a := &armedTimer{at: t.At}
		a.local = time.AfterFunc(time.Until(t.At), func() {
			// Bounded by the runner's lifetime: a timer firing while it
			// stops is fired again by the next driver (from the log, or
			// by the durable schedule).
			r.testHook("timer-fired", -1, id)
			if err := r.command(r.bg.ctx, id, cmd); retryTimer(err) {
				r.log.Warn("timer", "run", id, "key", key, "err", err)
				r.retryLater(id)
			}
		})
		rn.armed[key] = a
		if inFlight(t.Kind) {
			if time.Until(t.At) > durableGrace {
				rn.durable = true
				a.lazy = time.AfterFunc(durableGrace, func() { r.armDurable(id, key, a) })
			}
			continue
		}
		rn.durable = true
		r.armDurableNow(id, key, a)
	}
	for key, a := range rn.armed {
		if !keep[key] {
			delete(rn.armed, key)
			r.disarmTimer(rn.id, key, a)
		}
	}
}

// armDurable arms a's durable schedule in the background; a failure makes
// the run be woken again (retryLater), which arms it anew.
func (r *Runner) armDurable(id, key string, a *armedTimer) {
	a.mu.Lock()
	if a.gone || a.durable || a.arming {
		a.mu.Unlock()
		return
	}
	a.arming = true
	a.mu.Unlock()
	started := r.bg.Go(func(ctx context.Context) {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.timers.Arm(actx, id, key, a.at)
		cancel()
		a.mu.Lock()
		a.arming = false
		a.durable = err == nil
		undo := a.gone && a.durable
		a.mu.Unlock()
		if err != nil {
			r.log.Warn("arm durable timer", "run", id, "key", key, "err", err)
			a.mu.Lock()
			gone := a.gone
			a.mu.Unlock()
			if !gone && ctx.Err() == nil {
				r.retryLaterTimer(id, key, a)
			}
			return
		}
		if undo {
			r.disarm(id, key)
		}
	})
	if !started {
		// The runner stopped: the next driver arms the run's pending
		// timers again from the log.
		a.mu.Lock()
		a.arming = false
		a.mu.Unlock()
	}
}

// armDurableNow arms a's durable schedule before it returns (a timer
// that guards a run waiting for people: the run may be evicted from
// memory right after, idle.go); a failure is retried in the background.
func (r *Runner) armDurableNow(id, key string, a *armedTimer) {
	a.mu.Lock()
	a.arming = true
	a.mu.Unlock()
	actx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := r.timers.Arm(actx, id, key, a.at)
	cancel()
	a.mu.Lock()
	a.arming = false
	a.durable = err == nil
	a.mu.Unlock()
	if err != nil {
		r.log.Warn("arm durable timer", "run", id, "key", key, "err", err)
		r.retryLaterTimer(id, key, a)
	}
}

// retryLaterTimer arms a's durable schedule again after a backoff.
func (r *Runner) retryLaterTimer(id, key string, a *armedTimer) {
	time.AfterFunc(retryFirst, func() { r.armDurable(id, key, a) })
}

// disarmTimer stops a and removes its durable schedule, if any.
func (r *Runner) disarmTimer(id, key string, a *armedTimer) {
	if a.stop() {
		r.disarm(id, key)
	}
}

// disarm removes the durable schedule of run id's timer key in the
// background. It is an optimisation: a schedule left behind only wakes
// the run for nothing (so one the runner's stop cuts short is not
// retried).
func (r *Runner) disarm(id, key string) {
	r.bg.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := r.timers.Disarm(ctx, id, key); err != nil {
			r.log.Debug("disarm durable timer", "run", id, "key", key, "err", err)
		}
	})
}

// disarmRun removes every durable schedule of rn, a finished run, in the
// background (one purge), if it ever had a timer.
func (r *Runner) disarmRun(rn *run) {
	if !rn.durable {
		return
	}
	id := rn.id
	r.bg.Go(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := r.timers.DisarmRun(ctx, id); err != nil {
			r.log.Debug("disarm the durable timers of a finished run", "run", id, "err", err)
		}
	})
}

// finishedRuns remembers the last finishedCap runs this runner saw finish
// with their weft_drivers key deleted: a late wake-up of one of them (a
// timer that fired before it was disarmed) costs a map lookup, not a read
// of the run.
type finishedRuns struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

// finishedCap bounds finishedRuns.
const finishedCap = 8192

func (f *finishedRuns) add(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.set == nil {
		f.set, f.ring = map[string]struct{}{}, make([]string, finishedCap)
	}
	if _, ok := f.set[id]; ok {
		return
	}
	if old := f.ring[f.next]; old != "" {
		delete(f.set, old)
	}
	f.ring[f.next] = id
	f.set[id] = struct{}{}
	f.next = (f.next + 1) % finishedCap
}

func (f *finishedRuns) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.set[id]
	return ok
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
