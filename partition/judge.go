package partition

import "time"

// The judgement of a peer whose liveness key in weft_runners is absent
// (docs/semantics.md §8: only a runner that is gone is recovered from;
// "cannot tell" is never gone). The runner reads the facts (the key's
// last message, its own key, its view's period) and Judge decides, on
// the time passed in. runner/internal/ownership/liveness.go explains each rule.

// Last is what the last message of an absent liveness key says.
type Last int

const (
	// LastUnread means the last message could not be read.
	LastUnread Last = iota
	// LastNone means no message, or none that says why the key is absent
	// (never written, or expired longer ago than the server keeps its
	// marker).
	LastNone
	// LastDeleted means the runner deleted its key (a drained runner does,
	// once its runs are handed off).
	LastDeleted
	// LastExpired means the server's marker of a key that reached its max age
	// (its runner stopped beating), stamped with the server's time.
	LastExpired
)

// Facts are what a runner read to judge a peer whose key is absent.
type Facts struct {
	// Last is the key's last message; ExpiredAt the server's time of
	// its marker when Last is LastExpired.
	Last      Last
	ExpiredAt time.Time
	// BeatInView: the view saw a put of the key at a revision above this
	// runner's first beat of its current period of continuous view (the
	// bucket's order, no clock).
	BeatInView bool
	// OwnKey: this runner's own key is present (otherwise the bucket is
	// not one to judge by). OwnCurrent: its revision is that of the last
	// beat this runner saw answered, at Answered (this runner's clock);
	// OwnPut is the server's time of that put.
	OwnKey     bool
	OwnCurrent bool
	OwnPut     time.Time
	Answered   time.Time
	// Since is when this runner's current period of continuous view
	// began (this runner's clock), Fresh whether it began at its start
	// (not at a reconnection or failed heartbeat); Cut that the view was
	// found cut (a reconnection before or while the facts were read):
	// nothing is judged but a deleted key.
	Since time.Time
	Fresh bool
	Cut   bool
	// Now is this runner's clock when it began to read the facts (before
	// the peer's key): everything is judged as of that one instant.
	Now time.Time
	// Lease is the liveness lease (every live runner beats every
	// lease/4); ReconnectGrace the connection's reconnect wait and
	// jitter.
	Lease          time.Duration
	ReconnectGrace time.Duration
}

// Why a peer is judged gone (Judge's reason, logged by the runner).
const (
	// WhyReleased is a peer that deleted its key.
	WhyReleased = "released"
	// WhyBeatInView is a key that expired after a put the view saw within
	// its current period.
	WhyBeatInView = "liveness key expired after a beat within this runner's view"
	// WhyExpiredWatched is a key that expired well after the view began.
	WhyExpiredWatched = "liveness key expired while this runner watched"
	// WhyExpiredAgo is a key that expired a reconnect wait ago.
	WhyExpiredAgo = "liveness key expired a reconnect wait ago"
	// WhyAbsent is a key absent once the whole grace passed.
	WhyAbsent = "liveness key absent"
)

// JudgeGrace is how long a runner's view must have been continuous before
// any absent key means a gone runner: a lease, a heartbeat interval and
// the reconnect grace.
func JudgeGrace(lease, reconnectGrace time.Duration) time.Duration {
	return lease + lease/4 + reconnectGrace
}

// Level reports whether a runner whose view has been continuous since
// since can judge, at now, every absent key (full: the whole grace
// passed) or, once it watched for a lease and a heartbeat interval, only
// some (partial).
func Level(since, now time.Time, lease, reconnectGrace time.Duration) (full, partial bool) {
	watched := now.Sub(since)
	if watched >= JudgeGrace(lease, reconnectGrace) {
		return true, false
	}
	return false, watched >= lease+lease/4
}

// Level is Level of f's period at f.Now (none when the view is cut): the
// runner reads its own key only when it may be used (full, partial), and
// Judge judges at the same level.
func (f Facts) Level() (full, partial bool) {
	if f.Cut {
		return false, false
	}
	return Level(f.Since, f.Now, f.Lease, f.ReconnectGrace)
}

// Judge reports whether the peer whose key is absent, as f says, is gone,
// and why. It is false ("cannot tell") unless one of these holds:
// its runner deleted its key; with the view not cut, its key expired after a put the view saw
// within its current period (at any time, with this runner's own key
// present); or, with this runner's key present and current, the whole
// grace passed (full), or it watched a lease and a heartbeat interval
// (partial) and the marker says the key expired a lease and two heartbeat
// intervals after the view began, or a reconnect grace and a heartbeat
// interval ago (since the view began, or at a fresh start).
func Judge(f Facts) (gone bool, why string) {
	if f.Last == LastDeleted {
		return true, WhyReleased
	}
	if f.Cut {
		return false, ""
	}
	full, partial := f.Level()
	if !full && f.Last == LastExpired && f.BeatInView && f.OwnKey {
		return true, WhyBeatInView
	}
	if !full && !partial || !f.OwnKey {
		return false, ""
	}
	if full {
		return true, WhyAbsent
	}
	if f.Last != LastExpired || !f.OwnCurrent {
		// No marker to read (never written, or expired before the
		// server dropped it: judged at the whole grace), or a beat being
		// answered (judged at the next look).
		return false, ""
	}
	// When the key expired by this runner's clock: the server's time
	// between the expiry and this runner's last beat, back from when that
	// beat was answered here.
	exp := f.Answered.Add(-f.OwnPut.Sub(f.ExpiredAt))
	switch {
	case !exp.Add(-(f.Lease + f.Lease/2)).Before(f.Since):
		return true, WhyExpiredWatched
	case (f.Fresh || !exp.Before(f.Since)) && f.Now.Sub(exp) >= f.ReconnectGrace+f.Lease/4:
		return true, WhyExpiredAgo
	}
	return false, ""
}
