package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
// MarkerTTL) stamped with when the server expired it. A key that
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

// Heartbeat puts this runner's key in weft_runners (its beat) and
// notes the put's revision for the judgement; a failed put, or a revision
// not above the last one (the bucket was re-created), begins a new period
// of continuous view.
func (p *Peers) Heartbeat(ctx context.Context) error {
	b, _ := json.Marshal(beat{Schema: 1, At: p.cfg.Stamp().UTC().Format(time.RFC3339Nano), Partitions: p.cfg.Partitions, Draining: p.loop.Draining()})
	l := &p.judged
	l.mu.Lock()
	period := l.judge.period
	l.mu.Unlock()
	rev, err := p.cfg.Live.Put(ctx, p.cfg.ID, b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.judge.newPeriod(p.cfg.Clock.Now()) // peers cannot beat either, perhaps
		l.judge.reconnected = true
		return fmt.Errorf("runner: heartbeat: %w", err)
	}
	switch {
	case rev <= l.judge.revision:
		l.judge.newPeriod(p.cfg.Clock.Now()) // the bucket was re-created
	case l.judge.first == 0 && l.judge.period == period:
		// Sent within the current period: a put sent before a
		// reconnection the view noticed while it was in flight may
		// precede a restart, and is not the period's first beat.
		l.judge.first = rev
	}
	l.judge.revision, l.judge.at = rev, p.cfg.Clock.Now()
	return nil
}

