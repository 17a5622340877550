package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/timer"
)

// checkStranded is the liveness check (docs/semantics.md §8, recovery: a
// run whose driver is gone is taken over, and pending work is retried,
// never dropped): once the faults stopped and every part runs again,
// every run that needs no person progresses by itself — a new event, or
// a finished run, or one that waits only for a person (aggregate.Idle
// with no approval expiry pending: an expiry is the runtime's to fire) —
// within strandedBound of the last time it moved or of its next due time
// (its earliest timer, its model call's deadline), whichever is later.
// A run that does not is stranded: nothing but a command would move it.
const checkStranded = "run_stranded"

// strandedBound is how long a run that needs no person may go without
// progress once something is due: four takeovers — a lease for a
// partition's owner to be seen gone plus a full scan of its partitions
// (every 8 leases), at least 30 s — plus the worst path of a durable
// timer's firing after its due time: the runner's pause before it starts
// its timer consumer again (runner.TimerRestartCap, 16 s: its backoff
// may have reached the cap after earlier consumes ended), a firing that
// failed during the faults redelivered at its longest delay (timer.NakCap,
// 10 s), and a firing delivered to a consume that then ended redelivered
// after the consumer's ack wait (5 s). At a 1 s lease, 67 s.
func (h *harness) strandedBound() time.Duration {
	return max(30*time.Second, 4*(h.cfg.Lease+8*h.cfg.Lease)) +
		runner.TimerRestartCap + timer.NakCap + timer.ConsumerConfig().AckWait
}

// strandedPoll is how often watchStranded reads the runs.
const strandedPoll = time.Second

// motion is what watchStranded remembers of one run: its version and
// when that version was first seen, and whether the run was reported.
type motion struct {
	version  uint64
	since    time.Time
	reported bool
}

// watchStranded reads every run the workload started, and the child runs
// of those that delegate, every strandedPoll, from when it is called (the
// quiet phase has every part up) until done closes, and reports each run
// stranded (checkStranded) once.
func (h *harness) watchStranded(ctx context.Context, w *workload, done <-chan struct{}) {
	seen := map[string]*motion{}
	tk := time.NewTicker(strandedPoll)
	defer tk.Stop()
	for {
		h.strandedOnce(ctx, w.startedRuns(), time.Now, seen)
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-tk.C:
		}
	}
}

// startedRuns lists the runs the workload started, in plan order.
func (w *workload) startedRuns() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var runs []string
	for _, p := range w.plans {
		if w.started[p.id] {
			runs = append(runs, p.id)
		}
	}
	return runs
}

// strandedOnce reads runs, and the child runs of those that delegate,
// each at now() taken once the run is read: a run at rest (finished,
// waiting only for a person, or not there) is forgotten; a run whose
// version changed is remembered as moving then; a run that has not moved
// for strandedBound after both its last move and its next due time is
// reported, once. A run whose only work is its child runs, all started
// and none finished, waits for them: they are read (and checked)
// themselves.
func (h *harness) strandedOnce(ctx context.Context, runs []string, now func() time.Time, seen map[string]*motion) {
	bound := h.strandedBound()
	queued := map[string]bool{}
	for _, run := range runs {
		queued[run] = true
	}
	for i := 0; i < len(runs); i++ {
		run := runs[i]
		if ctx.Err() != nil {
			return
		}
		s, err := h.fold(ctx, run)
		if err != nil {
			continue // read again at the next poll
		}
		at := now()
		if _, fin := s.Finished(); fin || !s.Exists() || aggregate.Idle(s) && len(aggregate.Pending(s).Timers) == 0 {
			// At rest. A run waiting for a person with an approval
			// expiry pending is not: the expiry is the runtime's, its
			// durable timer the only wake-up of a run no runner holds.
			delete(seen, run)
			continue
		}
		work := aggregate.Pending(s)
		for _, c := range work.Children {
			if !queued[c.Start.Child] {
				queued[c.Start.Child] = true
				runs = append(runs, c.Start.Child)
			}
		}
		m := seen[run]
		if m == nil || m.version != s.Version() {
			seen[run] = &motion{version: s.Version(), since: at}
			continue
		}
		if h.waitsForChildren(ctx, work) {
			// Owes nothing while it waits: its wait for the next move
			// starts when a child finishes.
			m.since = at
			continue
		}
		if m.reported || !at.After(nextDue(m.since, work).Add(bound)) {
			continue
		}
		m.reported = true
		due := nextDue(m.since, work)
		st := aggregate.Status(s)
		last := "unreadable"
		if envs, _, err := h.evlog.Load(ctx, run); err == nil {
			last = describeLast(envs[max(len(envs)-6, 0):])
		}
		h.violate(Violation{Check: checkStranded, Run: run,
			Detail: fmt.Sprintf("status %s, version %d: no progress for %s after its last move (%s) and its next due time (%s), with no person needed (model %v, dispatch %d, timers %d, children %d); last events: %s",
				st.Kind, s.Version(), bound, m.since.UTC().Format("15:04:05.000"), due.UTC().Format("15:04:05.000"), work.Model != nil, len(work.Dispatch), len(work.Timers), len(work.Children), last)})
	}
}

// waitsForChildren reports whether a run's only work is its child runs
// and each of them is started and not finished: the run then moves when
// a child finishes, and nothing is owed by it meanwhile. A child not
// started, or finished and not yet settled into the run, is the run's
// work, due now.
func (h *harness) waitsForChildren(ctx context.Context, work aggregate.Work) bool {
	if len(work.Children) == 0 || work.Model != nil || work.Resolve != nil || len(work.Dispatch) > 0 || len(work.Timers) > 0 {
		return false
	}
	for _, c := range work.Children {
		cs, err := h.fold(ctx, c.Start.Child)
		if err != nil {
			return true // unreadable: not judged at this poll
		}
		if _, fin := cs.Finished(); fin || !cs.Exists() {
			return false
		}
	}
	return true
}

// nextDue is when the next thing of a run that moved last at since is
// due: since itself when a dispatch or a resolution waits, or the run has
// no timer and no model call with a deadline; else the earliest of its
// timers and its model call's deadline, when after since.
func nextDue(since time.Time, work aggregate.Work) time.Time {
	if len(work.Dispatch) > 0 || work.Resolve != nil {
		return since
	}
	var next time.Time
	if len(work.Timers) > 0 {
		next = work.Timers[0].At // ordered by time
	}
	if work.Model != nil && !work.Model.Deadline.IsZero() && (next.IsZero() || work.Model.Deadline.Before(next)) {
		next = work.Model.Deadline
	}
	if next.After(since) {
		return next
	}
	return since
}
