package ownership

// Releases and scans (docs/adr/0019-partitions.md): the bookkeeping of the
// table that a release and a scan of the driver entries go through, the
// runs' part of them left to the command loop, which passes it in.

import (
	"context"
	"time"

	"github.com/weftrun/weft/internal/backoff"
)

// HandOff is what the command loop's hand-off of a released partition's
// runs came to (Release).
type HandOff int

const (
	// Stopped means the context ended first. The partition stays
	// releasing, left to the drain.
	Stopped HandOff = iota
	// Postponed means a run of the partition has work without a
	// deadline. The partition is not released yet (not releasing: its
	// runs are served meanwhile).
	Postponed
	// HandedOff means every run of the partition the command loop held
	// was handed off and forgotten. The key is deleted.
	HandedOff
)

// Release gives partition p, marked releasing by Pass, up at revision
// rev, the revision this runner claimed it with (docs/semantics.md §8,
// graceful: nothing uncertain). While it is marked releasing no run of it
// is acquired (OwnerOf says releasing); the acquisitions counted before
// (Acquiring) are waited for, so that their runs are handed off too. Then
// handOff hands the runs of p the command loop holds off and forgets
// them. Only when it returns HandedOff is the key deleted, tried again
// until it is or ctx ends (the drain then deletes it: ReleaseKey), so
// that the runner p is assigned to claims it; until then p stays
// releasing.
func (t *Table) Release(ctx context.Context, p int, rev uint64, handOff func(context.Context) HandOff) {
	t.cfg.Log.Info("releasing partition", "partition", p)
	if !t.waitAcquisitions(ctx, p) {
		return
	}
	t.hook("release-check", p)
	switch handOff(ctx) {
	case HandedOff:
	case Postponed:
		t.setReleasing(p, false)
		t.cfg.Log.Info("partition release postponed: work without a deadline runs", "partition", p)
		return
	default: // Stopped, or anything else: the key is kept
		return // the drain releases it (releaseQuiet, Coordinator.Release)
	}
	back := backoff.New(50*time.Millisecond, time.Second)
	for {
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := t.deleteKey(fctx, p, rev)
		fcancel()
		if err == nil {
			break
		}
		t.cfg.Log.Warn("partition release", "partition", p, "err", err)
		if back.Wait(ctx) != nil {
			return // the drain deletes it (ReleaseKey)
		}
	}
	t.hook("release-deleted", p)
	t.deleted(p)
}

// ReleaseQuiet gives up, during a drain, every partition this runner owns
// whose runs handOff handed off and forgot (it returns true; false leaves
// the partition to a later try, still releasing): each is marked
// releasing, its acquisitions in flight waited for, then handOff is asked
// and the key deleted (ReleaseKey). It stops when ctx ends.
func (t *Table) ReleaseQuiet(ctx context.Context, handOff func(ctx context.Context, p int) bool) {
	for _, p := range t.Owned() {
		t.setReleasing(p, true)
		if !t.waitAcquisitions(ctx, p) {
			return
		}
		if !handOff(ctx, p) {
			continue
		}
		t.hook("release-quiet", p)
		t.ReleaseKey(ctx, p)
	}
}

// Scan hands the partitions this runner owns and does not release whose
// driver entries are still to be woken (all owned ones with all) to wake,
// when there are any, and records them woken when it returns true (false:
// due again at the next scan). wake is called with no lock of the
// Table's held.
func (t *Table) Scan(all bool, wake func(due []int) bool) {
	due, revs := t.scanDueList(all)
	if len(due) == 0 {
		return
	}
	if wake(due) {
		t.scanned(due, revs)
	}
}
