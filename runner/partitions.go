package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/partition"
)

// Partitions (docs/adr/0019-partitions.md). Every run belongs to the
// partition partition.Of(run, P); P is fixed per deployment and recorded in
// weft_partitions under "config". Each partition has one owner, the
// runner whose id is the value of its key p.<nnnn> in weft_partitions:
// only the owner acquires the runs of a partition (reads them from the
// log, drives them, takes them over); every other runner forwards their
// commands to it. Ownership follows the live runners (weft_runners) by
// rendezvous hashing (partition.Owner): a runner claims the partitions
// assigned to it whose key is absent or names a runner judged gone
// (kv.Create or kv.Update at the revision seen: one claim wins), and
// releases those it owns that are assigned to another live runner — it
// hands off the runs of the partition it holds, waits for their work in
// flight up to its recorded deadlines, forgets them and deletes the key
// (release).

// DefaultPartitions is the number of partitions of a deployment whose
// first runner was not configured otherwise (WithPartitions).
const DefaultPartitions = 64

// MaxPartitions is the largest number of partitions (keys are zero-padded
// to four digits).
const MaxPartitions = 1024

// WithPartitions sets the number of partitions P of the deployment
// (1 to MaxPartitions). P is fixed per deployment: the first runner
// records it in weft_partitions, and a runner configured with another
// value refuses to start (Run returns an error naming both). A runner
// without this option follows the recorded value (DefaultPartitions for
// a new deployment). Changing P means stopping every runner and deleting
// the bucket (docs/adr/0019-partitions.md).
func WithPartitions(n int) Option { return func(r *Runner) { r.nparts, r.partsSet = n, true } }

// partitionConfig is the value of the key "config" in weft_partitions.
type partitionConfig struct {
	Schema     int `json:"schema"`
	Partitions int `json:"partitions"`
}

// The keys of weft_partitions besides the partitions' p.<nnnn>.
const (
	configKey  = "config"
	rebuiltKey = "rebuilt" // the driver keys were rebuilt from the log once
)

// partKey is partition p's key in weft_partitions.
func partKey(p int) string { return fmt.Sprintf("p.%04d", p) }

// partTable is this runner's view of the partitions' owners: its own
// claims at once, everyone's through a watcher of weft_partitions.
type partTable struct {
	mu        sync.Mutex
	owner     []string // by partition; "" when nobody owns it
	rev       []uint64 // revision of the key's last message
	releasing []bool   // owned by this runner and being released
	scanDue   []bool   // owned; its driver entries are still to be woken
	// acquiring counts the acquisitions in flight by partition (acquiring);
	// acquired is closed (and replaced) whenever a count drops to zero.
	acquiring []int
	acquired  chan struct{}
	ready     chan struct{}
	kick      chan struct{} // a partition was released, a runner left: pass again now
}

