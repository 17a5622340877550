package projector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/unanswered"
	"github.com/weftrun/weft/projections"
)

// Progress receives rebuild progress: phase "fold" (done and total are stream
// sequences) or "write" (done and total are runs). It is called at most
// every 1% and once at the end of each phase.
type Progress func(phase string, done, total uint64)

var errCaughtUp = errors.New("caught up")

// Rebuild recomputes every read model from sequence 1: it folds the whole
// log in memory up to the stream's last sequence at the start, writes each
// run's view, summary and inbox items, deletes every key that is not part of
// the result, and moves the checkpoint to that sequence. It writes the bytes
// incremental projection writes (the randomized tests prove it). Every
// index entry the rebuilt views imply is put, changed or not, so a rebuild
// restores a weft_index lost or left incomplete while the views were kept.
//
// Rebuild may run while projectors run: a view a live projector already
// moved past the rebuilt version is left as it is, writes use the same
// compare-and-set, and the checkpoint never moves backwards.
func Rebuild(ctx context.Context, js jetstream.JetStream, log *eventlog.Log, progress Progress, opts ...Option) (Checkpoint, error) {
	p, err := New(ctx, js, log, opts...)
	if err != nil {
		return Checkpoint{}, err
	}
	if progress == nil {
		progress = func(string, uint64, uint64) {}
	}
	info, err := p.stream.Info(ctx)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("projector: rebuild: stream info: %w", err)
	}
	last := info.State.LastSeq

	views := map[string]projections.RunView{}
	if last > 0 {
		step := max(last/100, 1)
		fctx, cancel := context.WithCancelCause(ctx)
		// A subscription that stops delivering (its consumer lost across
		// a server restart) ends the rebuild instead of holding it.
		after := p.stalls()
		quiet := time.AfterFunc(after, func() {
			cancel(fmt.Errorf("%w: no message of the log for %s while folding it", errStalled, after))
		})
		err = log.Subscribe(fctx, 1, func(se eventlog.StreamEvent) error {
			quiet.Reset(after)
			if p.onFeed != nil {
				p.onFeed(fctx, se)
			}
			// Nothing is folded once the rebuild's context ended: the
			// messages the subscription still holds would otherwise race
			// the stop to the log's end and turn a stalled or cancelled
			// rebuild into a success.
			if fctx.Err() != nil {
				return context.Cause(fctx)
			}
			switch {
			case se.Poison != nil && se.Run == "":
			case se.Poison != nil:
				if old := views[se.Run]; old.Quarantine == nil {
					views[se.Run] = projections.Quarantined(old, se.Run, se.Poison.Seq, se.Poison.Reason).View
				}
			case se.Void != nil:
				// A repair: the run folded again from the log.
				c, err := p.fold(fctx, projections.RunView{}, se.Run, 0)
				if err != nil {
					return err
				}
				if c.View.Run == "" {
					delete(views, se.Run) // the run held nothing else
				} else {
					views[se.Run] = c.View
				}
			case views[se.Run].Quarantine != nil:
			default:
				r, err := Recorded(se.Envelope)
				if err != nil {
					return err
				}
				views[r.Run] = projections.Apply(views[r.Run], r)
			}
			if se.Last && (se.Seq%step == 0 || se.Seq >= last) {
				progress("fold", min(se.Seq, last), last)
			}
			if se.Last && se.Seq >= last {
				return errCaughtUp
			}
			return nil
		})
		quiet.Stop()
		if cause := context.Cause(fctx); !errors.Is(err, errCaughtUp) && errors.Is(cause, errStalled) {
			err = cause
		}
		cancel(nil)
		if err != nil && !errors.Is(err, errCaughtUp) {
			return Checkpoint{}, fmt.Errorf("projector: rebuild: %w", err)
		}
		if ctx.Err() != nil {
			return Checkpoint{}, ctx.Err()
		}
	}
	progress("fold", last, last)

	runs := make([]string, 0, len(views))
	for run := range views {
		runs = append(runs, run)
	}
	// In order of last change (then run id), as a live projector writes
	// them: a window's index entries land side by side in the index's
	// stream, so a page reads few of its blocks.
	slices.SortFunc(runs, func(a, b string) int {
		if c := views[a].Updated.Compare(views[b].Updated); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	keep := map[string]map[string]bool{}
	for _, b := range Buckets() {
		keep[b] = map[string]bool{}
	}
	total := uint64(len(runs))
	step := max(total/100, 1)
	stored := make([]projections.Change, 0, len(runs))
	for i, run := range runs {
		v := views[run]
		var sv projections.RunView
		err := patient(ctx, func() (err error) { sv, err = p.rewrite(ctx, v); return err })
		if err != nil {
			return Checkpoint{}, err
		}
		stored = append(stored, derivedOf(sv))
		keep[BucketViews][run] = true
		keep[BucketRuns][run] = true
		if n := uint64(i + 1); n%step == 0 || n == total {
			progress("write", n, total)
		}
	}
	// Keys to keep in the inboxes are whatever the views now stored hold
	// (a live projector may have moved some ahead of the rebuilt versions).
	for _, b := range []struct {
		name string
		kv   jetstream.KeyValue
	}{{BucketViews, p.views}, {BucketRuns, p.runs}, {BucketApprovals, p.approvals}, {BucketUncertain, p.uncertain}, {BucketQuestions, p.questions}} {
		if err := p.sweep(ctx, b.kv, keep[b.name], b.name); err != nil {
			return Checkpoint{}, err
		}
	}
	if err := p.sweepIndex(ctx, stored); err != nil {
		return Checkpoint{}, err
	}
	if err := writeIndexMarker(ctx, p.state); err != nil {
		return Checkpoint{}, err
	}
	cp, err := p.Checkpoint(ctx)
	if err != nil {
		return Checkpoint{}, err
	}
	if cp.Seq < last {
		if err := writeCheckpoint(ctx, p.state, last); err != nil {
			return Checkpoint{}, err
		}
		cp = Checkpoint{Schema: 1, Seq: last}
	}
	return cp, nil
}

// rebuildAttempts bounds the attempts patient makes of one operation: with
// its pauses (0.1 s doubling to 5 s) and the store's own 5 s timeout per
// attempt, about a minute of a store that does not answer.
const rebuildAttempts = 8

// patient runs op again while it fails only because the store did not
// answer in time (internal/unanswered), up to rebuildAttempts, pausing
// between attempts. A rebuild of a large log makes millions of writes,
// and one the server did not answer in time under load is no reason to
// throw away the twenty minutes of work before it (the 1M-run scale test
// lost its rebuild to one timed-out write). Every op it runs can be made
// again: a view is read back and compared-and-set (a write that landed
// without its answer is found and written over with the same bytes), index
// entries are put or purged, keys deleted.
func patient(ctx context.Context, op func() error) error {
	b := backoff.New(100*time.Millisecond, 5*time.Second)
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || ctx.Err() != nil || !unanswered.Is(err) || attempt == rebuildAttempts {
			return err
		}
		if b.Wait(ctx) != nil {
			return err
		}
	}
}

