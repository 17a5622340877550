package runner

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBackgroundStopEndsEveryGoroutine proves the runner's background
// group (STYLE.md principle 9): stop ends the context
// every goroutine of the group is bounded by, returns only once they all
// returned, and from then on starts nothing (the work is left to the log,
// docs/semantics.md §8). Go and stop may race (run with -race).
func TestBackgroundStopEndsEveryGoroutine(t *testing.T) {
	t.Parallel()
	b := newBackground()
	var wg sync.WaitGroup
	var accepted atomic.Int64
	ended := make(chan struct{}, 64)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if b.Go(func(ctx context.Context) {
				<-ctx.Done()
				ended <- struct{}{}
			}) {
				accepted.Add(1)
			}
		}()
	}
	started := make(chan struct{})
	if !b.Go(func(ctx context.Context) { close(started); <-ctx.Done(); ended <- struct{}{} }) {
		t.Fatal("Go refused before stop")
	}
	<-started
	wg.Add(1)
	go func() { defer wg.Done(); b.stop(time.Minute) }()
	wg.Wait()
	// Every goroutine Go started had returned when stop returned.
	if n, want := len(ended), int(accepted.Load())+1; n != want {
		t.Errorf("%d goroutines had returned when stop returned, want all %d started", n, want)
	}
	if b.Go(func(context.Context) { t.Error("a goroutine started after stop") }) {
		t.Error("Go after stop reported it started")
	}
	if !b.stop(time.Minute) {
		t.Error("a second stop found goroutines running")
	}
}

// TestBackgroundStopIsBounded proves a goroutine that ignores its context
// does not hold Run past the bound: stop reports it and returns.
func TestBackgroundStopIsBounded(t *testing.T) {
	t.Parallel()
	b := newBackground()
	release := make(chan struct{})
	b.Go(func(context.Context) { <-release })
	if b.stop(20 * time.Millisecond) {
		t.Error("stop reported every goroutine returned while one still ran")
	}
	close(release)
	if !b.stop(time.Minute) {
		t.Error("the released goroutine never returned")
	}
}
