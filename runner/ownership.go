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
// verified so before anything is acquired (verifyOwned).

// partitionOwnership is this runner's state of partition ownership
// (docs/adr/0019-partitions.md), apart from the command loop's: the
// deployment's partitions, the buckets ownership reads, the table of the
// partitions' owners, this runner's view of its peers (the live runners
// and the judgement of their liveness: internal/ownership) and the clock
// all of it reads. Each part keeps a lock of its own; none is the command
// loop's Runner.mu.
type partitionOwnership struct {
	nparts   int  // partitions of the deployment (WithPartitions)
	partsSet bool // WithPartitions was given
	// live is weft_runners; liveStream its stream, for reading delete
	// markers; partKV is weft_partitions.
	live       jetstream.KeyValue
	liveStream jetstream.Stream
	partKV     jetstream.KeyValue
	parts      *ownership.Table // owners of the partitions, as this runner sees them (made by Run: startOwnership)
	// peers is this runner's view of its peers (internal/ownership): its
	// heartbeat, the runners view, the judgement of their liveness. Made
	// by Run (startOwnership).
	peers *ownership.Peers
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
	owner, err := r.parts.Verify(ctx, p)
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

// verifyOwned checks every partition this runner owns against
// weft_partitions once after each reconnection of its connection, before
// anything is acquired (ownership.Table.VerifyOwned). It returns
// runner_busy when a key cannot be read (checked again at the next
// acquisition).
func (r *Runner) verifyOwned(ctx context.Context) error {
	if err := r.parts.VerifyOwned(ctx); err != nil {
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("the partitions of this runner are being verified after a reconnection (%v); retry", err)}
	}
	return nil
}

// startOwnership makes this runner's table of the partitions' owners
// (r.parts, owning nothing) and its view of its peers (r.peers), its first
// period of continuous view beginning now: Run calls it once the assets
// are looked up and the deployment's partitions are known.
func (r *Runner) startOwnership() {
	r.parts = ownership.NewTable(ownership.TableConfig{
		ID: r.id, Partitions: r.nparts, Conn: r.nc, KV: r.partKV, Bucket: PartitionsBucket, Log: r.log,
		Hook: func(event string, p int) { r.testHook(event, p, "") },
	}, ownershipLoop{r})
	r.peers = ownership.New(ownership.Config{
		ID: r.id, Lease: r.lease, Partitions: r.nparts, Conn: r.nc,
		Live: r.live, LiveStream: r.liveStream, Bucket: RunnersBucket,
		Clock: r.clk, Stamp: r.now, Log: r.log,
		Hook: func(event, key string) { r.testHook(event, -1, key) },
	}, ownershipLoop{r})
}

// ownershipLoop is what ownership asks of the command loop
// (ownership.Loop, ownership.Owners).
type ownershipLoop struct{ r *Runner }

// Draining reports whether the runner drains (Runner.mu).
func (l ownershipLoop) Draining() bool {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.draining
}

// RunnersChanged makes the partition loop pass again now.
func (l ownershipLoop) RunnersChanged() { l.r.kickPartitions() }

// ForgetPartition drops the runs of partition p the runner holds.
func (l ownershipLoop) ForgetPartition(ctx context.Context, p int) { l.r.forgetPartition(ctx, p) }

// ForgetPartitionLater does so in the runner's background group.
func (l ownershipLoop) ForgetPartitionLater(p int) {
	l.r.bg.Go(func(bctx context.Context) { l.r.forgetPartition(bctx, p) })
}
