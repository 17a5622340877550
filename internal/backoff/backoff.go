// Package backoff is Weft's one retry delay: a delay that starts at a first
// value and doubles after every use up to a cap, waited under a context.
// Every retry loop of the module takes its delays from a Backoff, so the
// loops differ only in what they retry and when they give up.
//
//	b := backoff.New(100*time.Millisecond, 2*time.Second)
//	for {
//		err := try(ctx)
//		if err == nil || !retryable(err) {
//			return err
//		}
//		if b.Wait(ctx) != nil {
//			return err
//		}
//	}
package backoff

import (
	"context"
	"time"
)

// Backoff is an exponential delay: the first delay, then twice the
// previous one, never more than the limit. Build it with New; it is not safe for concurrent use.
type Backoff struct {
	first, max, next time.Duration
}

// New returns a Backoff whose first delay is first and whose delays never
// exceed limit (a limit below first is first).
func New(first, limit time.Duration) *Backoff {
	return &Backoff{first: first, max: max(first, limit), next: first}
}

// Next returns the delay to wait now and doubles the following one, up to
// the cap.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}

// Reset makes the next delay the first again.
func (b *Backoff) Reset() { b.next = b.first }

// Wait waits the next delay. It returns ctx.Err() when ctx ends first, nil
// otherwise.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep waits d, or until ctx ends: then it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
