package runner_test

import (
	"sync"
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
// after it — and waits for that round and for a scan that ended after it
// (the "partition-pass" and "partition-scanned" hooks). follow is used
// only once the test steps no more (the two would both move the clock).
//
// What a fake clock cannot move is the server's: the runners bucket's
// max age (a liveness key lapses a lease of the server's time after its
// last put) and the times of the server's messages. A runner on an
// ownClock beats only when the clock steps, so a test that waits on
// something else for longer than a lease lets the clock follow the wall
// clock meanwhile (follow): its own key would lapse otherwise.
type ownClock struct {
	*clock.Fake
	lease  time.Duration
	noScan bool                                  // the runner makes no scan (runner.WithoutScan): a step waits for its round only
	also   func(event string, p int, run string) // the test's own hook

	mu       sync.Mutex
	nrounds  int64         // rounds of rebalancing made ("partition-pass")
	scans    int64         // scans beside them ended ("partition-scanned")
	progress chan struct{} // closed (and replaced) at each of those
}

// newOwnClock returns the ownership clock of a runner with the harness's
// lease (startRunnerConn: 2 s), reading the wall clock's time at first.
func newOwnClock() *ownClock {
	return &ownClock{Fake: clock.NewFake(time.Now()), lease: 2 * time.Second, progress: make(chan struct{})}
}

// options are the runner's options for c, with hook (nil: none) called on
// every event besides c's.
func (c *ownClock) options(hook func(event string, p int, run string)) []runner.Option {
	c.also = hook
	return []runner.Option{runner.WithOwnershipClock(c.Fake), runner.WithHook(func(event string, p int, run string) {
		if event == "partition-pass" || event == "partition-scanned" {
			c.mu.Lock()
			if event == "partition-pass" {
				c.nrounds++
			} else {
				c.scans++
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

// counts returns the rounds and scans made so far, and a channel closed
// at the next of either.
func (c *ownClock) counts() (rounds, scans int64, more <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nrounds, c.scans, c.progress
}

// step moves the clock a heartbeat interval (lease/4) forward and waits
// (up to 5 s of the wall clock) for the partition loop's round it fired
// and for a scan beside the loop that ended after it (a scan still
// running from a step before makes the round skip its own: the next step
// makes it). A round that does not come (the loop's ticker not armed yet,
// a tick taken while the loop was busy) is left to the next step.
func (c *ownClock) step() {
	rounds, scans, _ := c.counts()
	c.Advance(c.lease / 4)
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		r, s, more := c.counts()
		if r > rounds && (c.noScan || s > scans) {
			return
		}
		select {
		case <-more:
		case <-deadline.C:
			return
		}
	}
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

// rounds steps the clock until k more rounds of rebalancing than now were
// made (each round is followed by its scan: a round seen after a scan
// that began means that scan has returned).
func (c *ownClock) rounds(t *testing.T, k int64) {
	t.Helper()
	from, _, _ := c.counts()
	c.advanceUntil(t, "rounds of rebalancing", int(4*k+8), func() bool { r, _, _ := c.counts(); return r >= from+k })
}

// follow makes the clock follow the wall clock, a heartbeat interval at a
// time, until the test ends: for the part of a test that waits on the
// runner's work, not on ownership's time, during which the runner must
// keep its liveness key (its max age is the server's) as it does in
// production.
func (c *ownClock) follow(t *testing.T) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(c.lease / 4)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				c.Advance(c.lease / 4)
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
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

// waitRounds waits (up to 20 s of the wall clock), without stepping the
// clock, until k more rounds than now were made: with follow, whose
// rounds come every lease/4 of the wall clock, as in production — a test
// that also waits for what the wall clock drives meanwhile (a held run's
// retry: retryLater).
func (c *ownClock) waitRounds(t *testing.T, k int64) {
	t.Helper()
	from, _, _ := c.counts()
	deadline := time.NewTimer(20 * time.Second)
	defer deadline.Stop()
	for {
		r, _, more := c.counts()
		if r >= from+k {
			return
		}
		select {
		case <-more:
		case <-deadline.C:
			t.Fatalf("%d rounds of rebalancing in 20 s, want %d", r-from, k)
		}
	}
}
