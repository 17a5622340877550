package projector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// A projector writes the messages the log delivered while it was writing
// the previous ones as one batch (docs/adr/0028-projector-batches.md):
// with the server's fsync before every acknowledgement, one write waited
// for at a time is one fsync waited for at a time, and a run cost about
// eighteen of them. A batch folds each run's events in memory, then
//
//  1. publishes every changed view at once, each a compare-and-set on the
//     revision it was read at (the expected last subject sequence a KV
//     Update sends), and waits for all their acknowledgements;
//  2. removes the index entries the new views no longer have, for all the
//     batch's runs together (indexWriter.removeAll: the purges, then the
//     directory pruned level by level, each level's requests sent at once);
//  3. publishes the index entries, the summaries and the inbox items of
//     every view that landed at once, and waits for all their
//     acknowledgements;
//  4. writes the checkpoint, the last message whose events are all stored.
//
// So the checkpoint never passes a write that was not acknowledged; a
// view another writer changed under the batch (a rebuild), or a new run's
// key holding a delete marker (where the expected sequence 0 fails while
// a KV Create would succeed), is projected again event by event from the
// view read anew; and a stop anywhere in between leaves what a stop
// between one event's writes left before (each view's last event,
// delivered again, rewrites what derives from it). A stopped batch sends
// nothing more and waits for the answers of what it sent
// (pipeline.settle) before Run gives the lease up.

// maxBatch bounds the log messages one batch projects (and so the runs
// whose views one flush publishes: it must stay under pipelineDepth).
const maxBatch = 256

// feedSize is how many events the subscription delivers ahead of the
// batch being written.
const feedSize = 1024

// pending is a run's view while a batch folds it.
type pending struct {
	old  projections.RunView // as stored
	rev  uint64              // old's revision (0: no view stored)
	cur  projections.RunView // old with envs folded
	envs []events.Envelope
}

// batch is the runs one batch folds, in the order first seen.
type batch struct {
	runs  map[string]*pending
	order []string
}

func newBatch() *batch { return &batch{runs: map[string]*pending{}} }

func (b *batch) reset() {
	clear(b.runs)
	b.order = b.order[:0]
}

// follow projects the log from the message after seq until ctx ends or a
// write fails: the subscription feeds the events into a channel, and each
// batch takes what has arrived, up to maxBatch messages. A watchdog
// (stalled) ends it with errStalled when the log is ahead of what was
// projected and nothing moved (no message delivered, no write answered)
// for StallAfter: the subscription stopped delivering (its consumer lost
// across a server restart), and Run's caller resumes from the checkpoint.
// A slow batch that moves is not stopped.
func (p *Projector) follow(ctx context.Context, seq uint64) error {
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	feed := make(chan eventlog.StreamEvent, feedSize)
	ended := make(chan error, 1)
	go func() {
		ended <- p.log.Subscribe(sctx, seq+1, func(se eventlog.StreamEvent) error {
			if p.onFeed != nil {
				p.onFeed(sctx, se)
			}
			select {
			case feed <- se:
				return nil
			case <-sctx.Done():
				return nil
			}
		})
	}()
	watching := make(chan struct{})
	go func() { defer close(watching); p.stalled(sctx, cancel) }()
	stop := func(err error) error {
		cancel(nil)
		<-watching
		// The subscription ends once its iterator is stopped; one that
		// does not end in time is left to end on its own.
		t := time.NewTimer(settleWait)
		defer t.Stop()
		select {
		case e := <-ended:
			if err == nil {
				err = e
			}
		case <-t.C:
			p.logger.Warn("projector: the subscription to the log did not stop in time; left to stop on its own", "wait", settleWait)
		}
		if cause := context.Cause(sctx); errors.Is(cause, errStalled) {
			return cause
		}
		return err
	}
	b := newBatch()
	var evs []eventlog.StreamEvent
	for {
		evs = evs[:0]
		select {
		case se := <-feed:
			evs = append(evs, se)
		case err := <-ended:
			ended <- err // for stop, which reads it
			return stop(nil)
		case <-sctx.Done():
			return stop(nil)
		}
	take:
		for msgs := 0; ; {
			if evs[len(evs)-1].Last {
				if msgs++; msgs == maxBatch {
					break
				}
			}
			select {
			case se := <-feed:
				evs = append(evs, se)
			default:
				break take
			}
		}
		if err := p.projectBatch(sctx, b, evs); err != nil {
			return stop(err)
		}
	}
}