func newPartTable(n int) *partTable {
	return &partTable{owner: make([]string, n), rev: make([]uint64, n), releasing: make([]bool, n), scanDue: make([]bool, n),
		acquiring: make([]int, n), acquired: make(chan struct{}), ready: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// errDraining is the answer of a draining runner asked to acquire a run
// it does not hold: it reads no run back from the log and starts none.
var errDraining = &weft.Error{Code: weft.CodeRunnerBusy, Message: "this runner is draining"}

// install makes rn, read from the log, a run this runner drives, unless
// the runner drains (checked under the lock the drain sets draining
// with, so that a run is either installed before the drain lists the
// runs to hand off, or not at all).
func (r *Runner) install(rn *run) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.draining {
		return errDraining
	}
	r.runs[rn.id] = rn
	return nil
}

// ownerOf returns partition p's owner as this runner sees it, and whether
// this runner is releasing it.
func (t *partTable) ownerOf(p int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owner[p], t.releasing[p]
}

// ownedPartitions lists the partitions this runner owns.
func (r *Runner) ownedPartitions() []int {
	if r.parts == nil {
		return nil
	}
	r.parts.mu.Lock()
	defer r.parts.mu.Unlock()
	var out []int
	for p, o := range r.parts.owner {
		if o == r.id {
			out = append(out, p)
		}
	}
	return out
}

// checkPartitions records the deployment's number of partitions, or
// checks this runner's against the recorded one.
func (r *Runner) checkPartitions(ctx context.Context) error {
	if r.nparts < 1 || r.nparts > MaxPartitions {
		return fmt.Errorf("runner: %d partitions: want 1 to %d", r.nparts, MaxPartitions)
	}
	want, _ := json.Marshal(partitionConfig{Schema: 1, Partitions: r.nparts})
	for range 5 {
		if _, err := r.partKV.Create(ctx, configKey, want); err == nil {
			r.log.Info("recorded the deployment's partitions", "partitions", r.nparts)
			return nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("runner: record partitions in %s: %w", PartitionsBucket, err)
		}
		e, err := r.partKV.Get(ctx, configKey)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("runner: read partitions from %s: %w", PartitionsBucket, err)
		}
		var got partitionConfig
		if err := json.Unmarshal(e.Value(), &got); err != nil || got.Schema != 1 || got.Partitions < 1 || got.Partitions > MaxPartitions {
			return fmt.Errorf("runner: %s key %s is %q, not {\"schema\":1,\"partitions\":1..%d}", PartitionsBucket, configKey, e.Value(), MaxPartitions)
		}
		if got.Partitions == r.nparts {
			return nil
		}
		if r.partsSet {
			return fmt.Errorf("runner: this runner is configured with %d partitions, but the deployment has %d (%s key %s): the number of partitions is fixed per deployment; stop every runner to change it (docs/adr/0019-partitions.md)",
				r.nparts, got.Partitions, PartitionsBucket, configKey)
		}
		r.nparts = got.Partitions
		return nil
	}
	return fmt.Errorf("runner: %s key %s keeps changing", PartitionsBucket, configKey)
}

// watchPartitions keeps r.parts equal to weft_partitions until ctx ends.
// A partition this runner owned that another runner claimed (this one was
// judged gone, for example while paused) is lost: its runs are forgotten
// at once (their appends would conflict anyway).
// A watch that fails or ends is made again (after a backoff).
func (r *Runner) watchPartitions(ctx context.Context) error {
	back := backoff.New(100*time.Millisecond, 2*time.Second)
	ready := false
	for ctx.Err() == nil {
		r.watchPartitionsOnce(ctx, &ready)
		if back.Wait(ctx) != nil {
			break
		}
	}
	return nil
}

func (r *Runner) watchPartitionsOnce(ctx context.Context, ready *bool) {
	w, err := r.partKV.WatchFiltered(ctx, []string{"p.*"})
	if err != nil {
		r.log.Warn("watch partitions", "err", err)
		return
	}
	defer func() { _ = w.Stop() }()
	// The values before the watch's first nil are the bucket as it is:
	// taken as they are (after a server restart that lost recent writes
	// a key's revision may be lower than one seen before); later updates
	// only move forward.
	initial := true
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return
		case e, open = <-w.Updates():
		}
		if !open {
			return
		}
		if e == nil {
			initial = false
			if !*ready {
				*ready = true
				close(r.parts.ready)
			}
			continue
		}
		p, err := strconv.Atoi(strings.TrimPrefix(e.Key(), "p."))
		if err != nil || p < 0 || p >= r.nparts {
			continue
		}
		owner := ""
		if e.Operation() == jetstream.KeyValuePut {
			owner = string(e.Value())
		}
		t := r.parts
		t.mu.Lock()
		// A key naming this runner at a revision lower than its claim
		// (the bucket was re-created, or the server lost writes) is no
		// claim of this runner's: a loss, claimed again (claim).
		recreated := initial && owner == r.id && t.owner[p] == r.id && e.Revision() < t.rev[p]
		lost := t.owner[p] == r.id && (owner != r.id || recreated) && (initial || e.Revision() > t.rev[p])
		if recreated {
			t.owner[p], t.rev[p] = "", e.Revision()
			t.releasing[p], t.scanDue[p] = false, false
		} else if initial || e.Revision() >= t.rev[p] {
			t.owner[p], t.rev[p] = owner, e.Revision()
			if owner != r.id {
				t.releasing[p], t.scanDue[p] = false, false
			}
		}
		t.mu.Unlock()
		if owner == "" || recreated {
			r.kickPartitions()
		}
		if lost && (owner != "" || recreated) {
			r.log.Warn("partition lost to another runner", "partition", p, "owner", owner, "recreated", recreated)
			r.forgetPartition(ctx, p)
		}
	}
}

