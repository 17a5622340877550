package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner/internal/ownership"
)

// Ownership checks (docs/adr/0019-partitions.md, docs/semantics.md §8: only a
// runner that is gone is recovered from). This runner's table of the
// partitions' owners (partTable) follows weft_partitions through a
// watcher, which may be behind: a runner paused (SIGSTOP) or cut off from
// the server wakes up believing it still owns a partition another runner
// claimed meanwhile. A decision that would record a takeover is therefore
// not made on the table alone: the partition's key is read from the
// stream's leader first (partitionKey: a JetStream API message get, which
// only the leader answers — not kv.Get, a direct get that any replica of
// the bucket may answer, behind), and must name this runner at a revision
// no lower than the one it claimed. After the
// connection reconnected, every owned partition is verified so before
// anything is acquired (verifyOwned).

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
	parts      *partTable     // owners of the partitions, as this runner sees them
	owned      reconnectCheck // the reconnect check of the owned partitions (verifyOwned)
	// peers is this runner's view of its peers (internal/ownership): its
	// heartbeat, the runners view, the judgement of their liveness. Made
	// by Run (startPeers).
	peers *ownership.Peers
	// clk is the clock partition ownership reads (liveness, the runners
	// view, the partition loop, releases): the wall clock, a fake one in
	// tests. Not Runner.now: that stamps recorded times (a store clock,
	// which a test may set behind the wall clock), while clk measures
	// this process's own intervals and drives tickers.
	clk clock.Clock
}

// reconnectCheck is the state of the reconnect check (verifyOwned).
type reconnectCheck struct {
	mu         sync.Mutex
	reconnects uint64 // the connection's reconnect count the owned partitions were verified at
}

// verifyOwner reads run's partition key from weft_partitions and checks
// that it names this runner at a revision no lower than the one this
// runner claimed it with. When it does not, the partition is lost (its
// runs are forgotten, lostPartition) and the answer is a *forwardError
// naming the key's runner, or runner_busy when it names none (or this
// runner, in a re-created bucket). A key that cannot be read is
// runner_busy: "cannot tell" is never ownership.
func (r *Runner) verifyOwner(ctx context.Context, run string) error {
	p := partition.Of(run, r.nparts)
	owner, err := r.verifyPartition(ctx, p)
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

// verifyPartition reads partition p's key and returns its owner as the
// store says ("" when nobody owns it, or when the key names this runner
// at a revision lower than the one it claimed: the bucket was re-created
// or lost writes, and such a key is no claim of this runner's). A
// partition this runner believed it owned and does not is lost
// (lostPartition).
func (r *Runner) verifyPartition(ctx context.Context, p int) (string, error) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t := r.parts
	t.mu.Lock()
	believed, claimed := t.owner[p], t.rev[p]
	t.mu.Unlock()
	owner, rev, err := r.partitionKey(gctx, p)
	if err != nil {
		return "", err
	}
	if owner == r.id && rev >= claimed {
		return owner, nil
	}
	if owner == r.id {
		owner = "" // a re-created key: a loss, claimed again (claim)
	}
	if believed == r.id {
		r.lostPartition(ctx, p, claimed, owner, rev)
	}
	return owner, nil
}

// partitionKey reads partition p's key in weft_partitions from the
// stream's leader: a JetStream API message get of the key's last message
// ($JS.API.STREAM.MSG.GET, answered by the leader only), not a direct get
// (kv.Get: the bucket allows direct gets, which any replica answers, and a
// replica may be behind). It returns the key's owner and revision: "" and
// the deletion's revision when the key is deleted, "" and 0 when it is
// absent.
func (r *Runner) partitionKey(ctx context.Context, p int) (string, uint64, error) {
	bucket := "KV_" + PartitionsBucket
	m, err := r.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+bucket,
		fmt.Appendf(nil, `{"last_by_subj":%q}`, "$KV."+PartitionsBucket+"."+partKey(p)))
	if err != nil {
		return "", 0, err
	}
	var resp struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return "", 0, fmt.Errorf("%s: %v", bucket, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == int(jetstream.JSErrCodeMessageNotFound):
		return "", 0, nil
	case resp.Error != nil:
		return "", 0, fmt.Errorf("%s: %d %s", bucket, resp.Error.Code, resp.Error.Description)
	case resp.Message == nil:
		return "", 0, fmt.Errorf("%s: no message in the answer", bucket)
	}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return "", 0, fmt.Errorf("%s: %v", bucket, err)
		}
		if op := h.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			return "", resp.Message.Seq, nil
		}
	}
	return string(resp.Message.Data), resp.Message.Seq, nil
}

// lostPartition records that partition p, which this runner's table says
// it owns at revision claimed, is owned by owner at revision rev (""
// for nobody) and forgets the runs of it this runner holds. The table is
// changed only while it still says what the caller read (a claim made
// meanwhile stands).
func (r *Runner) lostPartition(ctx context.Context, p int, claimed uint64, owner string, rev uint64) {
	t := r.parts
	t.mu.Lock()
	still := t.owner[p] == r.id && t.rev[p] == claimed
	if still {
		t.owner[p], t.rev[p] = owner, rev
		t.releasing[p], t.scanDue[p] = false, false
	}
	t.mu.Unlock()
	if !still {
		return
	}
	r.log.Warn("partition lost: its key in weft_partitions does not name this runner at its claim", "partition", p, "owner", owner, "revision", rev, "claimed", claimed)
	// The runs are forgotten in the background: the caller may hold one
	// of them (locked), which it drops itself.
	r.bg.Go(func(bctx context.Context) { r.forgetPartition(bctx, p) })
}

// verifyOwned checks every partition this runner owns against
// weft_partitions once after each reconnection of its connection (a
// watcher's view may have missed what happened meanwhile), before
// anything is acquired. It returns runner_busy when a key cannot be read
// (checked again at the next acquisition).
func (r *Runner) verifyOwned(ctx context.Context) error {
	rc := r.nc.Stats().Reconnects
	r.owned.mu.Lock()
	defer r.owned.mu.Unlock()
	if rc == r.owned.reconnects {
		return nil
	}
	for _, p := range r.ownedPartitions() {
		if _, err := r.verifyPartition(ctx, p); err != nil {
			return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("the partitions of this runner are being verified after a reconnection (%v); retry", err)}
		}
	}
	r.log.Info("partitions verified after a reconnection", "reconnects", rc, "owned", len(r.ownedPartitions()))
	r.owned.reconnects = rc
	return nil
}

// startPeers makes this runner's view of its peers (r.peers), its first
// period of continuous view beginning now: Run calls it once the assets
// are looked up and the deployment's partitions are known.
func (r *Runner) startPeers() {
	r.peers = ownership.New(ownership.Config{
		ID: r.id, Lease: r.lease, Partitions: r.nparts, Conn: r.nc,
		Live: r.live, LiveStream: r.liveStream, Bucket: RunnersBucket,
		Clock: r.clk, Stamp: r.now, Log: r.log,
		Hook: func(event, key string) { r.testHook(event, -1, key) },
	}, ownershipLoop{r})
}

// ownershipLoop is what ownership.Peers asks of the command loop.
type ownershipLoop struct{ r *Runner }

// Draining reports whether the runner drains (Runner.mu).
func (l ownershipLoop) Draining() bool {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.draining
}

// RunnersChanged makes the partition loop pass again now.
func (l ownershipLoop) RunnersChanged() { l.r.kickPartitions() }