// StallAfter is how long the log may be ahead of what the projector
// projected, with nothing moving — no message of the log delivered to a
// batch, no write or index check answered, no checkpoint written —
// before follow gives up on its subscription and batch (errStalled) and
// Run's caller resumes from the checkpoint: three leases, well past a
// batch's longest wait for its acknowledgements (ackWait). A batch that
// is slow but moves is never stopped (every wait inside one is bounded on
// its own); what only this bound catches is a subscription that stopped
// delivering. A Rebuild ends with ErrStalled when its subscription
// delivered nothing for as long.
const StallAfter = 3 * Lease

// stalls returns StallAfter (or a test's replacement).
func (p *Projector) stalls() time.Duration {
	if p.stallAfter > 0 {
		return p.stallAfter
	}
	return StallAfter
}

// errStalled ends a follow whose watchdog found the log ahead of what was
// projected and nothing moving for StallAfter, and a Rebuild whose
// subscription delivered nothing for StallAfter.
var errStalled = errors.New("projector: nothing came of the log while it was ahead")

// moved counts what shows a follow is live: the checkpoints written
// (their sequence), the messages delivered to a batch, and the writes and
// index checks the server answered. It only grows.
func (p *Projector) moved() uint64 {
	return p.seq.Load() + p.delivered.Load() + p.index.answered.Load()
}

// stalled is follow's watchdog: until ctx ends it checks every
// StallAfter/4 whether anything moved (moved); when nothing did for
// StallAfter (a time while the server did not answer does not count) and
// the log's last sequence is past the last message projected, it logs a
// warning and calls stop with errStalled.
func (p *Projector) stalled(ctx context.Context, stop context.CancelCauseFunc) {
	after := p.stalls()
	t := time.NewTicker(after / 4)
	defer t.Stop()
	last, since := p.moved(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if m := p.moved(); m != last {
			last, since = m, time.Now()
			continue
		}
		if time.Since(since) < after {
			continue
		}
		ictx, cancel := context.WithTimeout(ctx, p.js.Options().DefaultTimeout)
		info, err := p.stream.Info(ictx)
		cancel()
		projected := p.seq.Load()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			// The server does not answer: count from when it does.
			since = time.Now()
		case info.State.LastSeq <= projected:
			since = time.Now() // caught up: nothing to project
		default:
			p.logger.Warn("projector stalled: the log is ahead and nothing moved (no message delivered, no write answered); resuming from the checkpoint",
				"log", info.State.LastSeq, "projected", projected, "for", after, "delivered", p.delivered.Load())
			stop(fmt.Errorf("%w: the log at %d, projected up to %d, nothing delivered or written for %s", errStalled, info.State.LastSeq, projected, after))
			return
		}
	}
}

// projectBatch projects evs and then moves the checkpoint to the last
// message whose events are all stored.
func (p *Projector) projectBatch(ctx context.Context, b *batch, evs []eventlog.StreamEvent) error {
	if !p.lease.holds() {
		return errLeaseLost
	}
	var done uint64
	for _, se := range evs {
		p.delivered.Add(1)
		var err error
		switch {
		case se.Poison != nil && se.Run == "":
			// On a subject that names no run: nothing to quarantine.
			p.logger.Warn("projector skipped a message of no run", "seq", se.Seq, "reason", se.Poison.Reason)
		case se.Poison != nil:
			if err = p.flush(ctx, b); err == nil {
				err = p.quarantine(ctx, se.Poison)
			}
		case se.Void != nil:
			// A repair: read the run again without the voided message.
			if err = p.flush(ctx, b); err == nil {
				err = p.reread(ctx, se.Run, 0)
			}
		default:
			var staged bool
			if staged, err = p.stage(ctx, b, se.Envelope); err == nil && !staged {
				if err = p.flush(ctx, b); err == nil {
					err = p.project(ctx, se.Envelope)
				}
			}
		}
		if err != nil {
			return err
		}
		if se.Last {
			done = se.Seq
		}
	}
	if err := p.flush(ctx, b); err != nil {
		return err
	}
	if done == 0 {
		return nil
	}
	if !p.lease.holds() {
		return errLeaseLost
	}
	if err := sent(ctx, func(ctx context.Context) error { return writeCheckpoint(ctx, p.state, done) }); err != nil {
		return err
	}
	p.seq.Store(done)
	return nil
}

