package runner

// The driver entries (weft_drivers, <partition>.<run>): the runs driven
// with work in flight, which the owner of a partition scans and wakes.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/partition"
)

// partPrefix is the prefix of the weft_drivers keys of partition p.
func partPrefix(p int) string { return fmt.Sprintf("%04d", p) }

// DriverKey is run's key in weft_drivers in a deployment of p partitions:
// <nnnn>.<run>, its partition (partition.Of) zero-padded to four digits
// first, so that the owner of a partition lists only its entries.
func DriverKey(run string, p int) string {
	return partPrefix(partition.Of(run, p)) + "." + run
}

func (r *Runner) driverKey(run string) string { return DriverKey(run, r.nparts) }

// runOfDriverKey is the run of a weft_drivers key ("" for a key of the
// format before partitions: the bare run id).
func runOfDriverKey(key string) string {
	_, run, ok := strings.Cut(key, ".")
	if !ok {
		return ""
	}
	return run
}

// wakePartitions wakes the driver entries of partitions due (owned, not
// releasing, due for a scan; ownership.Coordinator's partition loop lists
// them, beside it, and keeps them due until this returns true:
// ownershipLoop.WakePartitions): the runs some runner drove with work in
// flight that this runner does not hold, bounded (takeOrphans). An idle run has
// no entry (idle.go): it costs nothing until a command, a report or a
// timer reaches it. It returns true once every entry's run was woken.
func (r *Runner) wakePartitions(ctx context.Context, due []int) bool {
	t := r.own
	filters := make([]string, len(due))
	for i, p := range due {
		filters[i] = partPrefix(p) + ".>"
	}
	entries, err := r.driverEntries(ctx, filters)
	if err != nil {
		r.log.Debug("list driver entries", "err", err)
		return false
	}
	// A run no entry of the scanned partitions names any more (taken
	// over, finished, moved), or of a partition this runner no longer
	// owns, is no longer failing here.
	scanned := make(map[int]bool, len(due))
	for _, p := range due {
		scanned[p] = true
	}
	stale := func(k, _ any) bool {
		run := k.(string)
		p := partition.Of(run, r.nparts)
		_, listed := entries[run]
		if owner, _ := t.OwnerOf(p); owner != r.id || !listed && scanned[p] {
			r.orphanFail.Delete(run)
			r.unknownAt.Delete(run)
		}
		return true
	}
	r.orphanFail.Range(stale)
	r.unknownAt.Range(stale)
	var todo []string
	loading := false // a run being acquired meanwhile: its outcome is not this scan's
	for run := range entries {
		if r.isQuarantined(run) {
			continue // watchQuarantined wakes it once repaired
		}
		r.mu.Lock()
		_, held := r.runs[run]
		_, load := r.loading[run]
		r.mu.Unlock()
		if load {
			loading = true
			continue
		}
		// A held run is driven here, or its takeover still to record is
		// tried again by its own retry (finishTakeover: retryLater), off
		// the partition loop: the scan never waits on a held run's lock,
		// which a command or a retry may hold for seconds while claims
		// and releases wait for the loop.
		if held {
			continue
		}
		todo = append(todo, run)
	}
	slices.Sort(todo)
	var mine []string
	for _, run := range todo {
		if _, busy := r.takeover.LoadOrStore(run, struct{}{}); !busy {
			mine = append(mine, run)
		}
	}
	// The partitions stay due until every entry's run was woken: taken
	// over and driven here, removed, or found owned by a runner whose
	// key was read (wakeOrphan). A wake that failed, or that could not
	// tell, is made again at the next scan, never counted as done.
	failed := r.takeOrphans(ctx, mine, entries)
	return failed == 0 && len(mine) == len(todo) && !loading // else scanned again next time
}