// rewrite stores a rebuilt view and what derives from it, unless the stored
// view is already newer; it returns the view stored.
func (p *Projector) rewrite(ctx context.Context, v projections.RunView) (projections.RunView, error) {
	for range 16 {
		old, rev, err := p.readView(ctx, v.Run)
		if err != nil {
			return projections.RunView{}, err
		}
		if old.Version > v.Version {
			return old, nil
		}
		c := projections.Derive(v)
		ok, err := p.store(ctx, old, c, rev, putEntries)
		if err == nil && ok && p.afterRewrite != nil {
			err = p.afterRewrite(v.Run)
		}
		if err != nil {
			return projections.RunView{}, err
		}
		if ok {
			return v, nil
		}
	}
	return projections.RunView{}, fmt.Errorf("projector: rebuild %s: view kept changing", v.Run)
}

// sweepIndex purges every key of BucketIndex that the stored views do not
// account for: an entry whose run's view (read again, in case a live
// projector moved it since) does not hold it, and a directory node that
// leads to no entry kept.
func (p *Projector) sweepIndex(ctx context.Context, stored []projections.Change) error {
	keys, err := listKeys(ctx, p.index.kv)
	if err != nil {
		return err
	}
	slices.Sort(keys)
	keep := map[string]bool{}
	var kept []entry
	for _, c := range stored {
		for _, e := range entries(c) {
			keep[e.key] = true
			kept = append(kept, e)
		}
	}
	reread := map[string]bool{}
	for _, k := range keys {
		run, ok := entryRun(k)
		if !ok || keep[k] || reread[run] {
			continue
		}
		reread[run] = true
		var v projections.RunView
		err := patient(ctx, func() (err error) { v, _, err = p.readView(ctx, run); return err })
		if err != nil {
			return err
		}
		for _, e := range entries(derivedOf(v)) {
			keep[e.key] = true
			kept = append(kept, e)
		}
	}
	for _, e := range kept {
		for _, c := range e.chains() {
			for _, n := range nodes(e.index, e.window, c.node) {
				keep[n] = true
			}
		}
	}
	for _, k := range keys {
		if !keep[k] {
			if err := patient(ctx, func() error { return p.index.purge(ctx, k) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// entryRun returns the run of an entry key of BucketIndex (false for a
// directory node or a key of no index).
func entryRun(key string) (string, bool) {
	t := strings.Split(key, ".")
	if len(t) < 3 || t[1] != "e" {
		return "", false
	}
	switch {
	case t[0] == IndexRuns && len(t) == 6: // runs.e.<window>.<status>.<agent>.<run>
		return t[5], true
	case len(t) == 6: // <inbox>.e.<window>.<agent>.<run>.<action key>
		return t[4], true
	}
	return "", false
}

// sweep deletes the keys of kv that no stored view accounts for. For the
// inboxes that is every item not listed by its run's stored view.
func (p *Projector) sweep(ctx context.Context, kv jetstream.KeyValue, keep map[string]bool, bucket string) error {
	keys, err := listKeys(ctx, kv)
	if err != nil {
		return err
	}
	if bucket == BucketApprovals || bucket == BucketUncertain || bucket == BucketQuestions {
		keep = map[string]bool{}
		runs := map[string]bool{}
		for _, k := range keys {
			run, _, _ := cutDot(k)
			runs[run] = true
		}
		for run := range runs {
			var v projections.RunView
			err := patient(ctx, func() (err error) { v, _, err = p.readView(ctx, run); return err })
			if err != nil {
				return err
			}
			switch bucket {
			case BucketApprovals:
				for _, it := range projections.ApprovalItems(v) {
					keep[projections.ItemKey(it.Run, it.Action)] = true
				}
			case BucketUncertain:
				for _, it := range projections.UncertainItems(v) {
					keep[projections.ItemKey(it.Run, it.Action)] = true
				}
			default:
				for _, it := range projections.QuestionItems(v) {
					keep[projections.ItemKey(it.Run, it.Action)] = true
				}
			}
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !keep[k] {
			if err := patient(ctx, func() error { return del(ctx, kv, k) }); err != nil {
				return err
			}
		}
	}
	return nil
}

func cutDot(k string) (string, string, bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '.' {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}
