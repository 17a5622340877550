package runner

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/timer"
)

// docs/semantics.md §8 (pending work is retried, never dropped): the
// timer consumer is started again after each stop, the pause doubling up
// to its cap; a consume that delivered a firing worked, so the pause
// after its stop starts again from the first, not from the cap the
// failures before it reached.
func TestSemantics8_ATimerConsumerThatDeliveredPausesFromTheFirstAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ms := time.Millisecond
	var pauses []time.Duration
	// Each consume stops at once; the fourth delivers a firing first.
	calls, fired := 0, 0
	consume := func(ctx context.Context, fn func(context.Context, timer.Fired) error) error {
		calls++
		if calls == 4 {
			if err := fn(ctx, timer.Fired{Run: "r-1"}); err != nil {
				return err
			}
		}
		return errors.New("stopped")
	}
	fn := func(context.Context, timer.Fired) error { fired++; return nil }
	consumeAgain(ctx, backoff.New(ms, 8*ms), consume, fn, func(_ error, d time.Duration) {
		pauses = append(pauses, d)
		if len(pauses) == 7 {
			cancel()
		}
	})
	want := []time.Duration{ms, 2 * ms, 4 * ms, ms, 2 * ms, 4 * ms, 8 * ms}
	if !slices.Equal(pauses, want) || fired != 1 {
		t.Fatalf("pauses %v (fired %d), want %v (fired 1)", pauses, fired, want)
	}
}
