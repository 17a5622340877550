package ownership

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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
	// blindWarned, slowWarned, stuckWarned: when the blind view, a slow
	// round, a round that has not ended (or begun), was last said.
	blindWarned, slowWarned, stuckWarned time.Time
	// began, ended: when the last round began and ended (WatchRounds);
	// at: the partition the round in progress decides.
	began, ended time.Time
	at           int
	// liveSince, liveWarned: owners of partitions assigned to this runner
	// that the view says are live (noteLiveOwners).
	liveSince, liveWarned map[string]time.Time
}

// noteLiveOwners records the owners of partitions assigned to this
// runner that the runners view holds live (they release their partitions
// themselves), and says at Warn one that stayed so for staleAfter while
// its liveness key is absent: a view that keeps a gone runner live.
func (p *Peers) noteLiveOwners(ctx context.Context, round map[string][]int) {
	now := p.cfg.Clock.Now()
	s := &p.stale
	s.mu.Lock()
	for id := range s.liveSince {
		if round[id] == nil {
			delete(s.liveSince, id)
			delete(s.liveWarned, id)
		}
	}
	if s.liveSince == nil {
		s.liveSince, s.liveWarned = map[string]time.Time{}, map[string]time.Time{}
	}
	type due struct {
		id    string
		since time.Time
	}
	var check []due
	for id := range round {
		since, ok := s.liveSince[id]
		if !ok {
			s.liveSince[id] = now
			continue
		}
		if now.Sub(since) >= p.staleAfter() && now.Sub(s.liveWarned[id]) >= p.staleWarnEvery() {
			s.liveWarned[id] = now
			check = append(check, due{id, since})
		}
	}
	s.mu.Unlock()
	for _, d := range check {
		id := d.id
		// Made in the round (deferred by Pass), and due only when owners
		// are stranded already: a short bound, so that a server that does
		// not answer holds the round little longer.
		gctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := p.cfg.Live.Get(gctx, id)
		cancel()
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // present (a live owner that has not released yet), or cannot tell
		}
		v := p.runners
		v.mu.Lock()
		k := v.keys[id]
		v.mu.Unlock()
		p.cfg.Log.Warn("the runners view holds a partition owner live while its liveness key is absent: its partitions stay its own",
			"owner", id, "partitions", round[id], "live_in_view_for", now.Sub(d.since).Round(time.Millisecond),
			"view_revision", k.revision, "view_until_in", k.until.Sub(now).Round(time.Millisecond))
	}
}

// roundBegan and roundAt note a round in progress (WatchRounds).
func (p *Peers) roundBegan(now time.Time) {
	s := &p.stale
	s.mu.Lock()
	defer s.mu.Unlock()
	s.began, s.at = now, -1
}

func (p *Peers) roundAt(part int) {
	s := &p.stale
	s.mu.Lock()
	defer s.mu.Unlock()
	s.at = part
}

// WatchRounds says at Warn, until ctx ends, a round of rebalancing that has
// not ended for staleAfter (a read or write of it that does not return),
// and rounds that have not begun for as long (the partition loop is held
// elsewhere): the partitions of a gone runner stay its own meanwhile. It
// checks every lease.
func (p *Peers) WatchRounds(ctx context.Context) {
	t := p.cfg.Clock.NewTicker(p.cfg.Lease)
	defer t.Stop()
	start := p.cfg.Clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := p.cfg.Clock.Now()
		s := &p.stale
		s.mu.Lock()
		began, ended, at := s.began, s.ended, s.at
		say := now.Sub(s.stuckWarned) >= p.staleWarnEvery()
		running := began.After(ended)
		last := began
		if last.Before(start) {
			last = start
		}
		if running && now.Sub(began) >= p.staleAfter() && say {
			s.stuckWarned = now
			s.mu.Unlock()
			p.cfg.Log.Warn("a round of rebalancing has not ended", "for", now.Sub(began).Round(time.Millisecond), "partition", at)
			continue
		}
		if !running && now.Sub(last) >= p.staleAfter() && say {
			s.stuckWarned = now
			s.mu.Unlock()
			p.cfg.Log.Warn("no round of rebalancing has begun", "for", now.Sub(last).Round(time.Millisecond))
			continue
		}
		s.mu.Unlock()
	}
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

// noteRound notes a round's end and says one that took staleAfter or
// longer (begun at start): not a round that waited for one bounded read
// through a server restart (a lease is shorter than such a wait), but one
// that kept a gone runner's partitions its own as long as an undecided
// owner does.
func (p *Peers) noteRound(start time.Time) {
	now := p.cfg.Clock.Now()
	took := now.Sub(start)
	s := &p.stale
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = now
	if took < p.staleAfter() {
		return
	}
	if now.Sub(s.slowWarned) < p.staleWarnEvery() {
		return
	}
	s.slowWarned = now
	p.cfg.Log.Warn("a round of rebalancing took longer than the grace of a new view and a lease", "took", took.Round(time.Millisecond))
}
