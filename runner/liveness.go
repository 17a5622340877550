package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/partition"
)

// judgement tracks whether this runner can tell that a peer is gone
// (alive, judgeLevel). A peer is gone when its liveness key is absent —
// but only once this runner has been connected, with its own heartbeat
// recorded in the same bucket, for long enough that every live peer has
// heartbeated since: a lease and a heartbeat interval after it started,
// or after a runners bucket that was emptied or re-created (every
// connected peer puts its key every lease/4); after a reconnection or a
// failed heartbeat — the server may have restarted and disconnected
// every peer too — also the connection's reconnect wait and jitter, the
// time a peer disconnected by the same restart may take to come back
// (judgeGrace). Until then an absent key means "cannot tell" (docs/semantics.md
// §8: only a runner that is gone is recovered from).
//
// Before the whole grace, once it has watched for a lease and a heartbeat
// interval, the server's word is enough for some absent keys: a key that
// reaches its max age leaves a marker (the bucket's limit marker, kept
// runnersMarkerTTL) stamped with when the server expired it. A key that
// expired a lease and two heartbeat intervals after this runner's view began
// (one for the server's expiry timer, which may mark it that late)
// is gone (a server restart in between would have reconnected this runner
// too: a SIGKILLed peer is judged a lease after its last beat whenever
// this runner started), and so is one that expired a reconnect wait ago.
// A key absent without a marker — never written, or expired long enough
// ago that the server dropped the marker (about a lease after the expiry,
// whatever the marker's TTL) — waits for the whole grace.
//
// Ahead of both, the bucket's order says it without a clock: a key that
// expired after a put of it later than this runner's first beat of the
// current period (a higher revision: the bucket's stream sequence) was
// beaten while this runner's view was continuous, so no server restart
// cut its runner off since (it would have reconnected this runner too);
// it stopped beating for a lease with the server up. It is gone at the
// marker, however soon after this runner's start, with no margin for the
// server's expiry timer or the clocks.
type judgement struct {
	since       time.Time // start of the current period of continuous view
	period      uint64    // the number of that period (a clock may read the same time twice)
	first       uint64    // revision of this runner's first beat sent and answered within that period (0: none yet)
	reconnected bool      // the period began at a reconnection or a failed heartbeat
	reconnects  uint64    // the connection's reconnect count seen last
	revision    uint64    // revision of the last heartbeat put
	at          time.Time // when that put was answered (this runner's clock)
}

// newPeriod begins a period of continuous view at now, with no beat of
// this runner's in it yet.
func (j *judgement) newPeriod(now time.Time) {
	j.since, j.first = now, 0
	j.period++
}

// liveness is this runner's judgement of its peers (alive): the period
// of continuous view (judgement) and the peers found gone lately (the
// gone cache). Its lock is its own, not the command loop's (Runner.mu):
// judging a peer never waits for a run's bookkeeping, nor the other way.
type liveness struct {
	mu    sync.Mutex
	judge judgement
	gone  map[string]time.Time // runners alive found gone, and when
}

// start begins the first period of continuous view at now, at the
// connection's reconnect count rc.
func (l *liveness) start(now time.Time, rc uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.judge.newPeriod(now)
	l.judge.reconnects = rc
}

// beat is the value of a runner's key in weft_runners: when it was put,
// and the number of partitions of the deployment it takes part in (a
// runner whose key says otherwise — a process of an older release, or a
// test's stand-in — is alive to judge by, but is assigned no partition).
// A draining runner says so: it is assigned no partition any more.
type beat struct {
	Schema     int    `json:"schema"`
	At         string `json:"at"`
	Partitions int    `json:"partitions,omitempty"`
	Draining   bool   `json:"draining,omitempty"`
}

func (r *Runner) heartbeat(ctx context.Context) error {
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	b, _ := json.Marshal(beat{Schema: 1, At: r.now().UTC().Format(time.RFC3339Nano), Partitions: r.nparts, Draining: draining})
	l := &r.peers
	l.mu.Lock()
	period := l.judge.period
	l.mu.Unlock()
	rev, err := r.live.Put(ctx, r.id, b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.judge.newPeriod(r.clk.Now()) // peers cannot beat either, perhaps
		l.judge.reconnected = true
		return fmt.Errorf("runner: heartbeat: %w", err)
	}
	switch {
	case rev <= l.judge.revision:
		l.judge.newPeriod(r.clk.Now()) // the bucket was re-created
	case l.judge.first == 0 && l.judge.period == period:
		// Sent within the current period: a put sent before a
		// reconnection the view noticed while it was in flight may
		// precede a restart, and is not the period's first beat.
		l.judge.first = rev
	}
	l.judge.revision, l.judge.at = rev, r.clk.Now()
	return nil
}

