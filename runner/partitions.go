package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/runner/internal/ownership"
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
func partKey(p int) string { return ownership.Key(p) }

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

// ownedPartitions lists the partitions this runner owns.
func (r *Runner) ownedPartitions() []int { return r.own.Owned() }

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
	owner, releasing := r.own.OwnerOf(p)
	switch {
	case owner == r.id && !releasing:
		return nil
	case owner == "" || owner == r.id:
		return notOwned(run, p, releasing)
	}
	return &forwardError{driver: owner}
}
