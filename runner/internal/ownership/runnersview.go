package ownership

// The view of the live runners (weft_runners) that the partition
// assignment follows: one long-lived watcher, each entry expiring a lease
// after its beat.

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/partition"
)

// runnersView is weft_runners as this runner's watcher of it sees it
// (watchRunners): one long-lived watch, not a read of the bucket every
// round.
type runnersView struct {
	mu        sync.Mutex
	ready     bool                   // the watch delivered the bucket as it is
	seen      time.Time              // when the watch last delivered something
	keys      map[string]runnerEntry // by runner id
	left      map[string]leftEntry   // keys that left (expired, deleted), by runner id
	first     chan struct{}          // closed once the view was first ready
	firstOnce sync.Once
}

// runnerEntry is a liveness key as the watcher saw it: whether the runner
// takes part in the assignment, the key's revision, and until when the
// view counts it. The bucket's keys expire after a lease (its max age)
// without a message a watcher would see, so the view expires them itself:
// a lease after this runner last saw the key change (a new revision), by
// its own monotonic clock. Never by the message's timestamp: that is the
// server's clock, and with a skew of more than about ¾ of a lease between
// the two (a peer beats every lease/4) a live peer expired between two
// beats — its partitions were assigned away — or a gone one was kept. A key
// first seen in a watch's initial values counts from
// then (a lease at most longer than its beat, as for a peer seen to beat
// then), unless the previous watch saw it at the same revision.
type runnerEntry struct {
	assignable bool
	revision   uint64
	until      time.Time
}

// leftEntry is a key that left the view: the revision of its last put
// the view saw, and when it left (this runner's clock).
type leftEntry struct {
	revision uint64
	at       time.Time
}

func newRunnersView() *runnersView {
	return &runnersView{keys: map[string]runnerEntry{}, left: map[string]leftEntry{}, first: make(chan struct{})}
}

// leave moves key id out of the view (v.mu held), noting the revision of
// its last put seen in v.left; entries older than keep are dropped.
func (v *runnersView) leave(id string, now time.Time, keep time.Duration) {
	if k, ok := v.keys[id]; ok {
		v.left[id] = leftEntry{revision: k.revision, at: now}
		delete(v.keys, id)
	}
	for l, e := range v.left {
		if now.Sub(e.at) > keep {
			delete(v.left, l)
		}
	}
}

// leftAt reports the revision of the last put of runner id's key that the
// view saw before the key left it (by expiry, the view's own or the
// server's marker, or deletion): ok false when the key is in the view, or
// left unseen.
func (v *runnersView) leftAt(id string) (revision uint64, ok bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.left[id]
	return e.revision, ok
}

// WatchRunners keeps the runners view equal to weft_runners until ctx ends, with
// one watcher (an ordered consumer) made again, after a backoff, when it
// fails, ends or delivers nothing for a lease — every live runner,
// this one included, beats every lease/4, so silence means a watch
// that no longer follows the bucket. Until the view is ready again it
// cannot tell (liveRunners answers !ok).
func (p *Peers) WatchRunners(ctx context.Context) error {
	back := backoff.New(100*time.Millisecond, 2*time.Second)
	for ctx.Err() == nil {
		p.watchRunnersOnce(ctx)
		v := p.runners
		v.mu.Lock()
		v.ready = false
		v.mu.Unlock()
		if back.Wait(ctx) != nil {
			break
		}
	}
	return nil
}

func (p *Peers) watchRunnersOnce(ctx context.Context) {
	w, err := p.cfg.Live.WatchAll(ctx)
	if err != nil {
		p.cfg.Log.Warn("watch runners", "err", err)
		return
	}
	defer func() { _ = w.Stop() }()
	v := p.runners
	v.mu.Lock()
	prev := v.keys // the previous watch's: keys unchanged since keep their expiry
	v.keys, v.seen = map[string]runnerEntry{}, p.cfg.Clock.Now()
	v.mu.Unlock()
	check := p.cfg.Clock.NewTicker(p.cfg.Lease / 2)
	defer check.Stop()
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return
		case <-check.C():
			v.mu.Lock()
			silent := p.cfg.Clock.Since(v.seen) > p.cfg.Lease
			v.mu.Unlock()
			if silent {
				p.cfg.Log.Debug("watch runners: silent for a lease; watching again")
				return
			}
			continue
		case e, open = <-w.Updates():
		}
		if !open {
			return
		}
		now := p.cfg.Clock.Now()
		v.mu.Lock()
		v.seen = now
		switch {
		case e == nil:
			v.ready = true
			v.firstOnce.Do(func() { close(v.first) })
		case e.Operation() == jetstream.KeyValuePut:
			var b beat
			k := runnerEntry{
				assignable: json.Unmarshal(e.Value(), &b) == nil && b.Partitions == p.cfg.Partitions && !b.Draining,
				revision:   e.Revision(),
				until:      now.Add(p.cfg.Lease),
			}
			old, ok := v.keys[e.Key()]
			if !ok {
				old, ok = prev[e.Key()]
			}
			if ok && old.revision == k.revision {
				k.until = old.until // delivered again, not changed
			}
			v.keys[e.Key()] = k
			delete(v.left, e.Key())
		default:
			// Deleted (a drained runner), or expired: the server's marker
			// of a key that reached its max age (its runner stopped
			// beating) is delivered as a purge.
			v.leave(e.Key(), now, MarkerTTL(p.cfg.Lease))
		}
		ready := v.ready
		v.mu.Unlock()
		key := ""
		if e != nil {
			key = e.Key()
		}
		p.hook("runners-view", key) // "": the view is ready
		if ready && e != nil && e.Operation() != jetstream.KeyValuePut {
			// A runner left: the partition loop passes again now, not at
			// its next tick (its partitions are claimed on this change).
			p.hook("runners-changed", e.Key())
			p.loop.RunnersChanged()
		}
	}
}

// liveRunners lists the runners whose liveness key exists (live) and,
// among them, those that take part in the assignment (runners, sorted:
// their heartbeat names this deployment's number of partitions and they
// do not drain), with this one unless it drains (partition.Members); the
// keys that expired leave the view. ok is false when the watcher of
// weft_runners cannot tell (WatchRunners).
func (p *Peers) liveRunners() (live map[string]bool, runners []string, ok bool) {
	// The drain flag is read first: the view's lock is a leaf, never held
	// while the command loop's is taken.
	draining := p.loop.Draining()
	v := p.runners
	v.mu.Lock()
	if !v.ready {
		v.mu.Unlock()
		return nil, nil, false
	}
	now := p.cfg.Clock.Now()
	view := make(map[string]partition.Member, len(v.keys))
	for id, k := range v.keys {
		view[id] = partition.Member{Assignable: k.assignable, Until: k.until}
	}
	live, runners, expired := partition.Members(view, p.cfg.ID, draining, now)
	for _, id := range expired {
		v.leave(id, now, MarkerTTL(p.cfg.Lease)) // expired (max age)
	}
	v.mu.Unlock()
	return live, runners, true
}
