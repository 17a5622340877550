package runner

import (
	"context"
	"errors"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/retention"
)

// startRead is what a start learns before its append (startReads).
type startRead struct {
	state aggregate.State
	head  eventlog.Head
	at    time.Time
	// intent is the revision of the driver entry this start created (0:
	// none — one was there already, or the create failed); the caller
	// removes it when the start appends nothing.
	intent uint64
	err    error
}

// startReads reads run id for a start — its log, then, for an id with no
// events, its tombstone in weft_purges — while the run's driver entry is
// created as the start's intent, at the same time: the create needs
// nothing the reads answer (docs/adr/0041-a-start-s-reads-and-lane.md).
// It returns once both are done, so the intent exists before the run's
// first append (docs/semantics.md §8: a runner that dies right after the
// append leaves an entry the next owner finds). The two reads stay in
// order: retention writes a run's marker before it removes the run's
// events, so only a tombstone read after the log read that found no
// events is sure to see the marker of a purge that removed them
// (docs/semantics.md §6: a purged run's id is never used again).
//
// The caller holds the id in r.loading from before this call until the
// run is registered (startFork): the scan for orphans skips an id being
// loaded, so it never takes the new intent for a run to wake.
func (r *Runner) startReads(ctx context.Context, id string) startRead {
	type created struct {
		rev uint64
		err error
	}
	ch := make(chan created, 1)
	go func() {
		rev, err := r.createDriverKey(ctx, id, r.id)
		ch <- created{rev, err}
	}()
	var rd startRead
	rd.state, rd.head, rd.at, rd.err = r.readForStart(ctx, id)
	c := <-ch
	if c.err == nil {
		rd.intent = c.rev
	}
	if rd.err != nil || rd.state.Exists() {
		return rd // refused or judged against the log: no intent needed
	}
	if c.err != nil && !errors.Is(c.err, errDriverKeyExists) {
		// An entry that exists already is another start's intent (or a
		// stale one): it is corrected once the log says who won.
		rd.err = &weft.Error{Code: weft.CodeUnavailable, Message: "driver intent: " + c.err.Error()}
	}
	return rd
}

// readForStart reads run id as a start needs it: the log's last message
// first (one direct get), the whole run (loadAt) only when there is one,
// and for an id with no events its tombstone — refused already_started
// when retention purged a run of that id (retention.CheckNotPurged).
func (r *Runner) readForStart(ctx context.Context, id string) (aggregate.State, eventlog.Head, time.Time, error) {
	unavailable := func(err error) error {
		if r.noteQuarantine(err) {
			return err
		}
		return &weft.Error{Code: weft.CodeUnavailable, Message: err.Error()}
	}
	head, err := r.evlog.Head(ctx, id)
	if err != nil {
		return aggregate.State{}, eventlog.Head{}, time.Time{}, unavailable(err)
	}
	if !head.IsZero() {
		s, head, at, err := r.loadAt(ctx, id)
		if err != nil {
			return aggregate.State{}, head, time.Time{}, unavailable(err)
		}
		return s, head, at, nil
	}
	r.loaded.Add(1)
	s, err := aggregate.FoldChecked(nil)
	if err != nil {
		return aggregate.State{}, eventlog.Head{}, time.Time{}, err
	}
	if err := retention.CheckNotPurged(ctx, r.js, id); err != nil {
		return aggregate.State{}, eventlog.Head{}, time.Time{}, err
	}
	return s, eventlog.Head{}, time.Time{}, nil
}

// startLoading holds id in r.loading for a start, once no acquisition of
// it is in flight: an acquisition meanwhile waits (acquire), and the scan
// for orphans skips the id (scanPartitions), until the returned func —
// idempotent — ends it.
func (r *Runner) startLoading(ctx context.Context, id string) (func(), error) {
	for {
		r.mu.Lock()
		wait, busy := r.loading[id]
		if !busy {
			ch := make(chan struct{})
			r.loading[id] = ch
			r.mu.Unlock()
			ended := false
			return func() {
				if ended {
					return
				}
				ended = true
				r.mu.Lock()
				if r.loading[id] == ch {
					delete(r.loading, id)
				}
				r.mu.Unlock()
				close(ch)
			}, nil
		}
		r.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, waitEnded(ctx, id)
		}
	}
}