// stage folds env into its run's pending view when it is the view's next
// event (or one the view holds already, or one of a quarantined run:
// nothing to do). It reports false for an event the one-event path
// (project) must handle once the batch is written: one after a gap (the
// run is refolded from the log), or the stored view's last event
// delivered again (what derives from it is written again).
func (p *Projector) stage(ctx context.Context, b *batch, env events.Envelope) (bool, error) {
	r, err := Recorded(env)
	if err != nil {
		return false, err
	}
	pd := b.runs[r.Run]
	if pd == nil {
		old, rev, err := p.readView(ctx, r.Run)
		if err != nil {
			return false, err
		}
		pd = &pending{old: old, rev: rev, cur: old}
		b.runs[r.Run] = pd
		b.order = append(b.order, r.Run)
	}
	switch {
	case pd.cur.Quarantine != nil:
		// Nothing after the bad message is folded until a repair voids
		// it (its void record re-reads the run).
		return true, nil
	case r.Version == pd.cur.Version+1:
		pd.cur = projections.Apply(pd.cur, r)
		pd.envs = append(pd.envs, env)
		return true, nil
	case r.Version < pd.cur.Version, r.Version == pd.cur.Version && len(pd.envs) > 0:
		return true, nil // already projected
	}
	return false, nil
}

