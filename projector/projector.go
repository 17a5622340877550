// Package projector keeps Weft's read models in NATS KV up to date: it
// consumes the event log (WEFT_EVENTS) in log order from a checkpoint, folds
// each event with package projections and stores the run view, the run
// summary and the inbox items; it can rebuild everything from sequence 1;
// and it answers queries as the NATS micro service "weft-query" under
// weft.api.query.* (see docs/protocol/50-queries.md).
//
// # Buckets and keys
//
//	weft_views            <run>                  projections.RunView
//	weft_runs             <run>                  projections.Summary
//	weft_inbox_approvals  <run>.<escaped action> projections.ApprovalItem
//	weft_inbox_uncertain  <run>.<escaped action> projections.UncertainItem
//	weft_open_questions   <run>.<escaped action> projections.QuestionItem
//	weft_index            <index>.e.… <index>.d.…  order indexes (index.go)
//	weft_projector        checkpoint             {"schema":1,"seq":N}
//	weft_projector        index                  {"schema":1,"version":N} (IndexMarker)
//	weft_projector_lease  holder                 the id of the projector that writes (max age Lease)
//
// The escaped action is projections.ItemKey: "3/call_1" is "3=2Fcall_1".
// weft_index holds one time-ordered index per query (the run list and the
// three inboxes): an entry per summary or item under its time window and
// filter tokens, and a directory trie of the windows; the query service
// pages from it (docs/adr/0020).
//
// # Guarantees
//
// A view is written with a compare-and-set on its KV revision and only moves
// forward (projections.Apply ignores an event that is not the view's next
// one), so a re-delivered event changes nothing. One projector writes at a
// time: Run holds the projector lease (BucketLease) and a second
// projector stands by until it is released or expires (lease.go), so the
// index writes of one run never interleave. The checkpoint is the stream sequence of
// the last message whose events are all stored; Run resumes after it. The
// messages delivered while the projector writes are written as one batch,
// their writes published together and their acknowledgements awaited at
// once, the checkpoint last (batch.go, docs/adr/0028-projector-batches.md). When a
// view misses events (its bucket was purged, or a rebuild ran up to an older
// sequence) the projector refolds the run from the log; when a view's last
// event is delivered again (a stop between the view and its derived writes)
// it rewrites the summary and inbox items.
//
// No wait on the server is without a bound: a read waits at most the
// JetStream request timeout, or watchIdle without a value through a KV
// watch, and a write ackWait for its acknowledgement; a failed one ends
// Run, and RunAll resumes from the checkpoint. A watchdog ends Run too
// (errStalled, logged as a warning) when the log is ahead of what was
// projected and nothing moved (no message delivered, no write answered)
// for StallAfter: the subscription to the log stopped delivering, which no deadline of the projector's own
// bounds (docs/semantics.md §8: work not recorded is derived again from
// the log, never dropped).
//
// A message no reader can fold (eventlog.PoisonError) quarantines its run
// alone: the run's view is stored as folded before it, with status
// quarantined and the message's sequence and reason (its inbox items
// withdrawn), the checkpoint moves past it, and every other run goes on.
// Nothing after it is folded for that run until a repair's void record
// (eventlog.Void, `weft repair drop`) makes the projector read the run
// again (docs/adr/0011). Rebuild folds the
// whole log in memory and writes the same bytes incremental projection
// writes.
package projector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/provision"
)

// The KV buckets of the read models.
const (
	// BucketViews holds each run's projections.RunView under the run id.
	BucketViews = protocol.ViewsBucket
	// BucketRuns holds each run's projections.Summary under the run id.
	BucketRuns = protocol.RunsBucket
	// BucketApprovals holds the pending approval requests under
	// projections.ItemKey.
	BucketApprovals = protocol.ApprovalsBucket
	// BucketUncertain holds the uncertain effects under projections.ItemKey.
	BucketUncertain = protocol.UncertainBucket
	// BucketQuestions holds the open questions (actions reconciled as
	// unconfirmed, not resolved yet) under projections.ItemKey.
	BucketQuestions = protocol.QuestionsBucket
	// BucketIndex (index.go) holds the order indexes of the run list and
	// the inboxes.

	// BucketState holds the projector's checkpoint.
	BucketState = protocol.ProjectorBucket
	// KeyCheckpoint is the checkpoint's key in BucketState.
	KeyCheckpoint = "checkpoint"
	// KeyIndex is the index marker's key in BucketState (IndexMarker):
	// the version of the order indexes BucketIndex holds for the stored
	// views. Run builds the index from the stored views when it is
	// missing or older than IndexVersion; the query service answers lists
	// and inboxes only once it is there (or while no view is stored).
	KeyIndex = "index"
)

