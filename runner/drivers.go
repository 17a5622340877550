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

// scanPartitions wakes the driver entries of the owned partitions due for
// a scan (all owned ones with all): the runs some runner drove with work in
// flight that this runner does not hold, bounded (takeOrphans). An idle
// run has no entry (idle.go): it costs nothing until a command, a report
// or a timer reaches it.
func (r *Runner) scanPartitions(ctx context.Context, all bool) {
	r.parts.Scan(all, func(due []int) bool { return r.wakePartitions(ctx, due) })
}

// wakePartitions wakes the driver entries of partitions due (owned, not
// releasing) that this runner does not hold (scanPartitions). It returns
// true once every entry's run was woken.
func (r *Runner) wakePartitions(ctx context.Context, due []int) bool {
	t := r.parts
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

// markerTTL is how long the marker of a removed weft_drivers entry is
// kept: a lease (at least a second, the server's smallest message TTL).
// Nothing reads the markers (a scan, driverEntries, ignores removals); a
// marker only has to outlive the purge's own acknowledgement.
func markerTTL(lease time.Duration) time.Duration { return max(lease, time.Second) }

// removeDriverKey removes run's weft_drivers entry — at revision rev when
// rev is not 0 — with a purge whose marker expires after markerTTL. A
// plain delete leaves a marker forever: every partition scan, a
// last-per-subject watch of the bucket, then costs the server one message
// per run that ever had work in flight (docs/adr/0019-partitions.md: an idle or
// finished run costs nothing; at a million runs an idle runner's scans kept
// nats-server
// busy on half a core).
//
// A bucket provisioned before markers expired (no LimitMarkerTTL: the
// server refuses a message TTL) gets a plain delete, as before, until
// runner.Provision (the runner binary, weft dev, host) updates it.
func (r *Runner) removeDriverKey(ctx context.Context, run string, rev uint64) error {
	var opts []jetstream.KVDeleteOpt
	if rev != 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	err := r.drivers.Purge(ctx, r.driverKey(run), append(opts, jetstream.PurgeTTL(markerTTL(r.lease)))...)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsMessageTTLDisabled {
		return r.drivers.Delete(ctx, r.driverKey(run), opts...)
	}
	return err
}

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

// jsMessageTTLDisabled is nats-server's JSMessageTTLDisabledErr: a
// message TTL on a stream that does not allow them.
const jsMessageTTLDisabled jetstream.ErrorCode = 10166