// kickPartitions makes the partition loop pass again now (a partition
// was released, a runner left).
func (r *Runner) kickPartitions() {
	if r.parts == nil {
		return
	}
	select {
	case r.parts.kick <- struct{}{}:
	default:
	}
}

// forgetPartition drops the runs of partition p this runner holds.
func (r *Runner) forgetPartition(ctx context.Context, p int) {
	for _, rn := range r.runsOf(p) {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if rn.lock(lctx) == nil {
			r.drop(rn)
			rn.unlock()
		}
		cancel()
	}
}

// runsOf lists the runs of partition p this runner holds in memory.
func (r *Runner) runsOf(p int) []*run {
	r.mu.Lock()
	defer r.mu.Unlock()
	var list []*run
	for id, rn := range r.runs {
		if partition.Of(id, r.nparts) == p {
			list = append(list, rn)
		}
	}
	return list
}

// partitionLoop rebalances the partitions every lease/4 (partitionPass)
// until ctx ends, and wakes the driver entries of the partitions it
// claimed.
func (r *Runner) partitionLoop(ctx context.Context, releases *sync.WaitGroup) {
	t := r.clk.NewTicker(r.lease / 4)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-r.parts.kick:
		}
		if err := r.verifyOwned(ctx); err != nil {
			r.log.Debug("verify partitions", "err", err)
		}
		r.partitionPass(ctx, releases)
		if r.noScan {
			continue
		}
		r.watchQuarantined(ctx)
		// Every owned partition is scanned again now and then: entries a
		// failed wake left, or put by a runner that did not know it lost
		// the partition.
		r.scanPartitions(ctx, tick%32 == 0)
	}
}

// partitionPass is one round of rebalancing: claim the partitions
// assigned to this runner that nobody (alive) owns, release those
// assigned to another live runner (the choice: partition.Round.Decide).
func (r *Runner) partitionPass(ctx context.Context, releases *sync.WaitGroup) {
	live, runners, ok := r.peers.LiveRunners()
	if !ok {
		return // cannot tell
	}
	round := partition.Round{Self: r.id, Runners: runners, Live: live,
		Gone:      func(id string) bool { return !r.peers.Alive(ctx, id) },
		Unbounded: r.unboundedIn}
	t := r.parts
	for p := range r.nparts {
		t.mu.Lock()
		slot := partition.Slot{Owner: t.owner[p], Rev: t.rev[p], Releasing: t.releasing[p]}
		t.mu.Unlock()
		switch m := round.Decide(p, slot); m.Do {
		case partition.Release:
			t.mu.Lock()
			t.releasing[p] = true
			t.mu.Unlock()
			releases.Add(1)
			go func() {
				defer releases.Done()
				r.release(ctx, p, m.Rev)
			}()
		case partition.Claim:
			r.claim(ctx, p, m.Rev, m.Previous)
		}
	}
	r.testHook("partition-pass", -1, "")
}

// claim makes this runner partition p's owner: Create when the key is
// absent or deleted (rev 0), Update at rev when it names previous, a
// runner judged gone. Exactly one claim of several wins.
func (r *Runner) claim(ctx context.Context, p int, rev uint64, previous string) {
	var err error
	var got uint64
	if rev == 0 || previous == "" {
		got, err = r.partKV.Create(ctx, partKey(p), []byte(r.id))
		if errors.Is(err, jetstream.ErrKeyExists) {
			// A key naming this runner that is no claim of its own (a
			// re-created bucket, lost writes: verifyPartition) is claimed
			// anew at its revision.
			if owner, krev, gerr := r.partitionKey(ctx, p); gerr == nil && owner == r.id {
				got, err = r.reclaim(ctx, p, krev)
			}
		}
	} else {
		got, err = r.partKV.Update(ctx, partKey(p), []byte(r.id), rev)
	}
	if err != nil {
		r.log.Debug("partition claim lost", "partition", p, "err", err)
		r.catchUp(ctx, p)
		return
	}
	r.claimed(p, got, previous)
}

