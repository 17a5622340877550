package runner

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// background owns the runner's goroutines that outlive the call that
// starts them: a durable timer's arm or disarm (timers.go), a
// delegation's tending (delegate.go), a model call (effects.go), a
// snapshot's put (drive.go). They are one errgroup (STYLE.md principle
// 9), each bounded by the group's context, which ends when Run shuts
// down; from then on no goroutine is started, and Run returns only once
// those running have returned.
//
// Work cut short so is never lost (docs/semantics.md §8): each of these is
// derived again from the log by the next driver (a requested turn is
// called again, a delegation tended again on takeover, a pending timer
// armed again, a snapshot cut again from a later state), or is an
// optimisation (a disarm: a schedule left behind wakes a run for nothing).
type background struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	group  errgroup.Group
	closed bool // stop was called: Go starts nothing
}

func newBackground() *background {
	ctx, cancel := context.WithCancel(context.Background())
	return &background{ctx: ctx, cancel: cancel}
}

// Go runs f in the group with the group's context, and reports whether it
// did: once stop was called it does not (the work is left to the log).
func (b *background) Go(f func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.group.Go(func() error {
		f(b.ctx)
		return nil
	})
	return true
}

// stop ends the group's context, starts nothing more and waits for every
// goroutine of the group to return, up to limit: it reports false when
// one still runs then (a model adapter or a store call that does not end
// with its context: a bug of that code, which the goroutine's own
// context bounds no further).
func (b *background) stop(limit time.Duration) bool {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	done := make(chan struct{})
	go func() {
		_ = b.group.Wait()
		close(done)
	}()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
