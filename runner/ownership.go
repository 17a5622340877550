package runner

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner/internal/ownership"
)

// Ownership checks (docs/adr/0019-partitions.md, docs/semantics.md §8: only a
// runner that is gone is recovered from). This runner's table of the
// partitions' owners (ownership.Table) follows weft_partitions through a
// watcher, which may be behind; a decision that would record a takeover
// is therefore not made on the table alone: the partition's key is read
// from the stream's leader first and must name this runner at a revision
// no lower than the one it claimed (verifyOwner, ownership.Table.Verify
// says how). After the connection reconnected, every owned partition is
// verified so before anything is acquired (acquiring).

// partitionOwnership is this runner's state of partition ownership
// (docs/adr/0019-partitions.md), apart from the command loop's: the
// deployment's partitions, the buckets ownership reads, the Coordinator
// (internal/ownership: the table of the partitions' owners, this runner's
// view of its peers, the heartbeat, the watchers, the partition loop and
// the releases) and the clock it reads. None of its locks is the command
// loop's Runner.mu.
type partitionOwnership struct {
	nparts   int  // partitions of the deployment (WithPartitions)
	partsSet bool // WithPartitions was given
	// live is weft_runners; liveStream its stream, for reading delete
	// markers; partKV is weft_partitions.
	live       jetstream.KeyValue
	liveStream jetstream.Stream
	partKV     jetstream.KeyValue
	// own is this runner's partition ownership (made by Run:
	// startOwnership); nil before.
	own *ownership.Coordinator
	// clk is the clock partition ownership reads (liveness, the runners
	// view, the partition loop, releases): the wall clock, a fake one in
	// tests. Not Runner.now: that stamps recorded times (a store clock,
	// which a test may set behind the wall clock), while clk measures
	// this process's own intervals and drives tickers.
	clk clock.Clock
}

// verifyOwner reads run's partition key from weft_partitions and checks
// that it names this runner at a revision no lower than the one this
// runner claimed it with. When it does not, the partition is lost (its
// runs are forgotten, ownership.Table.Verify) and the answer is a *forwardError
// naming the key's runner, or runner_busy when it names none (or this
// runner, in a re-created bucket). A key that cannot be read is
// runner_busy: "cannot tell" is never ownership.
func (r *Runner) verifyOwner(ctx context.Context, run string) error {
	p := partition.Of(run, r.nparts)
	owner, err := r.own.Verify(ctx, p)
	if err != nil {
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: the owner of its partition %d cannot be read (%v); retry", run, p, err)}
	}
	if owner == r.id {
		return nil
	}
	if owner != "" {
		return &forwardError{driver: owner}
	}
	return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: this runner lost its partition %d; retry", run, p)}
}

// startOwnership makes this runner's partition ownership (r.own, owning
// nothing), its first period of continuous view beginning now: Run calls
// it once the assets are looked up and the deployment's partitions are
// known, then starts it (ownership.Coordinator.Start).
func (r *Runner) startOwnership() {
	r.own = ownership.NewCoordinator(ownership.CoordinatorConfig{
		ID: r.id, Lease: r.lease, Partitions: r.nparts, Conn: r.nc,
		PartKV: r.partKV, PartBucket: PartitionsBucket,
		Live: r.live, LiveStream: r.liveStream, LiveBucket: RunnersBucket,
		Clock: r.clk, Stamp: r.now, Log: r.log, NoScan: r.noScan,
		Hook: r.testHook,
	}, ownershipLoop{r})
}

// ownershipLoop is what ownership asks of the command loop
// (ownership.CommandLoop): what acts on the runs this runner holds.
type ownershipLoop struct{ r *Runner }

// Draining reports whether the runner drains (Runner.mu).
func (l ownershipLoop) Draining() bool {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.draining
}

// ForgetPartition drops the runs of partition p the runner holds; with
// later, in the runner's background group.
func (l ownershipLoop) ForgetPartition(ctx context.Context, p int, later bool) {
	if later {
		l.r.bg.Go(func(bctx context.Context) { l.r.forgetPartition(bctx, p) })
		return
	}
	l.r.forgetPartition(ctx, p)
}

// Unbounded reports whether a run of partition p has work without a
// recorded deadline (unboundedIn).
func (l ownershipLoop) Unbounded(p int) bool { return l.r.unboundedIn(p) }

// HandOff hands the runs of partition p off: a round's release
// (handOffPartition), or a drain's quiet one (handOffQuiet).
func (l ownershipLoop) HandOff(ctx context.Context, p int, quiet bool) ownership.HandOff {
	if quiet {
		return l.r.handOffQuiet(ctx, p)
	}
	return l.r.handOffPartition(ctx, p)
}

// WatchQuarantined wakes the quarantined runs repaired
// (watchQuarantined).
func (l ownershipLoop) WatchQuarantined(ctx context.Context) { l.r.watchQuarantined(ctx) }

// WakePartitions wakes the driver entries of the partitions due
// (wakePartitions).
func (l ownershipLoop) WakePartitions(ctx context.Context, due []int) bool {
	return l.r.wakePartitions(ctx, due)
}