// HeartbeatLoop beats every lease/4 until ctx ends.
func (p *Peers) HeartbeatLoop(ctx context.Context) {
	t := p.cfg.Clock.NewTicker(p.cfg.Lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if err := p.Heartbeat(ctx); err != nil && ctx.Err() == nil {
				p.cfg.Log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// lastBeat reads the last message of runner id's liveness key: nil when
// the key has none (never written, or expired longer ago than the bucket
// keeps markers).
func (p *Peers) lastBeat(ctx context.Context, id string) (*jetstream.RawStreamMsg, error) {
	if p.cfg.LiveStream == nil {
		return nil, errors.New("no stream of the runners bucket")
	}
	m, err := p.cfg.LiveStream.GetLastMsgForSubject(ctx, "$KV."+p.cfg.Bucket+"."+id)
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

// MarkerTTL is how long weft_runners keeps the marker of a key that
// reached its max age (its LimitMarkerTTL): far longer than a reconnect
// wait, so that a key absent without a marker expired long enough ago for
// a peer disconnected by a server restart to have come back (judgement).
func MarkerTTL(lease time.Duration) time.Duration { return max(60*lease, time.Minute) }

// judgeGrace is how long this runner's view of the runners bucket must
// have been continuous after a reconnection before an absent key means a
// gone runner (partition.JudgeGrace): the lease (every live runner puts
// its key every lease/4), the heartbeat interval, and reconnectGrace.
func (p *Peers) judgeGrace() time.Duration {
	return partition.JudgeGrace(p.cfg.Lease, p.reconnectGrace())
}

// reconnectGrace is the part of judgeGrace that covers a peer's
// reconnection after a server restart: the connection's reconnect wait
// and jitter (a peer reconnected beats within lease/4 more).
func (p *Peers) reconnectGrace() time.Duration {
	return p.cfg.Conn.Opts.ReconnectWait + p.cfg.Conn.Opts.ReconnectJitter
}

// viewPeriod reports the period of continuous view this runner judges by
// (see judgement): since when it began, its number, whether it began at
// this runner's start (fresh), and whether the view is cut (cut): the
// connection is down, or reconnected since rc, a reconnect count read
// earlier. A new period begins when this runner notices a reconnection.
func (p *Peers) viewPeriod(rc uint64) (since time.Time, period uint64, fresh, cut bool) {
	l := &p.judged
	l.mu.Lock()
	defer l.mu.Unlock()
	now, connected := p.cfg.Conn.Stats().Reconnects, p.cfg.Conn.IsConnected()
	if now != l.judge.reconnects || !connected {
		l.judge.newPeriod(p.cfg.Clock.Now())
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
func (p *Peers) judgeLevel(f *partition.Facts, rc uint64) (period uint64, full, partial bool) {
	f.Since, period, f.Fresh, f.Cut = p.viewPeriod(rc)
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
func (p *Peers) alive(ctx context.Context, id string) bool {
	alive, _ := p.look(ctx, id)
	return alive
}

// look is alive, and says what the judgement saw (logged when a
// partition's owner whose key left the view stays undecided: stale).
func (p *Peers) look(ctx context.Context, id string) (alive bool, saw string) {
	if id == p.cfg.ID {
		return !p.loop.Draining(), "this runner"
	}
	if p.seenGone(id) {
		return false, "judged gone lately"
	}
	// Everything is judged as of one instant, taken before the peer's
	// key is read, with the connection's reconnect count: a read that
	// stalls past the grace, or a reconnection while the reads are made,
	// never turns an early look into a late judgement (docs/semantics.md
	// §8).
	f := partition.Facts{Now: p.cfg.Clock.Now(), Lease: p.cfg.Lease, ReconnectGrace: p.reconnectGrace(), Last: partition.LastUnread}
	rc := p.cfg.Conn.Stats().Reconnects
	_, err := p.cfg.Live.Get(ctx, id)
	if err == nil {
		return true, "its liveness key is present"
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return true, fmt.Sprintf("its liveness key cannot be read: %v", err)
	}
	last, lerr := p.lastBeat(ctx, id)
	var ownErr error
	ownRead := false
	if lerr == nil {
		f.Last = partition.LastNone
		if released(last) {
			f.Last = partition.LastDeleted
		} else if at, ok := expiredAt(last); ok {
			f.Last, f.ExpiredAt = partition.LastExpired, at
		}
	}
	if f.Last != partition.LastDeleted {
		period, full, partial := p.judgeLevel(&f, rc)
		f.BeatInView = f.Last == partition.LastExpired && p.beatInView(id, last)
		// Its own key is read only when the judgement can use it.
		if !f.Cut && (full || partial || f.BeatInView) {
			ownRead = true
			if own, err := p.cfg.Live.Get(ctx, p.cfg.ID); err == nil {
				p.judged.mu.Lock()
				beat, answered := p.judged.judge.revision, p.judged.judge.at
				p.judged.mu.Unlock()
				f.OwnKey, f.OwnCurrent, f.OwnPut, f.Answered = true, own.Revision() == beat, own.Created(), answered
			} else {
				ownErr = err
			}
			// A reconnection or a failed heartbeat while the reads were
			// made (a new period): cannot tell.
			if _, now, _, cut := p.viewPeriod(rc); cut || now != period {
				f.Cut = true
			}
		}
	}
	gone, why := partition.Judge(f)
	if gone {
		p.cfg.Log.Info("runner judged gone", "peer", id, "why", why)
		p.markGone(id)
		return false, why
	}
	return true, describe(f, lerr, ownRead, ownErr)
}

// describe says what a judgement that could not tell saw (facts f, the
// error reading the key's last message, the error reading this runner's
// own key, when it was read).
func describe(f partition.Facts, lastErr error, ownRead bool, ownErr error) string {
	last := map[partition.Last]string{partition.LastUnread: "unread", partition.LastNone: "none",
		partition.LastDeleted: "deleted", partition.LastExpired: "expired marker"}[f.Last]
	if lastErr != nil {
		last += fmt.Sprintf(" (%v)", lastErr)
	}
	if f.Last == partition.LastExpired {
		last += " at " + f.ExpiredAt.UTC().Format(time.RFC3339Nano)
	}
	full, partial := f.Level()
	s := fmt.Sprintf("liveness key absent; last message: %s; view continuous for %s (fresh %t, cut %t, full %t, partial %t); beat in view %t",
		last, f.Now.Sub(f.Since).Round(time.Millisecond), f.Fresh, f.Cut, full, partial, f.BeatInView)
	switch {
	case !ownRead:
		s += "; own key not read"
	case ownErr != nil:
		s += fmt.Sprintf("; own key unreadable (%v)", ownErr)
	default:
		s += fmt.Sprintf("; own key present %t, current %t", f.OwnKey, f.OwnCurrent)
	}
	return s
}

// beatInView reports whether runner id's liveness key, whose last message
// is last, expired (the server's marker) after a put of it that the runners
// view saw at a revision above this runner's first beat of its current
// period of continuous view (judgement): the bucket's order, not a clock.
func (p *Peers) beatInView(id string, last *jetstream.RawStreamMsg) bool {
	if _, expired := expiredAt(last); !expired {
		return false
	}
	rev, ok := p.runners.leftAt(id)
	p.judged.mu.Lock()
	first := p.judged.judge.first
	p.judged.mu.Unlock()
	return ok && first != 0 && rev > first
}

// seenGone reports whether alive found runner id gone within the last
// heartbeat interval (lease/4): the takeover of a gone runner's many runs
// judges it once per interval, not once per run.
func (p *Peers) seenGone(id string) bool {
	l := &p.judged
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.gone[id]
	if ok && p.cfg.Clock.Since(at) < p.cfg.Lease/4 {
		return true
	}
	if ok {
		delete(l.gone, id)
	}
	return false
}

func (p *Peers) markGone(id string) {
	l := &p.judged
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone == nil {
		l.gone = map[string]time.Time{}
	}
	l.gone[id] = p.cfg.Clock.Now()
}

// NonParticipant reports whether runner id, the recorded driver of a run
// with work in flight, may be a live runner that takes no part in the
// partitions (an older release: its heartbeat names no number of
// partitions, or another one), which drives its runs whoever owns their
// partition: its runs are not taken over while it lives (docs/semantics.md §8).
// A runner whose heartbeat names this deployment's partitions is a
// participant: when this runner owns the partition, that runner released
// it or lost it (and forgot its runs). A runner whose key is absent is
// judged as always (alive: "cannot tell" is alive).
func (p *Peers) NonParticipant(ctx context.Context, id string) bool {
	if id == "" || id == p.cfg.ID {
		return false
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	e, err := p.cfg.Live.Get(gctx, id)
	switch {
	case err == nil:
		var b beat
		return json.Unmarshal(e.Value(), &b) != nil || b.Partitions != p.cfg.Partitions
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return p.alive(gctx, id)
	}
	return true // cannot tell
}