// IndexVersion is the version of the order indexes' keys and values
// (docs/protocol/50-queries.md "Order indexes") this projector writes;
// version 1 is the first. A store upgraded from before weft_index has
// no marker.
const IndexVersion = 1

// IndexMarker is the stored index marker (KeyIndex): BucketIndex holds
// exactly the entries of the stored views, in the keys of Version.
type IndexMarker struct {
	Schema  int `json:"schema"`
	Version int `json:"version"`
}

// Buckets returns the read-model buckets (not the state bucket), in order,
// a fresh slice on each call.
func Buckets() []string {
	return []string{BucketViews, BucketRuns, BucketApprovals, BucketUncertain, BucketQuestions, BucketIndex}
}

// Assets declares the projector's KV buckets for provision.Ensure.
func Assets() []provision.Asset {
	var out []provision.Asset
	for _, b := range append(Buckets(), BucketState) {
		out = append(out, provision.KV(jetstream.KeyValueConfig{
			Bucket: b, History: 1, Storage: jetstream.FileStorage,
			Description: "Weft read model (see docs/protocol/50-queries.md)",
		}))
	}
	out = append(out, provision.KV(jetstream.KeyValueConfig{
		Bucket: BucketLease, History: 1, TTL: Lease, Storage: jetstream.FileStorage,
		Description: "Weft projector lease: the one projector that writes the read models (max age = lease)",
	}))
	return out
}

// Checkpoint is the stored checkpoint: the stream sequence of the last log
// message whose events are all projected.
type Checkpoint struct {
	Schema int    `json:"schema"`
	Seq    uint64 `json:"seq"`
}

// Projector maintains the read models. Create it with New; run it with Run.
type Projector struct {
	js        jetstream.JetStream
	log       *eventlog.Log
	stream    jetstream.Stream
	views     jetstream.KeyValue
	runs      jetstream.KeyValue
	approvals jetstream.KeyValue
	uncertain jetstream.KeyValue
	questions jetstream.KeyValue
	state     jetstream.KeyValue
	lease     *lease
	index     *indexWriter
	reader    *indexReader
	noIndex   bool
	between   func()
	logger    *slog.Logger
	// afterRewrite, set by tests only (export_test.go), is called after a
	// rebuild stored a run's view: an error it returns is the store's.
	afterRewrite func(run string) error
	// beforeRead, set by tests only (export_test.go), is called before
	// each direct get request of the projector's reader.
	beforeRead func(bucket string)
	// onFeed, set by tests only (export_test.go), is called with each
	// event the log subscription delivers, before it is fed to the
	// batches; ctx ends with the follow.
	onFeed func(ctx context.Context, se eventlog.StreamEvent)
	// stallAfter, set by tests only, replaces the constant StallAfter.
	stallAfter time.Duration

	delivered atomic.Uint64
	applied   atomic.Uint64
	seq       atomic.Uint64
}

// Option configures a Projector.
type Option func(*Projector)

// WithLogger logs through l (default: discard).
func WithLogger(l *slog.Logger) Option { return func(p *Projector) { p.logger = l } }

// New binds a projector to the buckets, which must exist (provision them with
// Assets).
func New(ctx context.Context, js jetstream.JetStream, log *eventlog.Log, opts ...Option) (*Projector, error) {
	js, err := ownJS(js)
	if err != nil {
		return nil, err
	}
	p := &Projector{js: js, log: log, logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(p)
	}
	if p.stream, err = js.Stream(ctx, eventlog.Stream); err != nil {
		return nil, fmt.Errorf("projector: stream %s: %w", eventlog.Stream, err)
	}
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{BucketViews, &p.views}, {BucketRuns, &p.runs}, {BucketApprovals, &p.approvals}, {BucketUncertain, &p.uncertain}, {BucketQuestions, &p.questions}, {BucketState, &p.state}} {
		if *b.kv, err = js.KeyValue(ctx, b.name); err != nil {
			return nil, fmt.Errorf("projector: bucket %s: %w", b.name, err)
		}
	}
	lkv, err := js.KeyValue(ctx, BucketLease)
	if err != nil {
		return nil, fmt.Errorf("projector: bucket %s: %w", BucketLease, err)
	}
	p.lease = newLease(lkv)
	if p.index, err = newIndexWriter(ctx, js); err != nil {
		return nil, err
	}
	p.index.between = p.between
	p.reader = &indexReader{nc: js.Conn(), js: js, beforeRequest: p.beforeRead}
	return p, nil
}

