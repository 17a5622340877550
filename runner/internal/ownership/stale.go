package ownership

import (
	"sync"
	"time"
)

// What the rounds of rebalancing could not decide, said at Warn
// (docs/semantics.md §8: a gone runner's partitions are taken over, a live
// one's never): a partition assigned to this runner whose owner's liveness
// key left the view (its heartbeat is stale) but which the judgement could
// not tell gone for longer than the grace of a new view and a lease
// (staleAfter), with what the judgement saw; a runners view that could not
// tell at all (every round did nothing) for longer than a lease; a round
// that took longer than a lease. Each is said once, then again every
// staleWarnEvery while it lasts.
type staleRounds struct {
	mu     sync.Mutex
	since  map[string]time.Time // owner → since when it stayed undecided
	warned map[string]time.Time // owner → when it was last said
	blind  time.Time            // since when the view could not tell (zero: it can)
	// blindWarned, slowWarned: when the blind view, a slow round, was last
	// said.
	blindWarned, slowWarned time.Time
}

// undecided is a partition owner that a round could not tell gone: the
// partitions assigned to this runner it owns, and what the judgement saw.
type undecided struct {
	partitions []int
	saw        string
}

// staleAfter is how long an owner whose key left the view may stay
// undecided before it is said: the whole grace of a view that just began
// (judgeGrace: an absent key without a marker waits for it), and a lease.
func (p *Peers) staleAfter() time.Duration { return p.judgeGrace() + p.cfg.Lease }

// staleWarnEvery is how often a lasting one is said again.
func (p *Peers) staleWarnEvery() time.Duration { return max(10*p.cfg.Lease, 10*time.Second) }

// noteUndecided records the owners a round could not tell gone (none:
// every owner was decided) and says those undecided for a lease.
func (p *Peers) noteUndecided(round map[string]*undecided) {
	now := p.cfg.Clock.Now()
	s := &p.stale
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blind = time.Time{}
	for id := range s.since {
		if round[id] == nil {
			delete(s.since, id)
			delete(s.warned, id)
		}
	}
	if len(round) == 0 {
		return
	}
	if s.since == nil {
		s.since, s.warned = map[string]time.Time{}, map[string]time.Time{}
	}
	for id, u := range round {
		since, ok := s.since[id]
		if !ok {
			s.since[id] = now
			continue
		}
		if now.Sub(since) < p.staleAfter() || now.Sub(s.warned[id]) < p.staleWarnEvery() {
			continue
		}
		s.warned[id] = now
		p.cfg.Log.Warn("a partition owner whose heartbeat is stale is not judged gone: its partitions stay its own",
			"owner", id, "partitions", u.partitions, "undecided_for", now.Sub(since).Round(time.Millisecond), "saw", u.saw)
	}
}

// noteBlind records a round that did nothing because the runners view
// could not tell, and says so once it lasted a lease.
func (p *Peers) noteBlind() {
	now := p.cfg.Clock.Now()
	v := p.runners
	v.mu.Lock()
	seen := v.seen
	v.mu.Unlock()
	s := &p.stale
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blind.IsZero() {
		s.blind = now
		return
	}
	if now.Sub(s.blind) < p.cfg.Lease || now.Sub(s.blindWarned) < p.staleWarnEvery() {
		return
	}
	s.blindWarned = now
	p.cfg.Log.Warn("the runners view cannot tell who is alive: no round of rebalancing claims or releases a partition",
		"for", now.Sub(s.blind).Round(time.Millisecond), "last_delivery_ago", now.Sub(seen).Round(time.Millisecond))
}

// noteRound says a round that took longer than a lease (begun at start).
func (p *Peers) noteRound(start time.Time) {
	now := p.cfg.Clock.Now()
	took := now.Sub(start)
	if took < p.cfg.Lease {
		return
	}
	s := &p.stale
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.slowWarned) < p.staleWarnEvery() {
		return
	}
	s.slowWarned = now
	p.cfg.Log.Warn("a round of rebalancing took longer than a lease", "took", took.Round(time.Millisecond))
}
