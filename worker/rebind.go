package worker

import (
	"context"
	"fmt"
	"github.com/weftrun/weft/api"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/lostconsumer"
)

// ConsumerRebound is the message Run logs (warn level, with queue) when
// a queue's consume ended while the worker was running — its durable
// consumer deleted (an operator, the task stream made again) or lost by
// a server — and it binds the consumer again after a pause.
const ConsumerRebound = "worker: a queue's consume ended; making its consumer again"

// consume makes q's durable consumer (or binds it as it is) and starts
// consuming it: each task is handled in w.group.
func (w *Worker) consume(ctx context.Context, q api.Queue) (jetstream.ConsumeContext, error) {
	c, err := w.js.CreateOrUpdateConsumer(ctx, api.TaskStream, ConsumerConfig(q, w.ackWait))
	if err != nil {
		return nil, fmt.Errorf("worker: consumer for %s: %w", q, err)
	}
	h := w.handlers[q]
	cc, err := c.Consume(func(m jetstream.Msg) {
		w.group.Go(func() error {
			w.handle(q, h, m)
			return nil
		})
	}, jetstream.PullMaxMessages(64), lostconsumer.StopWhenGone(c, func(err error) {
		// A server lost the consumer: the consume is stopped, and keep
		// makes it again.
		w.log.Warn("worker: a queue's consumer is gone from the server; stopping its consume", "queue", q.String(), "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("worker: consume %s: %w", q, err)
	}
	return cc, nil
}

// keep keeps every queue consumed until ctx ends (docs/semantics.md §8: a
// run whose tools a worker serves is never left waiting for a consumer
// that is gone). ccs[i] consumes w.queues[i]; when a consume ends while
// ctx lasts, its consumer is made again after a pause (internal/backoff,
// doubling from 100 ms up to 5 s while it fails or the consumes made
// again end at once) and consumed anew.
// keep returns, once ctx ended, the consumes then running, for Run to
// drain (an entry is nil when ctx ended while its consumer was being made
// again).
func (w *Worker) keep(ctx context.Context, ccs []jetstream.ConsumeContext) []jetstream.ConsumeContext {
	out := make([]jetstream.ConsumeContext, len(ccs))
	var wg sync.WaitGroup
	for i, cc := range ccs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = w.keepOne(ctx, w.queues[i], cc)
		}()
	}
	wg.Wait()
	return out
}

// rebindCap is the longest pause before a queue's consumer is made again.
// A consume that lived longer than it resets the pause: one that ends
// at once after each make (a terminal status after the first pull, a
// script that deletes the consumer again and again) is made again at
// the cap, not every 100 ms.
const rebindCap = 5 * time.Second

// rebindLogEvery: while a queue's consumer cannot be made again (its
// stream is gone), its failure is logged at the first try and then every
// rebindLogEvery tries (about once a minute at the cap).
const rebindLogEvery = 12

// keepOne is keep for queue q, consumed by cc.
func (w *Worker) keepOne(ctx context.Context, q api.Queue, cc jetstream.ConsumeContext) jetstream.ConsumeContext {
	back := backoff.New(100*time.Millisecond, rebindCap)
	made := time.Now()
	for {
		select {
		case <-ctx.Done():
			return cc
		case <-cc.Closed():
		}
		if time.Since(made) > rebindCap {
			back.Reset()
		}
		w.rebinds.Add(1)
		w.log.Warn(ConsumerRebound, "queue", q.String())
		for failed := 0; ; failed++ {
			if back.Wait(ctx) != nil {
				return nil
			}
			// Each try is bounded: a request sent while the server
			// restarts may never be answered.
			actx, cancel := context.WithTimeout(ctx, rebindCap)
			next, err := w.consume(actx, q)
			cancel()
			if err == nil {
				cc = next
				break
			}
			if failed%rebindLogEvery == 0 {
				w.log.Warn("worker: a queue's consumer could not be made again; retrying", "queue", q.String(), "err", err, "tries", failed+1)
			}
		}
		made = time.Now()
		if ctx.Err() != nil {
			// Made as ctx ended: drained by Run like the others.
			return cc
		}
	}
}
