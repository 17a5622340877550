// Package clock is the clock that partition ownership reads
// (runner/internal/ownership, runner/partitions.go, release.go): the wall clock
// in production, a Fake advanced by hand in tests, so that the timing of
// liveness, the runners view and releases is tested without sleeping.
// Context deadlines that bound a store operation stay on the wall clock.
package clock

import (
	"sync"
	"time"
)

// Clock reads the time and makes tickers and timers.
type Clock interface {
	Now() time.Time
	Since(t time.Time) time.Duration
	// NewTicker delivers the time every d (dropping ticks a slow reader
	// misses, as time.Ticker does) until Stop.
	NewTicker(d time.Duration) Ticker
	// After delivers the time once, d from now.
	After(d time.Duration) <-chan time.Time
}

// Ticker is a time.Ticker of a Clock.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the wall clock.
func Real() Clock { return real{} }

type real struct{}

func (real) Now() time.Time                         { return time.Now() }
func (real) Since(t time.Time) time.Duration        { return time.Since(t) }
func (real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (real) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Fake is a clock that moves only when Advance is called; its tickers and
// timers fire during Advance. Its zero value is not usable: NewFake.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	added   chan struct{} // closed and replaced whenever a waiter is added
}

type waiter struct {
	at     time.Time
	period time.Duration // 0: a timer (After)
	c      chan time.Time
	fake   *Fake
}

// NewFake returns a Fake reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start, added: make(chan struct{})} }

// Now returns the Fake's time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Since returns the Fake's time since t.
func (f *Fake) Since(t time.Time) time.Duration { return f.Now().Sub(t) }

// After returns a channel that receives the Fake's time once an Advance
// reaches d from now.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	w := f.add(d, 0)
	if d <= 0 {
		f.Advance(0)
	}
	return w.c
}

// NewTicker returns a ticker that fires on every Advance that reaches its
// next period.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	return f.add(d, d)
}

func (f *Fake) add(d, period time.Duration) *waiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &waiter{at: f.now.Add(d), period: period, c: make(chan time.Time, 1), fake: f}
	f.waiters = append(f.waiters, w)
	close(f.added)
	f.added = make(chan struct{})
	return w
}

func (w *waiter) C() <-chan time.Time { return w.c }

func (w *waiter) Stop() {
	f := w.fake
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, o := range f.waiters {
		if o == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			return
		}
	}
}

// Advance moves the clock d forward and fires every timer and ticker due
// by then: a timer once, a ticker once per Advance however many periods
// passed (a reader that has not taken the previous tick misses this one,
// as with time.Ticker).
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	keep := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			keep = append(keep, w)
			continue
		}
		select {
		case w.c <- f.now:
		default:
		}
		if w.period > 0 {
			for !w.at.After(f.now) {
				w.at = w.at.Add(w.period)
			}
			keep = append(keep, w)
		}
	}
	f.waiters = keep
}

// Waiters returns the number of tickers and timers not yet fired or
// stopped, and a channel closed when another is added: a test waits
// for the code under test to arm its ticker before it advances.
func (f *Fake) Waiters() (int, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters), f.added
}
