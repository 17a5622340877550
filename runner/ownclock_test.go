package runner_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner"
)

// ownClock is the ownership clock of a test's runner
// (runner.WithOwnershipClock): a clock.Fake the test moves by hand, a
// heartbeat interval (lease/4) at a time, instead of sleeping until a
// lease or a judgement's grace passes. A step fires the runner's tickers
// on that clock — its heartbeat, its partition loop's round and the scan
// after it, its runners view's check — and waits for that round, for a
// scan that ended after it and for the view to see the runner's own key
// again (the "partition-pass", "partition-scanned" and "runners-view"
// hooks). follow makes the clock follow the wall clock instead, while the
// test waits on the runner's work; a step stops following first (the two
// would both move the clock). Several runners share one clock (another:
// a joining runner, a release between two): a step moves it once and
// waits for each runner's round, scan and beat.
//
// What a fake clock cannot move is the server's: the runners bucket's
// max age (a liveness key lapses a lease of the server's time after its
// last put) and the times of the server's messages. A runner on an
// ownClock beats only when the clock moves — a step leaves it still for
// at most half a lease of the wall clock (still) — so a test that waits on
// something else for longer than a lease lets the clock follow the wall
// clock meanwhile (follow): its own key would lapse otherwise. The
// clock follows until the runner has stopped (newOwnClock), so that the
// runner beats through its drain, as in production.
type ownClock struct {
	*clock.Fake
	t      *testing.T // the test's: a step that gives up says why (t.Logf)
	id     string     // the runner's (runner.WithID): its beats, told from others' in the view
	lease  time.Duration
	noScan bool                                  // the runner makes no scan (runner.WithoutScan): a step waits for no scan
	also   func(event string, p int, run string) // the test's own hook

	mu        sync.Mutex
	nrounds   int64         // rounds of rebalancing made ("partition-pass")
	scans     int64         // scans beside them ended ("partition-scanned")
	beats     int64         // the runner's own key seen by its runners view ("runners-view")
	lastRound time.Time     // the clock's time at the last round
	progress  chan struct{} // closed (and replaced) at each of those

	fmu      sync.Mutex
	stopping chan struct{} // closed to stop following; nil: not following
	followed sync.WaitGroup
	movedAt  atomic.Int64 // the wall clock's time (UnixNano) at the clock's last move (move), or at its making

	// Several runners on one clock (another): the first ownClock, origin
	// nil, moves the clock and follows; a step waits for the round, the
	// scan and the beat of every runner of the clock not yet gone.
	origin *ownClock   // the clock's first ownClock; nil: this is it
	gmu    sync.Mutex  // guards others and each one's left
	others []*ownClock // the other runners' (origin only)
	left   bool        // the runner stopped: steps no longer wait for it
}

// ownClockIDs numbers the runners of the ownClocks.
var ownClockIDs atomic.Int64

// newOwnClock returns the ownership clock of a runner with the harness's
// lease (startRunnerConn: 2 s), reading the wall clock's time at first.
// Call it before the runner starts: its cleanup, which stops following,
// then runs after the runner's stop.
func newOwnClock(t *testing.T) *ownClock {
	c := &ownClock{Fake: clock.NewFake(time.Now()), t: t, id: fmt.Sprint("own-", ownClockIDs.Add(1)), lease: 2 * time.Second, progress: make(chan struct{})}
	c.movedAt.Store(time.Now().UnixNano())
	t.Cleanup(c.halt)
	return c
}

// still is the longest a step leaves the clock where it is, of the wall
// clock: half a lease. A runner on the clock beats (puts its liveness
// key) only when the clock moves, and the runners bucket's max age is a
// lease of the server's time, which no fake clock moves: a clock left
// still for longer than a lease lapses every live runner's key, and a
// peer then judges a live runner gone (docs/semantics.md §8, "only a
// runner that is gone is recovered from") — a failure the harness would
// make, not the runner. Half a lease leaves the other half for the beat
// to land; a step takes well under it (0.7 s at most, measured with
// several runner test packages running beside). A step that waited
// this long gives up (false) rather than move the clock itself: a step
// is one heartbeat interval of ownership's time, no more, so that a
// check made at the step just before a lease or a grace ends ("not
// before") is made there, and a round missed is made at the next step.
func (c *ownClock) still() time.Duration { return c.lease / 2 }

// move moves the clock a heartbeat interval (lease/4) forward, noting
// the wall clock's time of it (still).
func (c *ownClock) move() {
	c.Advance(c.lease / 4)
	c.movedAt.Store(time.Now().UnixNano())
}

// options are the runner's options for c — its id and clock — with hook
// (nil: none) called on every event besides c's.
func (c *ownClock) options(hook func(event string, p int, run string)) []runner.Option {
	c.also = hook
	if o := c.origin; o != nil {
		o.gmu.Lock()
		o.others = append(o.others, c)
		o.gmu.Unlock()
	}
	return []runner.Option{runner.WithID(c.id), runner.WithOwnershipClock(c.Fake), runner.WithHook(func(event string, p int, run string) {
		if event == "partition-pass" || event == "partition-scanned" || (event == "runners-view" && run == c.id) {
			c.mu.Lock()
			switch event {
			case "partition-pass":
				c.nrounds++
				c.lastRound = c.Now()
			case "partition-scanned":
				c.scans++
			default:
				c.beats++
			}
			close(c.progress)
			c.progress = make(chan struct{})
			c.mu.Unlock()
		}
		if c.also != nil {
			c.also(event, p, run)
		}
	})}
}