// Delivered counts the events this projector received from the log since it
// was created; Applied those that changed a view.
func (p *Projector) Delivered() uint64 { return p.delivered.Load() }

// Applied counts the events that changed a view.
func (p *Projector) Applied() uint64 { return p.applied.Load() }

// IndexWrites counts the operations this projector made on BucketIndex
// (puts, purges and existence checks): the cost of the order indexes.
func (p *Projector) IndexWrites() uint64 { return p.index.writes }

// Seq is the stream sequence of the last message this projector finished.
func (p *Projector) Seq() uint64 { return p.seq.Load() }

// Checkpoint reads the stored checkpoint (zero when none).
func (p *Projector) Checkpoint(ctx context.Context) (Checkpoint, error) {
	return readCheckpoint(ctx, p.state)
}

func readCheckpoint(ctx context.Context, kv jetstream.KeyValue) (Checkpoint, error) {
	e, err := kv.Get(ctx, KeyCheckpoint)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Checkpoint{Schema: 1}, nil
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("projector: read checkpoint: %w", err)
	}
	var c Checkpoint
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		return Checkpoint{}, fmt.Errorf("projector: decode checkpoint: %w", err)
	}
	return c, nil
}

func readIndexMarker(ctx context.Context, kv jetstream.KeyValue) (IndexMarker, error) {
	e, err := kv.Get(ctx, KeyIndex)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return IndexMarker{}, nil
	}
	if err != nil {
		return IndexMarker{}, fmt.Errorf("projector: read index marker: %w", err)
	}
	var m IndexMarker
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return IndexMarker{}, fmt.Errorf("projector: decode index marker: %w", err)
	}
	return m, nil
}

func writeIndexMarker(ctx context.Context, kv jetstream.KeyValue) error {
	b, _ := json.Marshal(IndexMarker{Schema: 1, Version: IndexVersion})
	if _, err := kv.Put(ctx, KeyIndex, b); err != nil {
		return fmt.Errorf("projector: write index marker: %w", err)
	}
	return nil
}