// driverEntries reads the weft_drivers entries under filters: run →
// driver and revision.
func (r *Runner) driverEntries(ctx context.Context, filters []string) (map[string]driverKey, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := r.drivers.WatchFiltered(lctx, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	out := map[string]driverKey{}
	for {
		select {
		case <-lctx.Done():
			return nil, lctx.Err()
		case e := <-w.Updates():
			if e == nil {
				return out, nil
			}
			if run := runOfDriverKey(e.Key()); run != "" && e.Operation() == jetstream.KeyValuePut {
				out[run] = driverKey{driver: string(e.Value()), revision: e.Revision()}
			}
		}
	}
}

// markerTTL is how long the marker of a removed weft_drivers entry was
// kept when removals were purges (before docs/adr/0036-driver-entry-removed-by-sequence.md):
// a lease, at least a second. The bucket keeps LimitMarkerTTL so that such
// markers still expire, and createDriverKey still reads past one.
func markerTTL(lease time.Duration) time.Duration { return max(lease, time.Second) }

// removeTries bounds removeDriverKey's attempts at an unconditional
// removal: one more each time the entry it read was replaced before its
// delete.
const removeTries = 4

// errDriverKeyChanged is removeDriverKey's answer when the entry at the
// revision it was asked to remove is no longer the key's entry (replaced or
// removed meanwhile), as a purge at that revision would be refused.
var errDriverKeyChanged = errors.New("the run's driver entry is not at the revision read")

// removeDriverKey removes run's weft_drivers entry — only at revision rev
// when rev is not 0, else whatever entry the key has — by deleting its
// message (the stream's message delete by sequence: the revision). A
// delete leaves no marker: a partition scan, a last-per-subject watch of
// the bucket, costs nothing for a run whose entry was removed
// (docs/adr/0019-partitions.md: an idle or finished run costs nothing),
// and, under sync_interval: always, the removal is one fsync — a purge's
// marker is one, and its expiry another
// (docs/adr/0036-driver-entry-removed-by-sequence.md).
//
// The bucket keeps one message per key (history 1): the message at rev is
// there only while it is the key's entry, so the delete at rev, of a
// message read to be key's, is the purge at LastRevision(rev) it replaces.
// Without rev the entry is read first and deleted at its revision, again
// when it was replaced between. When the runner purges (purgeDrivers: the
// bucket denies deletes, or its credentials lack the grant) the removal is
// the purge, at rev or unconditional, as before.
func (r *Runner) removeDriverKey(ctx context.Context, run string, rev uint64) error {
	key := r.driverKey(run)
	if rev != 0 || r.purgeDrivers.Load() {
		return r.deleteDriverMsg(ctx, key, rev)
	}
	for range removeTries {
		e, err := r.drivers.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil // no entry (or the marker of an older purge)
		}
		if err != nil {
			return err
		}
		if err := r.deleteDriverMsg(ctx, key, e.Revision()); !errors.Is(err, errDriverKeyChanged) {
			return err
		}
	}
	return fmt.Errorf("remove driver entry %s: replaced %d times while removed: %w", key, removeTries, errDriverKeyChanged)
}

// deleteWait bounds a driver entry's message delete, which credentials
// issued before the runner's grant to delete (docs/security.md) never see
// answered: the server refuses the request as a permission violation,
// which reaches only the connection's error callback.
const deleteWait = time.Second