// counts returns the rounds, scans and beats seen so far, and a channel
// closed at the next of any.
func (c *ownClock) counts() (rounds, scans, beats int64, more <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nrounds, c.scans, c.beats, c.progress
}

// lastRoundAt returns the clock's time at the last round of rebalancing
// (zero: none yet).
func (c *ownClock) lastRoundAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastRound
}

// step stops following, moves the clock a heartbeat interval (lease/4)
// forward and waits for the partition loop's round it fired, for a scan
// beside the loop that ended after it (a scan still running from a step
// before makes the round skip its own: the next step makes it) and for
// the runners view to see the runner's own key again: the view's "silent
// for a lease" check reads this clock, and a clock stepped ahead of the
// beats the view was delivered would make it watch again, unable to tell
// meanwhile. It reports whether all three came; a round that does not
// come (the loop's ticker not armed yet, a tick taken while the loop was
// busy) is left to the next step. The clock stands still for at most
// still of the wall clock, counted from its last move: the wait until the
// runners' partition loops are armed (armed) and the wait after the move
// each give up then, saying which runner's round, scan or beat never
// came (t.Logf).
//
// With several runners on the clock (another), a step of any of their
// ownClocks moves the one clock once and waits for all three of every
// runner not gone (leave), and reports whether all came.
func (c *ownClock) step() bool {
	if c.origin != nil {
		return c.origin.step()
	}
	c.halt()
	members := c.members()
	armedBy := time.Unix(0, c.movedAt.Load()).Add(c.still())
	for _, m := range members {
		m.armed(armedBy)
	}
	type from struct{ rounds, scans, beats int64 }
	was := make([]from, len(members))
	for i, m := range members {
		was[i].rounds, was[i].scans, was[i].beats, _ = m.counts()
	}
	c.move()
	deadline := time.NewTimer(c.still())
	defer deadline.Stop()
	for i, m := range members {
		for {
			r, s, b, more := m.counts()
			if r > was[i].rounds && (m.noScan || s > was[i].scans) && b > was[i].beats {
				break
			}
			select {
			case <-more:
			case <-deadline.C:
				var missing []string
				for j, m := range members {
					r, s, b, _ := m.counts()
					var not []string
					if r == was[j].rounds {
						not = append(not, "round")
					}
					if !m.noScan && s == was[j].scans {
						not = append(not, "scan")
					}
					if b == was[j].beats {
						not = append(not, "beat")
					}
					if len(not) > 0 {
						missing = append(missing, fmt.Sprintf("runner %s's %s", m.id, strings.Join(not, ", ")))
					}
				}
				c.t.Logf("a step of the ownership clock gave up after %s of the wall clock (still) without %s: left to the next step",
					c.still(), strings.Join(missing, "; "))
				return false
			}
		}
	}
	return true
}

// armed waits, until by of the wall clock, until c's runner has made the
// scan its partition loop makes as it starts, after it armed its ticker:
// a runner serves (the harness's startRunner returns) before its
// partition loop starts, and a ticker armed after a step's move fires at
// the step after, the step between waiting its bound for nothing. It
// says so (t.Logf) when by comes first: the step then moves the clock
// anyway (still), and the runner's first round is the next step's. A
// runner without scans (withoutScan) gives no such sign: not waited for.
func (c *ownClock) armed(by time.Time) {
	if c.noScan {
		return
	}
	deadline := time.NewTimer(time.Until(by))
	defer deadline.Stop()
	for {
		_, s, _, more := c.counts()
		if s > 0 {
			return
		}
		select {
		case <-more:
		case <-deadline.C:
			c.t.Logf("runner %s made no first scan (its partition loop armed) before the ownership clock had stood still for %s of the wall clock (still): it moves on without it", c.id, c.still())
			return
		}
	}
}

// another returns the ownership clock of another runner on c's one
// clock: its own id, hook and counts, the clock (and its following)
// c's. The clock's steps wait for that runner from its options on (the
// runner about to start).
func (c *ownClock) another() *ownClock {
	o := c
	if c.origin != nil {
		o = c.origin
	}
	return &ownClock{Fake: o.Fake, t: o.t, id: fmt.Sprint("own-", ownClockIDs.Add(1)), lease: o.lease, progress: make(chan struct{}), origin: o}
}

// leave says c's runner has stopped (or is stopping, its rounds ended):
// the clock's steps no longer wait for it.
func (c *ownClock) leave() {
	o := c
	if c.origin != nil {
		o = c.origin
	}
	o.gmu.Lock()
	c.left = true
	o.gmu.Unlock()
}

