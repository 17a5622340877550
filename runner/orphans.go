package runner

// The takeover of orphans: the runs of a partition this runner owns whose
// weft_drivers entry names another runner (gone, or one that released or
// lost the partition), woken here (docs/semantics.md §8).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft"
)

// driverKey is a run's weft_drivers entry: the driver and the revision.
type driverKey struct {
	driver   string
	revision uint64
}

// takeoverConcurrency bounds the takeovers a runner makes at once: taking
// over many idle runs (a gone runner's thousands) costs bounded memory and
// goroutines, and the store is not flooded (docs/adr/0014).
const takeoverConcurrency = 32

// takeOrphans wakes the orphans todo (each marked in r.takeover), at most
// takeoverConcurrency at once, and returns when all are done with the
// number of wakes that failed (or were not made: ctx ended).
func (r *Runner) takeOrphans(ctx context.Context, todo []string, drivers map[string]driverKey) int {
	if len(todo) == 0 {
		return 0
	}
	work := make(chan string)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range min(takeoverConcurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run := range work {
				if err := r.wakeOrphan(ctx, run, drivers[run]); err != nil && !r.noteQuarantine(err) {
					failed.Add(1)
					if ctx.Err() == nil {
						r.noteOrphanFailing(run, drivers[run], err)
					}
				} else {
					r.orphanFail.Delete(run)
				}
				r.takeover.Delete(run)
			}
		}()
	}
	for i, run := range todo {
		select {
		case work <- run:
		case <-ctx.Done():
			for _, left := range todo[i:] {
				r.takeover.Delete(left)
			}
			close(work)
			wg.Wait()
			return int(failed.Load()) + len(todo) - i
		}
	}
	close(work)
	wg.Wait()
	return int(failed.Load())
}

// orphanWarnAfter is how long the wake of a run's driver entry may keep
// failing before noteOrphanFailing says so at Warn: a run with work in
// flight that the owner of its partition cannot take over is a run that
// stalls (docs/semantics.md §8: pending work is retried, never dropped),
// and a stall an operator must be able to see in the logs.
func (r *Runner) orphanWarnAfter() time.Duration { return max(10*r.lease, 10*time.Second) }

// unknownRunGrace is how long the scans find the run of a driver entry
// absent from the log before the entry is removed (wakeOrphan): two
// leases, many scans of the partition (every lease/4).
func (r *Runner) unknownRunGrace() time.Duration { return 2 * r.lease }

// unknownSince is when the scans first found no event of a run for its
// driver entry at revision rev (wakeOrphan).
type unknownSince struct {
	rev uint64
	at  time.Time
}

// noteOrphanFailing logs the failed wake of run's driver entry k: at Debug,
// and at Warn once it has kept failing for orphanWarnAfter (then again
// each orphanWarnAfter), naming the entry's driver and the last error.
func (r *Runner) noteOrphanFailing(run string, k driverKey, err error) {
	now := r.clk.Now()
	v, _ := r.orphanFail.LoadOrStore(run, now)
	since := v.(time.Time)
	if now.Sub(since) < r.orphanWarnAfter() {
		r.log.Debug("takeover failed", "run", run, "err", err)
		return
	}
	r.orphanFail.Store(run, now)
	r.log.Warn("the takeover of a run with work in flight keeps failing", "run", run, "driver", k.driver, "failing_for", now.Sub(since).Round(time.Second), "err", err)
}

// wakeOrphan wakes run, whose weft_drivers entry k is in a partition this
// runner owns and names another runner (or this one without holding the
// run), and repairs the entry from the log: deleted when the run does not
// exist or ends up not held (idle, or finished: it needs no entry), left
// to the owner when the partition moved on meanwhile.
func (r *Runner) wakeOrphan(ctx context.Context, run string, k driverKey) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r.mu.Lock()
	_, held := r.runs[run]
	r.mu.Unlock()
	if held {
		return nil // held since the scan listed it: driven here (wakePartitions)
	}
	rn, err := r.acquire(ctx, run)
	if err != nil {
		var fe *forwardError
		switch {
		case errors.As(err, &fe):
			// The partition moved on since the scan listed it: the run is
			// its owner's, whose claim made the partition due there. An
			// owner that is gone is judged by the partition loop, which
			// claims the partition back (due here again); nothing this
			// scan could do for it.
			return nil
		case weft.ErrorCode(err) == weft.CodeUnknownRun:
			// A start's intent whose append never landed — or landed and
			// was not seen yet (a read answered by a replica behind, the
			// append of a runner killed right after it): removed only once
			// the run has been unknown to the scans for unknownRunGrace,
			// never at the first look (a removed entry leaves the run to a
			// command; docs/semantics.md §8: a run can always be answered).
			// Measured from the first look that found no event for this
			// entry (its revision), not from any earlier failed wake.
			now := r.clk.Now()
			v, _ := r.unknownAt.LoadOrStore(run, unknownSince{rev: k.revision, at: now})
			if u := v.(unknownSince); u.rev != k.revision {
				r.unknownAt.Store(run, unknownSince{rev: k.revision, at: now})
			} else if now.Sub(u.at) >= r.unknownRunGrace() {
				_ = r.removeDriverKey(ctx, run, k.revision)
				r.unknownAt.Delete(run)
				return nil
			}
			return fmt.Errorf("run %s: its log shows no event (yet) for its driver entry: %w", run, err)
		}
		return err
	}
	r.unknownAt.Delete(run) // found
	err = r.wakeLocked(ctx, rn, true)
	// A takeover still to record (its append failed) leaves the run held
	// and not driven on: the wake failed, and its retry (finishTakeover:
	// retryLater) tries it again, not a command.
	pending := rn.driven && rn.takeover != nil
	rn.unlock()
	r.mu.Lock()
	_, held = r.runs[run]
	r.mu.Unlock()
	if err == nil && held && pending {
		err = fmt.Errorf("run %s: its takeover is not recorded yet", run)
	}
	if !held && err == nil {
		// Idle (evicted or not taken over) or finished: an entry left
		// unchanged since it was read is stale.
		_ = r.removeDriverKey(ctx, run, k.revision)
	}
	return err
}