// flush writes the views the batch folded and what derives from them
// (steps 1 to 3 above), then projects event by event the runs whose view
// another writer changed, and empties the batch.
func (p *Projector) flush(ctx context.Context, b *batch) error {
	defer b.reset()
	var dirty []*pending
	for _, run := range b.order {
		if pd := b.runs[run]; len(pd.envs) > 0 {
			dirty = append(dirty, pd)
		}
	}
	if len(dirty) == 0 {
		return nil
	}
	if !p.lease.holds() {
		return errLeaseLost
	}
	// A batch has at most maxBatch runs, under pipelineDepth: the views
	// are published without an intermediate wait, so the i that wait's
	// each receives is the index in dirty.
	pl := p.index.newPipeline()
	defer pl.settle()
	for _, pd := range dirty {
		v, err := pd.cur.Encode()
		if err != nil {
			return err
		}
		m := &nats.Msg{Subject: "$KV." + BucketViews + "." + pd.cur.Run, Data: v, Header: nats.Header{}}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(pd.rev, 10))
		if err := pl.publish(ctx, m); err != nil {
			return err
		}
	}
	var landed, changed []*pending
	err := pl.wait(ctx, func(i int, err error) error {
		switch {
		case err == nil:
			landed = append(landed, dirty[i])
		case isWrongSequence(err):
			changed = append(changed, dirty[i])
		default:
			return fmt.Errorf("projector: write view %s: %w", dirty[i].cur.Run, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	type derived struct {
		before []entry
		c      projections.Change
	}
	ds := make([]derived, 0, len(landed))
	var removed []entry
	for _, pd := range landed {
		before, err := p.before(ctx, pd.cur.Run, pd.old, pd.rev)
		if err != nil {
			return err
		}
		c := projections.Advance(pd.old, pd.cur)
		removed = append(removed, gone(before, entries(c))...)
		ds = append(ds, derived{before, c})
	}
	if !p.noIndex {
		if err := p.index.removeAll(ctx, removed); err != nil {
			return err
		}
		p.index.pause()
	}
	// The removals may have taken seconds (each an fsync'd write).
	if !p.lease.holds() {
		return errLeaseLost
	}
	dl := p.index.newPipeline()
	defer dl.settle()
	for _, d := range ds {
		if err := p.publishDerived(ctx, dl, d.before, d.c, putChanged); err != nil {
			clear(p.index.known)
			return err
		}
	}
	if err := dl.wait(ctx, nil); err != nil {
		clear(p.index.known) // a node may be missing
		return err
	}
	for _, pd := range landed {
		p.applied.Add(uint64(len(pd.envs)))
	}
	// Another writer changed these views since they were read: project
	// their events one by one, each reading the view again.
	for _, pd := range changed {
		if !p.lease.holds() {
			return errLeaseLost
		}
		for _, env := range pd.envs {
			if err := p.project(ctx, env); err != nil {
				return err
			}
		}
	}
	return nil
}

// ackWait bounds how long a pipeline waits for its acknowledgements: a
// server that does not answer in time is an unanswered write
// (internal/unanswered), and the projector resumes from its checkpoint.
const ackWait = 30 * time.Second

// pipelineDepth bounds the writes a pipeline has in flight; the next one
// waits for those first (well under the JetStream context's limit of
// asynchronous publishes, 4,000 by default).
const pipelineDepth = 1024

// pipeline publishes writes without waiting for each and waits for their
// acknowledgements together: the server stores them as they arrive, and
// the writer pays one round trip for all of them instead of one each.
// Writes to one stream are stored in the order they were published.
type pipeline struct {
	js   jetstream.JetStream
	acks []jetstream.PubAckFuture
	// answered counts the writes whose acknowledgement (or error) came.
	answered *atomic.Uint64
}

// newPipeline returns a pipeline whose answered writes count in
// w.answered.
func (w *indexWriter) newPipeline() *pipeline {
	return &pipeline{js: w.js, answered: &w.answered}
}

// settleWait bounds how long settle waits for the writes a stopped
// pipeline left in flight.
const settleWait = Lease / 4

// publish sends m, unless ctx is done (a stopped projector sends nothing
// more); past pipelineDepth writes in flight it first waits for them (and
// returns the first that failed).
func (pl *pipeline) publish(ctx context.Context, m *nats.Msg) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(pl.acks) >= pipelineDepth {
		if err := pl.wait(ctx, nil); err != nil {
			return err
		}
	}
	a, err := pl.js.PublishMsgAsync(m)
	if err != nil {
		return fmt.Errorf("projector: write %s: %w", m.Subject, err)
	}
	pl.acks = append(pl.acks, a)
	return nil
}

// wait waits for the acknowledgement of every write published since the
// last wait. With each, it tells each of them its outcome (i counts the
// writes in publish order) and returns the first error each returned;
// without, it returns the first write that failed. A write not answered
// within ackWait fails with context.DeadlineExceeded. When ctx ends or
// ackWait passes, the writes not yet answered stay for settle.
func (pl *pipeline) wait(ctx context.Context, each func(i int, err error) error) error {
	acks := pl.acks
	wctx, cancel := context.WithTimeout(ctx, ackWait)
	defer cancel()
	var first error
	for i, a := range acks {
		var err error
		select {
		case <-a.Ok():
		case err = <-a.Err():
		case <-wctx.Done():
			pl.answered.Add(uint64(i))
			pl.acks = acks[i:]
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("projector: write %s: no acknowledgement within %s: %w", a.Msg().Subject, ackWait, wctx.Err())
		}
		switch {
		case each != nil:
			if e := each(i, err); e != nil && first == nil {
				first = e
			}
		case err != nil && first == nil:
			first = fmt.Errorf("projector: write %s: %w", a.Msg().Subject, err)
		}
	}
	pl.answered.Add(uint64(len(acks)))
	pl.acks = nil
	return first
}

// sent runs write, a store operation answered at once (a put, a purge, a
// delete), unless ctx already ended; once sent, its answer is awaited
// even when ctx ends meanwhile — within the JetStream request timeout:
// write gets a context without ctx's cancellation or deadline — so that,
// as with pipeline.settle, none of a stopped pass's writes is still in
// flight when Run gives the lease up or the next pass starts (a purge of
// an index key landing after the new holder's put of it).
func sent(ctx context.Context, write func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return write(context.WithoutCancel(ctx))
}

// settle waits, at most settleWait and whatever ctx the writer had, for
// the writes pl sent that no wait saw answered: a pipeline stopped by its
// context or by a failed write leaves none of its writes in flight, so
// that Run, which gives the lease up once the batch returned, never lets
// a standby take over while the stopped projector's writes are still
// being stored (they could land among the new holder's: an inbox item's
// delete after the new holder's put of the same key).
func (pl *pipeline) settle() {
	if len(pl.acks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleWait)
	defer cancel()
	for _, a := range pl.acks {
		select {
		case <-a.Ok():
		case <-a.Err():
		case <-ctx.Done():
			pl.acks = nil
			return
		}
	}
	pl.acks = nil
}