// deleteDriverMsg deletes key's weft_drivers message at sequence rev, or
// answers errDriverKeyChanged when key's entry is not at rev. A delete by
// sequence does not check the subject: the message at rev is read first
// (a direct get, no write), and deleted only when it is key's — after the
// bucket was deleted and made again its sequences start at 1 again, and
// rev may be another run's entry. A delete that fails within the caller's
// context — refused (the bucket denies deletes, or the message went
// meanwhile), or unanswered within deleteWait (no grant) — falls back to
// the purge at rev, which the server refuses when the delete landed or the
// entry changed; once such a purge removed the entry the runner purges
// from then on (purgeDrivers).
func (r *Runner) deleteDriverMsg(ctx context.Context, key string, rev uint64) error {
	if r.purgeDrivers.Load() {
		return r.purgeDriverKey(ctx, key, rev)
	}
	m, err := r.driversStream.GetMsg(ctx, rev)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return fmt.Errorf("delete driver entry %s at revision %d: no message: %w", key, rev, errDriverKeyChanged)
	case err != nil:
		return fmt.Errorf("delete driver entry %s at revision %d: read it: %w", key, rev, err)
	case m.Subject != driverSubject(key):
		return fmt.Errorf("delete driver entry %s at revision %d: the message is %s's: %w", key, rev, m.Subject, errDriverKeyChanged)
	}
	dctx, cancel := context.WithTimeout(ctx, deleteWait)
	err = r.driversStream.DeleteMsg(dctx, rev)
	cancel()
	if err == nil || ctx.Err() != nil {
		return err
	}
	if perr := r.purgeDriverKey(ctx, key, rev); perr != nil {
		return fmt.Errorf("delete driver entry %s at revision %d: %v; purge it: %w", key, rev, err, perr)
	}
	if !r.purgeDrivers.Swap(true) {
		r.log.Warn("a driver entry's delete failed and its purge removed it: the runner purges drivers entries from now on "+
			"(the bucket denies deletes, or the credentials lack the grant: docs/security.md)", "key", key, "err", err)
	}
	return nil
}

// driverSubject is key's subject in weft_drivers' stream.
func driverSubject(key string) string { return "$KV." + DriversBucket + "." + key }

// purgeDriverKey purges key at revision rev with a marker that expires
// after markerTTL, or, on a bucket provisioned before markers expired (no
// LimitMarkerTTL: the server refuses a message TTL), with a plain delete
// whose marker stays.
func (r *Runner) purgeDriverKey(ctx context.Context, key string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := r.drivers.Purge(ctx, key, append(opts, jetstream.PurgeTTL(markerTTL(r.lease)))...)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsMessageTTLDisabled {
		err = r.drivers.Delete(ctx, key, opts...)
	}
	if rev != 0 && errors.Is(err, jetstream.ErrKeyExists) { // the key's last revision is not rev
		return fmt.Errorf("purge driver entry %s at revision %d: %v: %w", key, rev, err, errDriverKeyChanged)
	}
	return err
}

// jsMessageTTLDisabled is nats-server's JSMessageTTLDisabledErr: a
// message TTL on a stream that does not allow them.
const jsMessageTTLDisabled jetstream.ErrorCode = 10166

// createTries bounds createDriverKey's attempts: a Create is made again
// only when the key it answered "exists" for turned out absent.
const createTries = 4

// errDriverKeyExists is createDriverKey's answer when run has a
// weft_drivers entry: one read back after Create refused to write.
var errDriverKeyExists = errors.New("the run has a driver entry")

// createDriverKey writes run's weft_drivers entry naming driver when run
// has none (a start's intent, a rebuilt entry) and returns its revision,
// or errDriverKeyExists when an entry is there. nats.go's KeyValue.Create
// answers jetstream.ErrKeyExists also when no entry exists: the key's last
// message is the marker of a removal (removeDriverKey) that expires
// (markerTTL) between Create's refused write and its read of the marker's
// revision, or between that read and its write at the revision. So an
// ErrKeyExists is confirmed by reading the key; when it is absent (no
// message, or a marker) Create is made again, at most createTries times
// in all — a run appended without the entry that it was meant to have
// first would be stranded by a crash before act puts it (docs/semantics.md §8:
// no run stays in flight that no runner finds).
func (r *Runner) createDriverKey(ctx context.Context, run, driver string) (uint64, error) {
	key := r.driverKey(run)
	for try := 1; ; try++ {
		rev, err := r.drivers.Create(ctx, key, []byte(driver))
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return rev, err
		}
		_, gerr := r.drivers.Get(ctx, key)
		switch {
		case gerr == nil:
			return 0, errDriverKeyExists
		case !errors.Is(gerr, jetstream.ErrKeyNotFound):
			return 0, fmt.Errorf("read %s key %s after create answered %v: %w", DriversBucket, key, err, gerr)
		case try == createTries:
			return 0, fmt.Errorf("create %s key %s: answered %v %d times while the key was absent", DriversBucket, key, err, try)
		}
	}
}