func (r *Runner) heartbeatLoop(ctx context.Context) {
	t := r.clk.NewTicker(r.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := r.heartbeat(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// lastBeat reads the last message of runner id's liveness key: nil when
// the key has none (never written, or expired longer ago than the bucket
// keeps markers).
func (r *Runner) lastBeat(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	if r.liveStream == nil {
		return nil, errors.New("no stream of the runners bucket")
	}
	m, err := r.liveStream.GetLastMsgForSubject(ctx, "$KV."+RunnersBucket+"."+id)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	return m, err
}

// released reports whether m, the last message of a liveness key, is the
// delete marker of a runner that deleted its key (a drained runner does,
// once it has handed its runs off). Such a runner is gone at once.
func released(m *jetstream.RawStreamMsg) bool {
	return m != nil && m.Header.Get("KV-Operation") == "DEL"
}

// expiredAt reports whether m, the last message of a liveness key, is the
// marker the server wrote when the key reached its max age (its runner
// stopped beating), and when the server wrote it (the server's clock).
func expiredAt(m *jetstream.RawStreamMsg) (time.Time, bool) {
	if m == nil || m.Header.Get(jetstream.MarkerReasonHeader) != "MaxAge" {
		return time.Time{}, false
	}
	return m.Time, true
}

// runnersMarkerTTL is how long weft_runners keeps the marker of a key that
// reached its max age (its LimitMarkerTTL): far longer than a reconnect
// wait, so that a key absent without a marker expired long enough ago for
// a peer disconnected by a server restart to have come back (judgement).
func runnersMarkerTTL(lease time.Duration) time.Duration { return max(60*lease, time.Minute) }

// judgeGrace is how long this runner's view of the runners bucket must
// have been continuous after a reconnection before an absent key means a
// gone runner (partition.JudgeGrace): the lease (every live runner puts
// its key every lease/4), the heartbeat interval, and reconnectGrace.
func (r *Runner) judgeGrace() time.Duration {
	return partition.JudgeGrace(r.lease, r.reconnectGrace())
}

// reconnectGrace is the part of judgeGrace that covers a peer's
// reconnection after a server restart: the connection's reconnect wait
// and jitter (a peer reconnected beats within lease/4 more).
func (r *Runner) reconnectGrace() time.Duration {
	return r.nc.Opts.ReconnectWait + r.nc.Opts.ReconnectJitter
}

// viewPeriod reports the period of continuous view this runner judges by
// (see judgement): since when it began, its number, whether it began at
// this runner's start (fresh), and whether the view is cut (cut): the
// connection is down, or reconnected since rc, a reconnect count read
// earlier. A new period begins when this runner notices a reconnection.
func (r *Runner) viewPeriod(rc uint64) (since time.Time, period uint64, fresh, cut bool) {
	l := &r.peers
	l.mu.Lock()
	defer l.mu.Unlock()
	now, connected := r.nc.Stats().Reconnects, r.nc.IsConnected()
	if now != l.judge.reconnects || !connected {
		l.judge.newPeriod(r.clk.Now())
		l.judge.reconnects, l.judge.reconnected = now, true
	}
	return l.judge.since, l.judge.period, !l.judge.reconnected, now != rc || !connected
}

// judgeLevel fills in f the period of continuous view (viewPeriod, the
// reconnect count rc read at f.Now) and reports its number and whether,
// at f.Now, this runner can tell that a peer whose liveness key is absent
// is gone (Facts.Level): full once the whole grace passed; before that,
// once it has watched for a lease and a heartbeat interval, only some
// absent keys are judged (partial, alive).
func (r *Runner) judgeLevel(f *partition.Facts, rc uint64) (period uint64, full, partial bool) {
	f.Since, period, f.Fresh, f.Cut = r.viewPeriod(rc)
	full, partial = f.Level()
	return period, full, partial
}

// alive reports whether runner id may hold a live heartbeat: false only
// when its key is absent and this runner can tell (partition.Judge on
// what it reads: the key's last message, its own key, its view's
// period). "Cannot tell" — a read error, a missing bucket, a view
// too recent — is never "gone". Before the whole grace passed, an absent
// key is judged when its marker follows a put seen above this runner's
// first beat of the view (beatInView, at any time), or when the server's marker says it expired a lease and two
// heartbeat intervals after this runner's view began (a server restart
// in between would have reconnected this runner too), or a reconnect
// wait ago (since the view began, or at a runner's start). An absent key
// without a marker (never written, or expired long enough ago that the
// server dropped its marker: judged alike) waits for the whole grace.
func (r *Runner) alive(ctx context.Context, id string) bool {
	if id == r.id {
		r.mu.Lock()
		defer r.mu.Unlock()
		return !r.draining
	}
	if r.seenGone(id) {
		return false
	}
	// Everything is judged as of one instant, taken before the peer's
	// key is read, with the connection's reconnect count: a read that
	// stalls past the grace, or a reconnection while the reads are made,
	// never turns an early look into a late judgement (docs/semantics.md
	// §8).
	f := partition.Facts{Now: r.clk.Now(), Lease: r.lease, ReconnectGrace: r.reconnectGrace(), Last: partition.LastUnread}
	rc := r.nc.Stats().Reconnects
	_, err := r.live.Get(ctx, id)
	if err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	last, lerr := r.lastBeat(ctx, id)
	if lerr == nil {
		f.Last = partition.LastNone
		if released(last) {
			f.Last = partition.LastDeleted
		} else if at, ok := expiredAt(last); ok {
			f.Last, f.ExpiredAt = partition.LastExpired, at
		}
	}
	if f.Last != partition.LastDeleted {
		period, full, partial := r.judgeLevel(&f, rc)
		f.BeatInView = f.Last == partition.LastExpired && r.beatInView(id, last)
		// Its own key is read only when the judgement can use it.
		if !f.Cut && (full || partial || f.BeatInView) {
			if own, err := r.live.Get(ctx, r.id); err == nil {
				r.peers.mu.Lock()
				beat, answered := r.peers.judge.revision, r.peers.judge.at
				r.peers.mu.Unlock()
				f.OwnKey, f.OwnCurrent, f.OwnPut, f.Answered = true, own.Revision() == beat, own.Created(), answered
			}
			// A reconnection or a failed heartbeat while the reads were
			// made (a new period): cannot tell.
			if _, now, _, cut := r.viewPeriod(rc); cut || now != period {
				f.Cut = true
			}
		}
	}
	gone, why := partition.Judge(f)
	if gone {
		r.log.Info("runner judged gone", "peer", id, "why", why)
		r.markGone(id)
	}
	return !gone
}

// beatInView reports whether runner id's liveness key, whose last message
// is last, expired (the server's marker) after a put of it that the runners
// view saw at a revision above this runner's first beat of its current
// period of continuous view (judgement): the bucket's order, not a clock.
func (r *Runner) beatInView(id string, last *jetstream.RawStreamMsg) bool {
	if _, expired := expiredAt(last); !expired {
		return false
	}
	rev, ok := r.runners.leftAt(id)
	r.peers.mu.Lock()
	first := r.peers.judge.first
	r.peers.mu.Unlock()
	return ok && first != 0 && rev > first
}

// seenGone reports whether alive found runner id gone within the last
// heartbeat interval (lease/4): the takeover of a gone runner's many runs
// judges it once per interval, not once per run.
func (r *Runner) seenGone(id string) bool {
	l := &r.peers
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.gone[id]
	if ok && r.clk.Since(at) < r.lease/4 {
		return true
	}
	if ok {
		delete(l.gone, id)
	}
	return false
}

func (r *Runner) markGone(id string) {
	l := &r.peers
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone == nil {
		l.gone = map[string]time.Time{}
	}
	l.gone[id] = r.clk.Now()
}

// driverKey is a run's weft_drivers entry: the driver and the revision.
type driverKey struct {
	driver   string
	revision uint64
}

// takeoverConcurrency bounds the takeovers a runner makes at once: taking
// over many idle runs (a gone runner's thousands) costs bounded memory and
// goroutines, and the store is not flooded (docs/adr/0014).
const takeoverConcurrency = 32

// takeOrphans wakes the orphans todo (each marked in r.takeover), at most
// takeoverConcurrency at once, and returns when all are done with the
// number of wakes that failed (or were not made: ctx ended).
func (r *Runner) takeOrphans(ctx context.Context, todo []string, drivers map[string]driverKey) int {
	if len(todo) == 0 {
		return 0
	}
	work := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range min(takeoverConcurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run := range work {
				if err := r.wakeOrphan(ctx, run, drivers[run]); err != nil && !r.noteQuarantine(err) {
					failed.Add(1)
					if ctx.Err() == nil {
						r.noteOrphanFailing(run, drivers[run], err)
					}
				} else {
					r.orphanFail.Delete(run)
				}
				r.takeover.Delete(run)
			}
		}()
	}
	for i, run := range todo {
		select {
		case work <- run:
		case <-ctx.Done():
			for _, left := range todo[i:] {
				r.takeover.Delete(left)
			}
			close(work)
			wg.Wait()
			return int(failed.Load()) + len(todo) - i
		}
	}
	close(work)
	wg.Wait()
	return int(failed.Load())
}

// orphanWarnAfter is how long the wake of a run's driver entry may keep
// failing before noteOrphanFailing says so at Warn: a run with work in
// flight that the owner of its partition cannot take over is a run that
// stalls (docs/semantics.md §8: pending work is retried, never dropped),
// and a stall an operator must be able to see in the logs.
func (r *Runner) orphanWarnAfter() time.Duration { return max(10*r.lease, 10*time.Second) }

// unknownRunGrace is how long the scans find the run of a driver entry
// absent from the log before the entry is removed (wakeOrphan): two
// leases, many scans of the partition (every lease/4).
func (r *Runner) unknownRunGrace() time.Duration { return 2 * r.lease }

// unknownSince is when the scans first found no event of a run for its
// driver entry at revision rev (wakeOrphan).
type unknownSince struct {
	rev uint64
	at  time.Time
}

// noteOrphanFailing logs the failed wake of run's driver entry k: at Debug,
// and at Warn once it has kept failing for orphanWarnAfter (then again
// each orphanWarnAfter), naming the entry's driver and the last error.
func (r *Runner) noteOrphanFailing(run string, k driverKey, err error) {
	now := r.clk.Now()
	v, _ := r.orphanFail.LoadOrStore(run, now)
	since := v.(time.Time)
	if now.Sub(since) < r.orphanWarnAfter() {
		r.log.Debug("takeover failed", "run", run, "err", err)
		return
	}
	r.orphanFail.Store(run, now)
	r.log.Warn("the takeover of a run with work in flight keeps failing", "run", run, "driver", k.driver, "failing_for", now.Sub(since).Round(time.Second), "err", err)
}

// wakeOrphan wakes run, whose weft_drivers entry k is in a partition this
// runner owns and names another runner (or this one without holding the
// run), and repairs the entry from the log: deleted when the run does not
// exist or ends up not held (idle, or finished: it needs no entry), left
// to the owner when the partition moved on meanwhile.
func (r *Runner) wakeOrphan(ctx context.Context, run string, k driverKey) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r.mu.Lock()
	_, held := r.runs[run]
	r.mu.Unlock()
	if held {
		return nil // held since the scan listed it: driven here (scanPartitions)
	}
	rn, err := r.acquire(ctx, run)
	if err != nil {
		var fe *forwardError
		switch {
		case errors.As(err, &fe):
			// The partition moved on since the scan listed it: the run is
			// its owner's, whose claim made the partition due there. An
			// owner that is gone is judged by the partition loop, which
			// claims the partition back (due here again); nothing this
			// scan could do for it.
			return nil
		case weft.ErrorCode(err) == weft.CodeUnknownRun:
			// A start's intent whose append never landed — or landed and
			// was not seen yet (a read answered by a replica behind, the
			// append of a runner killed right after it): removed only once
			// the run has been unknown to the scans for unknownRunGrace,
			// never at the first look (a removed entry leaves the run to a
			// command; docs/semantics.md §8: a run can always be answered).
			// Measured from the first look that found no event for this
			// entry (its revision), not from any earlier failed wake.
			now := r.clk.Now()
			v, _ := r.unknownAt.LoadOrStore(run, unknownSince{rev: k.revision, at: now})
			if u := v.(unknownSince); u.rev != k.revision {
				r.unknownAt.Store(run, unknownSince{rev: k.revision, at: now})
			} else if now.Sub(u.at) >= r.unknownRunGrace() {
				_ = r.removeDriverKey(ctx, run, k.revision)
				r.unknownAt.Delete(run)
				return nil
			}
			return fmt.Errorf("run %s: its log shows no event (yet) for its driver entry: %w", run, err)
		}
		return err
	}
	r.unknownAt.Delete(run) // found
	err = r.wakeLocked(ctx, rn, true)
	// A takeover still to record (its append failed) leaves the run held
	// and not driven on: the wake failed, and its retry (finishTakeover:
	// retryLater) tries it again, not a command.
	pending := rn.driven && rn.takeover != nil
	rn.unlock()
	r.mu.Lock()
	_, held = r.runs[run]
	r.mu.Unlock()
	if err == nil && held && pending {
		err = fmt.Errorf("run %s: its takeover is not recorded yet", run)
	}
	if !held && err == nil {
		// Idle (evicted or not taken over) or finished: an entry left
		// unchanged since it was read is stale.
		_ = r.removeDriverKey(ctx, run, k.revision)
	}
	return err
}