// ensureIndex builds the order indexes from the stored views when the
// index marker is missing or of another version (a store upgraded from
// before weft_index, or from an older index version): it puts every
// entry each stored view accounts for, purges the keys of BucketIndex no
// stored view accounts for, and writes the marker. It logs its progress
// (about every 10% of the views). A store with no view gets the marker
// at once.
func (p *Projector) ensureIndex(ctx context.Context) error {
	m, err := readIndexMarker(ctx, p.state)
	if err != nil || m.Version == IndexVersion {
		return err
	}
	st, err := p.views.Status(ctx)
	if err != nil {
		return fmt.Errorf("projector: bucket %s: %w", BucketViews, err)
	}
	total := st.Values()
	if total > 0 {
		p.logger.Warn("projector building the order indexes from the stored views (the index marker is missing or old); lists and inboxes answer unavailable until it is done",
			"views", total, "marker_version", m.Version, "index_version", IndexVersion)
		began := time.Now()
		step := max(total/10, 1)
		var n uint64
		err := initial(ctx, p.views, jetstream.AllKeys, func(e jetstream.KeyValueEntry) error {
			v, err := projections.DecodeView(e.Value())
			if err != nil {
				return fmt.Errorf("projector: decode view %s: %w", e.Key(), err)
			}
			if err := p.index.apply(ctx, nil, entries(derivedOf(v)), putEntries); err != nil {
				return err
			}
			if n++; n%step == 0 {
				p.logger.Info("projector index progress", "views", n, "of", total)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("projector: read %s: %w", BucketViews, err)
		}
		if err := p.sweepIndex(ctx, nil); err != nil {
			return err
		}
		p.logger.Info("projector index built", "views", n, "index_writes", p.index.writes, "took", time.Since(began).Round(time.Millisecond))
	}
	return writeIndexMarker(ctx, p.state)
}

func writeCheckpoint(ctx context.Context, kv jetstream.KeyValue, seq uint64) error {
	b, _ := json.Marshal(Checkpoint{Schema: 1, Seq: seq})
	if _, err := kv.Put(ctx, KeyCheckpoint, b); err != nil {
		return fmt.Errorf("projector: write checkpoint %d: %w", seq, err)
	}
	return nil
}

// Run projects the log from the message after the checkpoint, catching up
// and then following it live, until ctx ends (returning nil), a store
// operation fails, or the projector lease is lost.
//
// One projector writes at a time: Run first takes the projector lease
// (BucketLease), standing by while another projector holds it (logged
// once), renews it while it runs, and gives it up when it returns. A
// projector that cannot renew in time stops writing before its lease can
// expire and returns an error (RunAll then stands by again).
func (p *Projector) Run(ctx context.Context) error {
	if err := p.lease.acquire(ctx, func(holder string) {
		p.logger.Info("projector standing by: another projector holds the lease", "holder", holder, "lease", Lease)
	}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	lctx, cancel := context.WithCancelCause(ctx)
	renewing := make(chan struct{})
	go func() { defer close(renewing); p.lease.renew(lctx, cancel) }()
	defer func() {
		// Stop renewing before the release, so that no renewal moves
		// the lease past the revision the release deletes.
		cancel(nil)
		<-renewing
		p.lease.release()
	}()
	err := p.run(lctx)
	if cause := context.Cause(lctx); errors.Is(cause, errLeaseLost) {
		return cause
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// run is Run once the lease is held.
func (p *Projector) run(ctx context.Context) error {
	cp, err := p.Checkpoint(ctx)
	if err != nil {
		return err
	}
	p.seq.Store(cp.Seq)
	p.logger.Info("projector starting", "checkpoint", cp.Seq, "lease_holder", p.lease.id)
	if !p.noIndex {
		if err := p.ensureIndex(ctx); err != nil {
			return err
		}
	}
	err = p.follow(ctx, cp.Seq)
	if errors.Is(err, errLeaseLost) {
		p.logger.Error("projector stopped writing: its lease was not renewed in time")
	}
	return err
}

// ownJS is a JetStream context on js's connection, API prefix (or
// domain) and request timeout for the projector alone: its pipelined
// writes never count against the asynchronous publishes of the context it
// was given (a host gives it the runner's, host/host.go), and an
// acknowledgement a stopped pipeline gave up on (pipeline.settle) is
// dropped after ackWait instead of staying pending for good.
func ownJS(js jetstream.JetStream) (jetstream.JetStream, error) {
	o := js.Options()
	opts := []jetstream.JetStreamOpt{jetstream.WithPublishAsyncTimeout(ackWait), jetstream.WithDefaultTimeout(o.DefaultTimeout)}
	if o.ClientTrace != nil {
		opts = append(opts, jetstream.WithClientTrace(o.ClientTrace))
	}
	var own jetstream.JetStream
	var err error
	switch {
	case o.Domain != "":
		own, err = jetstream.NewWithDomain(js.Conn(), o.Domain, opts...)
	case o.APIPrefix != "":
		own, err = jetstream.NewWithAPIPrefix(js.Conn(), o.APIPrefix, opts...)
	default:
		own, err = jetstream.New(js.Conn(), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("projector: JetStream context: %w", err)
	}
	return own, nil
}

// Recorded turns a stored envelope into the form the folds take.
func Recorded(env events.Envelope) (events.Recorded, error) {
	ev, err := env.Event()
	if err != nil {
		return events.Recorded{}, fmt.Errorf("run %s version %d: %w", env.Run, env.Version, err)
	}
	return events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev}, nil
}

// project folds one event into the stored read models.
func (p *Projector) project(ctx context.Context, env events.Envelope) error {
	r, err := Recorded(env)
	if err != nil {
		return err
	}
	for range 16 {
		old, rev, err := p.readView(ctx, r.Run)
		if err != nil {
			return err
		}
		var c projections.Change
		switch {
		case old.Quarantine != nil:
			// Nothing after the bad message is folded until a repair
			// voids it (its void record re-reads the run).
			return nil
		case r.Version < old.Version:
			return nil // already projected
		case r.Version == old.Version:
			// The last event this view folded, delivered again: the
			// projector may have stopped between the view and what derives
			// from it, so write those again (idempotent).
			return p.repair(ctx, old)
		case r.Version == old.Version+1:
			c = projections.Step(old, r)
		default:
			// The view misses events: refold the run from the log up to r.
			c, err = p.refold(ctx, old, r)
			if err != nil {
				return err
			}
		}
		ok, err := p.store(ctx, old, c, rev, putChanged)
		if err != nil {
			return err
		}
		if ok {
			p.applied.Add(1)
			return nil
		}
		// Another writer changed the view: read it again.
	}
	return fmt.Errorf("projector: run %s: view kept changing under us", r.Run)
}

func (p *Projector) readView(ctx context.Context, run string) (projections.RunView, uint64, error) {
	e, err := p.views.Get(ctx, run)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return projections.RunView{}, 0, nil
	}
	if err != nil {
		return projections.RunView{}, 0, fmt.Errorf("projector: read view %s: %w", run, err)
	}
	v, err := projections.DecodeView(e.Value())
	if err != nil {
		return projections.RunView{}, 0, fmt.Errorf("projector: decode view %s: %w", run, err)
	}
	return v, e.Revision(), nil
}

func (p *Projector) refold(ctx context.Context, old projections.RunView, r events.Recorded) (projections.Change, error) {
	c, err := p.fold(ctx, old, r.Run, r.Version)
	if err == nil {
		p.logger.Warn("projector refolded a run with missing events", "run", r.Run, "had", old.Version, "now", c.View.Version)
	}
	return c, err
}

// fold reads run from the log and folds it up to version upTo (0: all of
// it) into what replaces old: the view and its items, with old's items
// dropped. A run the log quarantines yields its quarantined view (the
// events before the bad message).
func (p *Projector) fold(ctx context.Context, old projections.RunView, run string, upTo uint64) (projections.Change, error) {
	envs, _, err := p.log.Load(ctx, run)
	var poison *eventlog.PoisonError
	if err != nil && !errors.As(err, &poison) {
		return projections.Change{}, fmt.Errorf("projector: refold %s: %w", run, err)
	}
	var v projections.RunView
	for _, env := range envs {
		if upTo > 0 && env.Version > upTo {
			break
		}
		rr, err := Recorded(env)
		if err != nil {
			return projections.Change{}, err
		}
		v = projections.Apply(v, rr)
	}
	var c projections.Change
	if poison != nil && (upTo == 0 || v.Version < upTo) {
		p.logger.Error("run quarantined: a message of its log cannot be folded (weft repair show)", "run", run, "seq", poison.Seq, "reason", poison.Reason)
		c = projections.Quarantined(v, run, poison.Seq, poison.Reason)
	} else {
		c = projections.Derive(v)
	}
	c.DropApprovals, c.DropUncertain, c.DropQuestions = nil, nil, nil
	for _, it := range projections.ApprovalItems(old) {
		c.DropApprovals = append(c.DropApprovals, projections.ItemKey(it.Run, it.Action))
	}
	for _, it := range projections.UncertainItems(old) {
		c.DropUncertain = append(c.DropUncertain, projections.ItemKey(it.Run, it.Action))
	}
	for _, it := range projections.QuestionItems(old) {
		c.DropQuestions = append(c.DropQuestions, projections.ItemKey(it.Run, it.Action))
	}
	return c, nil
}

// quarantine stores the quarantine of a run whose message at q.Seq no
// reader can fold: its view as folded before that message, marked
// quarantined, and its inbox items withdrawn. A view quarantined already
// by an earlier message stays as it is.
func (p *Projector) quarantine(ctx context.Context, q *eventlog.PoisonError) error {
	for range 16 {
		old, rev, err := p.readView(ctx, q.Run)
		if err != nil {
			return err
		}
		if old.Quarantine != nil && old.Quarantine.Seq <= q.Seq {
			return nil
		}
		p.logger.Error("run quarantined: a message of its log cannot be folded (weft repair show)", "run", q.Run, "seq", q.Seq, "reason", q.Reason)
		ok, err := p.store(ctx, old, projections.Quarantined(old, q.Run, q.Seq, q.Reason), rev, putChanged)
		if err != nil {
			return err
		}
		if ok {
			p.applied.Add(1)
			return nil
		}
	}
	return fmt.Errorf("projector: run %s: view kept changing under us", q.Run)
}

// reread replaces run's view with the one folded from its whole history
// (after a repair voided a message: the run is quarantined no more, or by
// a later message).
func (p *Projector) reread(ctx context.Context, run string, upTo uint64) error {
	for range 16 {
		old, rev, err := p.readView(ctx, run)
		if err != nil {
			return err
		}
		c, err := p.fold(ctx, old, run, upTo)
		if err != nil {
			return err
		}
		if c.View.Run == "" {
			// The run held nothing but the voided message: no view.
			if old.Run != "" {
				if err := sent(ctx, func(ctx context.Context) error { return p.views.Delete(ctx, run, jetstream.LastRevision(rev)) }); err != nil {
					if isWrongSequence(err) {
						continue
					}
					return fmt.Errorf("projector: delete view %s: %w", run, err)
				}
			}
			// Whether or not the view was still there (a stop after its
			// delete), remove what the summary and inbox items still
			// stored account for: the void is idempotent.
			return p.forget(ctx, run, entries(derivedOf(old)))
		}
		ok, err := p.store(ctx, old, c, rev, putChanged)
		if err != nil {
			return err
		}
		if ok {
			p.applied.Add(1)
			return nil
		}
	}
	return fmt.Errorf("projector: run %s: view kept changing under us", run)
}

// forget removes what derives from run's view once the view is gone: the
// index entries of before and of what weft_runs and the inboxes still
// hold for run, then those keys.
func (p *Projector) forget(ctx context.Context, run string, before []entry) error {
	held, err := p.stored(ctx, run)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var all []entry
	for _, e := range append(before, held...) {
		if !seen[e.key] {
			seen[e.key] = true
			all = append(all, e)
		}
	}
	if !p.noIndex {
		if err := p.index.apply(ctx, all, nil, putChanged); err != nil {
			return err
		}
	}
	for _, kv := range []jetstream.KeyValue{p.approvals, p.uncertain, p.questions} {
		keys, err := stale[string](ctx, p.reader, kv.Bucket(), run, nil, nil)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := del(ctx, kv, k); err != nil {
				return err
			}
		}
	}
	return del(ctx, p.runs, run)
}

// store writes a change of the view old: the view by compare-and-set on
// rev (false when another writer won), then the order indexes, the summary
// and the inbox items; mode says which index entries are put (putEntries
// for a rebuild).
func (p *Projector) store(ctx context.Context, old projections.RunView, c projections.Change, rev uint64, mode putMode) (bool, error) {
	b, err := c.View.Encode()
	if err != nil {
		return false, err
	}
	err = sent(ctx, func(ctx context.Context) (err error) {
		if rev == 0 {
			_, err = p.views.Create(ctx, c.View.Run, b)
		} else {
			_, err = p.views.Update(ctx, c.View.Run, b, rev)
		}
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || isWrongSequence(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("projector: write view %s: %w", c.View.Run, err)
	}
	before, err := p.before(ctx, c.View.Run, old, rev)
	if err != nil {
		return true, err
	}
	return true, p.storeDerived(ctx, before, c, mode)
}

// before returns the index entries the stored view old of run (of
// revision rev) accounts for, to move from. When no view was stored (a new
// run, or one whose view vanished and is refolded) the summary weft_runs
// may still hold names the list entry to move.
func (p *Projector) before(ctx context.Context, run string, old projections.RunView, rev uint64) ([]entry, error) {
	before := entries(derivedOf(old))
	if rev != 0 || p.noIndex {
		return before, nil
	}
	e, err := p.runs.Get(ctx, run)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("projector: read summary %s: %w", run, err)
	default:
		var sum projections.Summary
		if json.Unmarshal(e.Value(), &sum) == nil && sum.Run == run {
			before = entries(projections.Change{Summary: sum})
		}
	}
	return before, nil
}

// storeDerived writes what derives from a stored view: the index moves
// from the entries before held (those of the previous view) to c's, then
// the summary and the inbox items are written. The index removals come
// first and each waits for its answer: a stop before the summary is
// stored leaves the summary of before in weft_runs, from which repair
// finds what to undo. The index puts, the summary and the items are then
// published together (publishDerived) and their acknowledgements awaited
// at once; a stop among them is repaired the same way (repair puts every
// entry of the view again).
func (p *Projector) storeDerived(ctx context.Context, before []entry, c projections.Change, mode putMode) error {
	if !p.noIndex {
		if err := p.index.removeGone(ctx, before, entries(c)); err != nil {
			return err
		}
		p.index.pause()
	}
	pl := p.index.newPipeline()
	defer pl.settle()
	err := p.publishDerived(ctx, pl, before, c, mode)
	if err == nil {
		err = pl.wait(ctx, nil)
	}
	if err != nil {
		clear(p.index.known) // a node may be missing
	}
	return err
}

// publishDerived publishes on pl the second half of storeDerived: the
// index entries of c that mode asks for (with their directory nodes), the
// summary, the deletes of the dropped items and the puts of c's items.
func (p *Projector) publishDerived(ctx context.Context, pl *pipeline, before []entry, c projections.Change, mode putMode) error {
	if !p.noIndex {
		if err := p.index.put(ctx, pl, before, entries(c), mode); err != nil {
			return err
		}
	}
	if err := publishJSON(ctx, pl, BucketRuns, c.Summary.Run, c.Summary); err != nil {
		return err
	}
	for _, d := range []struct {
		bucket string
		keys   []string
	}{{BucketApprovals, c.DropApprovals}, {BucketUncertain, c.DropUncertain}, {BucketQuestions, c.DropQuestions}} {
		for _, k := range d.keys {
			m := &nats.Msg{Subject: "$KV." + d.bucket + "." + k, Header: nats.Header{}}
			m.Header.Set(kvOperation, kvDelete)
			if err := pl.publish(ctx, m); err != nil {
				return err
			}
		}
	}
	for _, it := range c.Approvals {
		if err := publishJSON(ctx, pl, BucketApprovals, projections.ItemKey(it.Run, it.Action), it); err != nil {
			return err
		}
	}
	for _, it := range c.Uncertain {
		if err := publishJSON(ctx, pl, BucketUncertain, projections.ItemKey(it.Run, it.Action), it); err != nil {
			return err
		}
	}
	for _, it := range c.Questions {
		if err := publishJSON(ctx, pl, BucketQuestions, projections.ItemKey(it.Run, it.Action), it); err != nil {
			return err
		}
	}
	return nil
}

// The header a KV delete carries (as jetstream.KeyValue's Delete writes
// it): readers take the key as deleted.
const (
	kvOperation = "KV-Operation"
	kvDelete    = "DEL"
)

func publishJSON[T any](ctx context.Context, pl *pipeline, bucket, key string, v T) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return pl.publish(ctx, &nats.Msg{Subject: "$KV." + bucket + "." + key, Data: b})
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

func del(ctx context.Context, kv jetstream.KeyValue, key string) error {
	if err := sent(ctx, func(ctx context.Context) error { return kv.Delete(ctx, key) }); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("projector: delete %s %s: %w", kv.Bucket(), key, err)
	}
	return nil
}

// RunAll runs a projector and the query service on nc until ctx ends: what
// cmd/projector and `weft dev` run. The buckets must exist (Assets); while
// they cannot be bound (missing, or the store does not answer) it tries
// again after the same pauses as a failed pass, logging each failure. A
// projector that fails (the store did not answer) resumes from its
// checkpoint after a pause: a second, doubling while it keeps failing
// without progress, up to 16 s.
func RunAll(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *eventlog.Log, logger *slog.Logger) error {
	return runAll(ctx, nc, js, log, logger, backoff.Sleep)
}

// The pause before a failed projector resumes (RunAll).
const (
	restartFirst = time.Second
	restartLimit = 16 * time.Second
)

// runAll is RunAll waiting its pauses with pause (backoff.Sleep; a test's
// records them).
func runAll(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, log *eventlog.Log, logger *slog.Logger, pause func(context.Context, time.Duration) error) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Binding to the buckets and starting the query service are retried
	// like a failed pass: a projector started while its cluster has no
	// stream leader (a server restarting, an election after a fault) waits
	// for it instead of exiting, so a host does not stop with it.
	back := backoff.New(restartFirst, restartLimit)
	var (
		p   *Projector
		svc *Service
	)
	for {
		var err error
		if p == nil {
			p, err = New(ctx, js, log, WithLogger(logger))
		}
		if err == nil {
			svc, err = Serve(ctx, nc, js, log, WithServiceLogger(logger))
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		d := back.Next()
		logger.Error("projector could not start; trying again", "err", err, "pause", d)
		if pause(ctx, d) != nil {
			return nil
		}
	}
	defer svc.Stop()
	return p.supervise(ctx, pause)
}

// supervise runs p until ctx ends, resuming it from its checkpoint after
// a pause (waited with pause) whenever it stops on an error: RunAll's
// loop.
func (p *Projector) supervise(ctx context.Context, pause func(context.Context, time.Duration) error) error {
	back := backoff.New(restartFirst, restartLimit)
	last := p.Seq()
	for {
		err := p.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if seq := p.Seq(); seq != last {
			// It projected something since the last failure: this one
			// is a new failure, paused for as briefly as the first.
			back.Reset()
			last = seq
		}
		// A store or log error: resume from the checkpoint after a pause.
		d := back.Next()
		p.logger.Error("projector stopped; resuming from the checkpoint", "err", err, "pause", d)
		if pause(ctx, d) != nil {
			return nil
		}
	}
}

// repair rewrites what derives from a stored view: its summary and inbox
// items, deleting the run's inbox keys the view no longer accounts for.
func (p *Projector) repair(ctx context.Context, v projections.RunView) error {
	c := projections.Derive(v)
	c.Applied = false
	var err error
	if c.DropApprovals, err = stale(ctx, p.reader, BucketApprovals, v.Run, c.Approvals, func(it projections.ApprovalItem) string { return projections.ItemKey(it.Run, it.Action) }); err != nil {
		return err
	}
	if c.DropUncertain, err = stale(ctx, p.reader, BucketUncertain, v.Run, c.Uncertain, func(it projections.UncertainItem) string { return projections.ItemKey(it.Run, it.Action) }); err != nil {
		return err
	}
	if c.DropQuestions, err = stale(ctx, p.reader, BucketQuestions, v.Run, c.Questions, func(it projections.QuestionItem) string { return projections.ItemKey(it.Run, it.Action) }); err != nil {
		return err
	}
	before, err := p.stored(ctx, v.Run)
	if err != nil {
		return err
	}
	return p.storeDerived(ctx, before, c, putAll)
}

// stored returns the index entries of what weft_runs and the inboxes hold
// for run: after a stop between writes, what the index may still hold.
func (p *Projector) stored(ctx context.Context, run string) ([]entry, error) {
	var c projections.Change
	e, err := p.runs.Get(ctx, run)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, fmt.Errorf("projector: read summary %s: %w", run, err)
	default:
		if err := json.Unmarshal(e.Value(), &c.Summary); err != nil {
			return nil, fmt.Errorf("projector: decode summary %s: %w", run, err)
		}
	}
	if err := storedItems(ctx, p.reader, BucketApprovals, run, &c.Approvals); err != nil {
		return nil, err
	}
	if err := storedItems(ctx, p.reader, BucketUncertain, run, &c.Uncertain); err != nil {
		return nil, err
	}
	if err := storedItems(ctx, p.reader, BucketQuestions, run, &c.Questions); err != nil {
		return nil, err
	}
	return entries(c), nil
}

func storedItems[T any](ctx context.Context, r *indexReader, bucket, run string, out *[]T) error {
	msgs, err := r.last(ctx, bucket, []string{run + ".>"})
	if err != nil {
		return fmt.Errorf("projector: read %s %s: %w", bucket, run, err)
	}
	for _, m := range msgs {
		var it T
		if json.Unmarshal(m.value, &it) == nil {
			*out = append(*out, it)
		}
	}
	return nil
}

// stale lists the keys of run's items in bucket that are not among items.
func stale[T any](ctx context.Context, r *indexReader, bucket, run string, items []T, key func(T) string) ([]string, error) {
	msgs, err := r.last(ctx, bucket, []string{run + ".>"})
	if err != nil {
		return nil, fmt.Errorf("projector: list %s %s: %w", bucket, run, err)
	}
	var out []string
	for _, m := range msgs {
		if !slices.ContainsFunc(items, func(it T) bool { return key(it) == m.key }) {
			out = append(out, m.key)
		}
	}
	slices.Sort(out)
	return out, nil
}
