package eventlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/events"
)

// RunEvent is one event of one run delivered by WatchRun.
type RunEvent struct {
	// Envelope is the event.
	Envelope events.Envelope
	// Last is true for the last event of its message (one decision): the
	// run's state is whole after it.
	Last bool
	// CaughtUp is true for the last event of a message after which the
	// run had no more messages when it was delivered: the events so far
	// are the run's whole history at that moment. A RunEvent with a zero
	// Envelope (Version 0) carries only CaughtUp: the run's last messages
	// are a repair's void record or the message it voids (docs/adr/0011).
	CaughtUp bool
}

// WatchRun calls fn for every event of run in order, from its first, and
// then for each event appended later, as it is appended (an ordered
// consumer filtered on the run's subjects: no polling). It blocks until
// ctx ends (returning nil) or fn returns an error (returning it; return
// ErrStopWatch to stop without an error). fn is called from one goroutine.
// A message no reader can fold ends the watch with a *PoisonError (code
// quarantined) unless a repair voided it; void records are skipped.
func (l *Log) WatchRun(ctx context.Context, run string, fn func(RunEvent) error) error {
	if err := CheckRun(run); err != nil {
		return err
	}
	cons, err := l.js.OrderedConsumer(ctx, l.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{RunFilter(run)}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("eventlog: watch %s: %w", run, unavailable(err))
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("eventlog: watch %s: %w", run, unavailable(err))
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	var prev Head // the last event delivered: the next message must follow it
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("eventlog: watch %s: %w", run, unavailable(err))
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("%w: watch %s: metadata: %v", ErrCorrupt, run, err)
		}
		pm, err := parse(run, m.Headers(), m.Data())
		if err == nil && pm.void == nil {
			if first := pm.envs[0]; first.Version != prev.Version+1 || (prev.Hash != "" && first.Prev != prev.Hash) {
				err = fmt.Errorf("event %s version %d does not follow version %d", short(first.ID), first.Version, prev.Version)
			}
		}
		if err != nil {
			// A message no reader can fold: the run is quarantined,
			// unless a repair voided the message since (its record
			// comes later in the log: read the run to know).
			perr := &PoisonError{Run: run, Seq: meta.Sequence.Stream, Reason: err.Error()}
			if _, _, lerr := l.Load(ctx, run); lerr != nil {
				var p *PoisonError
				if !errors.As(lerr, &p) {
					return lerr
				}
				if p.Seq <= perr.Seq {
					return perr // not voided
				}
			}
		}
		if err != nil || pm.void != nil {
			// Skipped: a voided message or a void record. When it is the
			// run's last, say the history so far is whole.
			if meta.NumPending == 0 {
				if err := fn(RunEvent{Last: true, CaughtUp: true}); err != nil {
					if errors.Is(err, ErrStopWatch) {
						return nil
					}
					return err
				}
			}
			continue
		}
		envs := pm.envs
		last := envs[len(envs)-1]
		prev = Head{Version: last.Version, Hash: last.Hash()}
		for i, env := range envs {
			last := i == len(envs)-1
			if err := fn(RunEvent{Envelope: env, Last: last, CaughtUp: last && meta.NumPending == 0}); err != nil {
				if errors.Is(err, ErrStopWatch) {
					return nil
				}
				return err
			}
		}
	}
}

// ErrStopWatch stops WatchRun without an error when its fn returns it.
var ErrStopWatch = errors.New("eventlog: stop watching")
