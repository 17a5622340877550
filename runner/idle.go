package runner

import (
	"context"
	"sync"

	"github.com/weftrun/weft/aggregate"
)

// Idle runs (docs/adr/0014). A run that waits only for people — suspended
// with nothing in flight: no model call, no body, no queued action, no
// timer but approval expiries (armed durably) — needs nothing from its
// driver until a command or a timer reaches it. The driver evicts it from
// memory and keeps only its id, so that an idle runner's memory does not
// grow with the runs waiting for approvals. A command or timer for it
// reads it again (its snapshot, stored when it was suspended, and the
// tail) and drives it as before, without a takeover: nothing was in
// flight, so there is nothing to recover. A draining runner reads its
// evicted runs back to hand them off with the others, within its drain
// window.

// idleRuns is the set of runs a runner evicted while they were idle.
type idleRuns struct {
	mu  sync.Mutex
	set map[string]struct{}
}

func (s *idleRuns) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = map[string]struct{}{}
	}
	s.set[id] = struct{}{}
}

// take removes id and reports whether it was there.
func (s *idleRuns) take(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.set[id]
	delete(s.set, id)
	return ok
}

func (s *idleRuns) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.set[id]
	return ok
}

// list returns the evicted runs' ids.
func (s *idleRuns) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.set))
	for id := range s.set {
		out = append(out, id)
	}
	return out
}

// adoptIdle reads every evicted run back into memory (a draining runner
// hands them off with the others), as long as ctx lasts.
func (r *Runner) adoptIdle(ctx context.Context) {
	for _, id := range r.idle.list() {
		if ctx.Err() != nil {
			return
		}
		if rn, err := r.acquire(ctx, id); err == nil {
			rn.unlock()
		}
	}
}

// len is how many runs are evicted.
func (s *idleRuns) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.set)
}

// idle reports whether rn waits only for people (see above).
func (r *Runner) isIdle(rn *run) bool {
	if !rn.driven || rn.takeover != nil || rn.stale || !rn.keyed || rn.modelTurn != 0 || rn.state.HandedOff() {
		return false
	}
	if aggregate.Status(rn.state).Kind != aggregate.StatusSuspended {
		return false
	}
	w := aggregate.Pending(rn.state)
	if w.Finished || w.Model != nil || w.Resolve != nil || len(w.Dispatch) > 0 || len(w.Children) > 0 {
		return false
	}
	for _, t := range w.Timers {
		if t.Kind != aggregate.TimerApprovalExpiry {
			return false
		}
		if a, ok := rn.armed[timerKey(t)]; !ok || !a.isDurable() {
			return false // its durable schedule is not armed yet
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, kicked := r.kicks[rn.id]
	_, reply := r.replies[rn.id]
	return !kicked && !reply && !r.draining
}

// maybeEvict evicts rn, which the caller holds, when it is idle.
func (r *Runner) maybeEvict(rn *run) {
	if !r.isIdle(rn) {
		return
	}
	for key, t := range rn.armed {
		t.local.Stop()
		delete(rn.armed, key)
	}
	r.mu.Lock()
	if r.runs[rn.id] == rn {
		delete(r.runs, rn.id)
		r.idle.add(rn.id)
	}
	r.mu.Unlock()
	rn.driven = false
}