// members lists the ownClocks of the runners on c's clock (c the
// origin) that have not left.
func (c *ownClock) members() []*ownClock {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	var ms []*ownClock
	for _, m := range append([]*ownClock{c}, c.others...) {
		if !m.left {
			ms = append(ms, m)
		}
	}
	return ms
}

// advanceUntil steps the clock until cond holds, at most steps times
// (ownership's time: steps heartbeat intervals) and within 30 s of the
// wall clock; it fails the test naming what never happened.
func (c *ownClock) advanceUntil(t *testing.T, what string, steps int, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !cond(); i++ {
		if i == steps || time.Now().After(deadline) {
			t.Fatalf("never, in %d heartbeat intervals of the ownership clock (%s): %s", i, time.Duration(i)*c.lease/4, what)
		}
		c.step()
	}
}

// scansEnd steps the clock until k more scans than now have ended. Only
// one scan runs at a time, so with k = 2 the second began after the scan
// in flight now (one that tried something, say) had returned.
func (c *ownClock) scansEnd(t *testing.T, k int64) {
	t.Helper()
	_, from, _, _ := c.counts()
	c.advanceUntil(t, fmt.Sprintf("%d scans ended", k), int(4*k+8), func() bool { _, s, _, _ := c.counts(); return s >= from+k })
}

// follow makes the clock follow the wall clock, a heartbeat interval at a
// time, until the next step or until the runner has stopped: for the
// part of a test that waits on the runner's work, not on ownership's
// time, during which the runner must keep its liveness key (its max age
// is the server's) as it does in production.
func (c *ownClock) follow() {
	if c.origin != nil {
		c.origin.follow()
		return
	}
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if c.stopping != nil {
		return
	}
	stop := make(chan struct{})
	c.stopping = stop
	c.followed.Add(1)
	go func() {
		defer c.followed.Done()
		tk := time.NewTicker(c.lease / 4)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				c.move()
			}
		}
	}()
}

// halt stops following the wall clock, if the clock follows it.
func (c *ownClock) halt() {
	if c.origin != nil {
		c.origin.halt()
		return
	}
	c.fmu.Lock()
	defer c.fmu.Unlock()
	if c.stopping == nil {
		return
	}
	close(c.stopping)
	c.followed.Wait()
	c.stopping = nil
}

// withoutScan says the runner makes no scan (runner.WithoutScan).
func (c *ownClock) withoutScan() *ownClock { c.noScan = true; return c }

// pass steps the clock until at least d of ownership's time passed (a
// judgement's grace, for example), a round and its scan at each step.
func (c *ownClock) pass(d time.Duration) {
	for end := c.Now().Add(d); c.Now().Before(end); {
		c.step()
	}
}

// judgeGrace is how long the runner's view must have been continuous
// before a peer whose key is absent without a marker is judged gone
// (partition.JudgeGrace): the harness's lease and the connection's default
// reconnect wait and jitter (startRunnerConn sets none).
func (c *ownClock) judgeGrace() time.Duration {
	return partition.JudgeGrace(c.lease, nats.DefaultReconnectWait+nats.DefaultReconnectJitter)
}

// waitScans waits (up to 20 s of the wall clock), without stepping the
// clock, until k more scans than now have ended: with follow, whose
// rounds, each with its scan, come every lease/4 of the wall clock, as in
// production — a test that also waits for what the wall clock drives
// meanwhile (a held run's retry: retryLater). Only one scan runs at a
// time, so with k = 2 the second began after the scan in flight now had
// returned.
func (c *ownClock) waitScans(t *testing.T, k int64) {
	t.Helper()
	_, from, _, _ := c.counts()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		_, s, _, more := c.counts()
		if s >= from+k {
			return
		}
		select {
		case <-more:
		case <-deadline.C:
			t.Fatalf("%d scans ended in 20 s, want %d", s-from, k)
		}
	}
}

// as gives c's runner the id id (runner.WithID) instead of its own: for a
// test whose runners' ids decide where a partition goes (moving,
// keeping). Call it before options.
func (c *ownClock) as(id string) *ownClock { c.id = id; return c }

// assigned reports whether rs, the runners alive, own the partitions as
// the assignment gives them (partition.Owner), every one by exactly one:
// the partitions settled among them.
func assigned(rs ...*runner.Runner) bool { return assignedOf(runner.DefaultPartitions, rs...) }

// assignedOf is assigned with n partitions.
func assignedOf(n int, rs ...*runner.Runner) bool {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID())
	}
	for _, r := range rs {
		var want []int
		for p := range n {
			if partition.Owner(p, ids) == r.ID() {
				want = append(want, p)
			}
		}
		if !slices.Equal(r.Stats().Partitions, want) {
			return false
		}
	}
	return true
}

// closed returns a condition (advanceUntil) that holds once ch is closed:
// a hook's event seen.
func closed(ch <-chan struct{}) func() bool {
	return func() bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// balance steps c's clock until rs, the runners alive, own the partitions
// as the assignment gives them (assigned).
func (c *ownClock) balance(t *testing.T, rs ...*runner.Runner) {
	t.Helper()
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID())
	}
	c.advanceUntil(t, fmt.Sprintf("the partitions settled among %v", ids), 40, func() bool { return assigned(rs...) })
}