// reclaim claims partition p, whose key names this runner at revision rev
// without being a claim this runner's table holds, by compare-and-set at
// rev: a write the stream's leader checks, so a key read from a replica
// behind is never taken for ownership.
func (r *Runner) reclaim(ctx context.Context, p int, rev uint64) (uint64, error) {
	got, err := r.partKV.Update(ctx, partKey(p), []byte(r.id), rev)
	if err == nil {
		r.parts.mu.Lock()
		if r.parts.owner[p] == "" {
			r.parts.rev[p] = 0 // the claim is the revision to compare with (claimed)
		}
		r.parts.mu.Unlock()
	}
	return got, err
}

// claimed records this runner's claim of partition p at revision got: owned,
// and due for a scan.
func (r *Runner) claimed(p int, got uint64, previous string) {
	t := r.parts
	t.mu.Lock()
	if got > t.rev[p] {
		t.owner[p], t.rev[p] = r.id, got
	}
	t.scanDue[p], t.releasing[p] = true, false
	t.mu.Unlock()
	r.log.Info("partition claimed", "partition", p, "previous", previous)
}

// catchUp reads partition p's key after a claim of it was refused and
// moves this runner's table forward to it when the key is at a revision
// the table has not reached: a table set back by a read that was behind
// (lostPartition) would otherwise claim at a revision that is no longer
// the key's on every pass, while its watcher, past that revision already,
// delivers nothing new — and the runs of the partition would wait for a
// command (docs/semantics.md §8: a run can always be answered). The key is
// read from the stream's leader (partitionKey), not from a replica that
// may be behind. A key naming this runner is claimed again by
// compare-and-set at its revision (reclaim), never taken as owned from a
// read; a key naming another runner, or deleted, is applied to the table
// (and, when the table said this runner, the partition is lost:
// lostPartition). A key absent altogether (a re-created bucket) leaves
// the table's revision but names nobody: the next claim is a Create,
// not an Update at a revision the key never had. The table's revision
// never moves back.
func (r *Runner) catchUp(ctx context.Context, p int) {
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	owner, rev, err := r.partitionKey(gctx, p)
	if err != nil {
		return // cannot tell: claimed again at the next pass
	}
	t := r.parts
	t.mu.Lock()
	believed, at := t.owner[p], t.rev[p]
	t.mu.Unlock()
	if rev <= at && !(rev == 0 && believed != "") {
		return
	}
	rev = max(rev, at)
	if owner == r.id {
		if got, err := r.reclaim(gctx, p, rev); err == nil {
			r.claimed(p, got, "")
		}
		return
	}
	if believed == r.id {
		r.lostPartition(ctx, p, at, owner, rev)
		return
	}
	t.mu.Lock()
	if t.owner[p] == believed && t.rev[p] == at {
		t.owner[p], t.rev[p] = owner, rev
		t.releasing[p], t.scanDue[p] = false, false
	}
	t.mu.Unlock()
}

// notOwned is the answer for a run of partition p, which this runner does
// not own and nobody else does yet (or this runner is releasing it).
func notOwned(run string, p int, releasing bool) error {
	if releasing {
		return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: its partition %d is moving to another runner; retry", run, p)}
	}
	return &weft.Error{Code: weft.CodeRunnerBusy, Message: fmt.Sprintf("run %s: partition %d has no owner yet; retry", run, p)}
}

// owns checks that this runner may acquire run: it owns the run's
// partition. Otherwise it returns a *forwardError naming the owner, or
// runner_busy when nobody owns it yet or this runner is releasing it.
func (r *Runner) owns(run string) error {
	p := partition.Of(run, r.nparts)
	owner, releasing := r.parts.ownerOf(p)
	switch {
	case owner == r.id && !releasing:
		return nil
	case owner == "" || owner == r.id:
		return notOwned(run, p, releasing)
	}
	return &forwardError{driver: owner}
}
