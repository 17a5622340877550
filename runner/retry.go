package runner

import (
	"context"
	"errors"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/internal/backoff"
)

// kick is a pending wake-up of a run some of whose work failed.
type kick struct {
	timer *time.Timer
	delay *backoff.Backoff
}

// The backoff of retryLater: the first retry after retryFirst, doubling up
// to retryMax while the work keeps failing.
const (
	retryFirst = 100 * time.Millisecond
	retryMax   = 5 * time.Second
)

// retryLater wakes run id again after a backoff because some of its
// pending work could not be performed or recorded. The wake (on whichever
// runner drives the run then) derives the work again from the run's state
// and does what is still missing. A wake already scheduled is kept.
func (r *Runner) retryLater(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	k := r.kicks[id]
	if k == nil {
		k = &kick{delay: backoff.New(retryFirst, retryMax)}
		r.kicks[id] = k
	}
	if k.timer != nil {
		return
	}
	k.timer = time.AfterFunc(k.delay.Next(), func() {
		r.mu.Lock()
		k.timer = nil
		r.mu.Unlock()
		if err := r.retry(id); err != nil {
			if r.noteQuarantine(err) {
				return // woken again once repaired (watchQuarantined)
			}
			r.log.Warn("retry", "run", id, "err", err)
			if retryTimer(err) {
				r.retryLater(id)
			}
		}
	})
}

// retry is the wake of retryLater. It first checks that the run's state
// in memory is the log's (current), so that work is derived from the log
// as it is, not from the memory of a runner that lost the run.
func (r *Runner) retry(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx, end := r.bounded(ctx)
	defer end()
	for range 2 {
		rn, err := r.acquire(ctx, id)
		if err != nil {
			var fe *forwardError
			switch {
			case errors.As(err, &fe):
				return r.forwardWake(ctx, fe.driver, id)
			case weft.ErrorCode(err) == weft.CodeUnknownRun:
				return nil
			}
			return err
		}
		if rn.driven && rn.takeover == nil {
			current, err := r.current(ctx, rn)
			if err != nil {
				rn.unlock()
				if r.noteQuarantine(err) {
					return err
				}
				return &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
			}
			if !current && !rn.driven {
				rn.unlock()
				continue // another runner drives it: route the wake there
			}
		}
		err = r.wakeLocked(ctx, rn, true)
		rn.unlock()
		return err
	}
	return nil
}

// retried resets run id's backoff after a pass of act in which nothing
// failed.
func (r *Runner) retried(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.kicks[id]; k != nil && k.timer == nil {
		delete(r.kicks, id)
	}
}

// stopRetries stops every scheduled retry (the runner stops).
func (r *Runner) stopRetries() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for id, k := range r.kicks {
		if k.timer != nil {
			k.timer.Stop()
		}
		delete(r.kicks, id)
	}
}

// keepReply keeps the model's answer c of run id, which could not be
// recorded, for the next pass of act; takeReply returns it (and forgets
// it) when it answers the turn still requested.
func (r *Runner) keepReply(id string, c aggregate.Command) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replies[id] = c
}

func (r *Runner) takeReply(id string, turn int64) aggregate.Command {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.replies[id]
	if !ok {
		return nil
	}
	delete(r.replies, id)
	if modelTurnOf(c) != turn {
		return nil
	}
	return c
}

// modelTurnOf is the turn a model answer answers, 0 for another command.
func modelTurnOf(c aggregate.Command) int64 {
	switch c := c.(type) {
	case aggregate.ModelReply:
		return c.Turn
	case aggregate.ModelFailure:
		return c.Turn
	}
	return 0
}
