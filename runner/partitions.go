package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
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
	kick      chan struct{} // a partition was released: pass again now
}

func newPartTable(n int) *partTable {
	return &partTable{owner: make([]string, n), rev: make([]uint64, n), releasing: make([]bool, n), scanDue: make([]bool, n),
		acquiring: make([]int, n), acquired: make(chan struct{}), ready: make(chan struct{}), kick: make(chan struct{}, 1)}
}

// errDraining is the answer of a draining runner asked to acquire a run
// it does not hold: it reads no run back from the log and starts none.
var errDraining = &weft.Error{Code: weft.CodeRunnerBusy, Message: "this runner is draining"}

// acquiring counts an acquisition of run (a read from the log, a start)
// in flight in its partition until done is called: once the run is
// installed in r.runs, or the acquisition failed. It is counted before
// the ownership check (owns), under the lock that marks a partition
// releasing, so that a release either makes the check fail or finds the
// acquisition counted and waits for it (waitAcquisitions) before it lists
// the partition's runs to hand them off: no run is installed behind a
// release's back (SEMANTICS §8: the releasing runner would drive a run
// its partition's new owner takes over).
func (r *Runner) acquiring(run string) (done func()) {
	t := r.parts
	if t == nil {
		return func() {}
	}
	p := partition.Of(run, r.nparts)
	t.mu.Lock()
	t.acquiring[p]++
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.acquiring[p]--
			if t.acquiring[p] == 0 {
				close(t.acquired)
				t.acquired = make(chan struct{})
			}
			t.mu.Unlock()
		})
	}
}

// waitAcquisitions waits until no acquisition of partition p (marked
// releasing) is in flight. It returns false when ctx ends first.
func (r *Runner) waitAcquisitions(ctx context.Context, p int) bool {
	t := r.parts
	for hooked := false; ; hooked = true {
		t.mu.Lock()
		n, ch := t.acquiring[p], t.acquired
		t.mu.Unlock()
		if n == 0 {
			return true
		}
		if !hooked {
			r.testHook("release-acquiring", p, "")
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

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
			select {
			case t.kick <- struct{}{}:
			default:
			}
		}
		if lost && (owner != "" || recreated) {
			r.log.Warn("partition lost to another runner", "partition", p, "owner", owner, "recreated", recreated)
			r.forgetPartition(ctx, p)
		}
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
	t := time.NewTicker(r.lease / 4)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
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

// runnersView is weft_runners as this runner's watcher of it sees it
// (watchRunners): one long-lived watch, not a read of the bucket every
// round.
type runnersView struct {
	mu        sync.Mutex
	ready     bool                   // the watch delivered the bucket as it is
	seen      time.Time              // when the watch last delivered something
	keys      map[string]runnerEntry // by runner id
	first     chan struct{}          // closed once the view was first ready
	firstOnce sync.Once
}

// runnerEntry is a liveness key as the watcher saw it: whether the runner
// takes part in the assignment, and until when the key lives. The bucket's
// keys expire after a lease (its max age) without a message a watcher
// would see, so the view expires them itself: a lease after the beat
// (its age when first seen taken from the message's timestamp).
type runnerEntry struct {
	assignable bool
	until      time.Time
}

func newRunnersView() *runnersView {
	return &runnersView{keys: map[string]runnerEntry{}, first: make(chan struct{})}
}

// watchRunners keeps r.runners equal to weft_runners until ctx ends, with
// one watcher (an ordered consumer) made again, after a backoff, when it
// fails, ends or delivers nothing for a lease — every live runner,
// this one included, beats every lease/4, so silence means a watch
// that no longer follows the bucket. Until the view is ready again it
// cannot tell (liveRunners answers !ok).
func (r *Runner) watchRunners(ctx context.Context) error {
	back := backoff.New(100*time.Millisecond, 2*time.Second)
	for ctx.Err() == nil {
		r.watchRunnersOnce(ctx)
		v := r.runners
		v.mu.Lock()
		v.ready = false
		v.mu.Unlock()
		if back.Wait(ctx) != nil {
			break
		}
	}
	return nil
}

func (r *Runner) watchRunnersOnce(ctx context.Context) {
	w, err := r.live.WatchAll(ctx)
	if err != nil {
		r.log.Warn("watch runners", "err", err)
		return
	}
	defer func() { _ = w.Stop() }()
	v := r.runners
	v.mu.Lock()
	v.keys, v.seen = map[string]runnerEntry{}, time.Now()
	v.mu.Unlock()
	check := time.NewTicker(r.lease / 2)
	defer check.Stop()
	for {
		var e jetstream.KeyValueEntry
		var open bool
		select {
		case <-ctx.Done():
			return
		case <-check.C:
			v.mu.Lock()
			silent := time.Since(v.seen) > r.lease
			v.mu.Unlock()
			if silent {
				r.log.Debug("watch runners: silent for a lease; watching again")
				return
			}
			continue
		case e, open = <-w.Updates():
		}
		if !open {
			return
		}
		now := time.Now()
		v.mu.Lock()
		v.seen = now
		switch {
		case e == nil:
			v.ready = true
			v.firstOnce.Do(func() { close(v.first) })
		case e.Operation() == jetstream.KeyValuePut:
			var b beat
			age := min(max(now.Sub(e.Created()), 0), r.lease)
			v.keys[e.Key()] = runnerEntry{
				assignable: json.Unmarshal(e.Value(), &b) == nil && b.Partitions == r.nparts && !b.Draining,
				until:      now.Add(r.lease - age),
			}
		default:
			delete(v.keys, e.Key())
		}
		v.mu.Unlock()
	}
}

// liveRunners lists the runners whose liveness key exists (live) and,
// among them, those that take part in the assignment (assignable: their
// heartbeat names this deployment's number of partitions and they do not
// drain), with this one unless it drains. ok is false when the watcher of
// weft_runners cannot tell (watchRunners).
func (r *Runner) liveRunners(context.Context) (live, assignable map[string]bool, ok bool) {
	v := r.runners
	v.mu.Lock()
	if !v.ready {
		v.mu.Unlock()
		return nil, nil, false
	}
	now := time.Now()
	live, assignable = make(map[string]bool, len(v.keys)), map[string]bool{}
	for id, k := range v.keys {
		if now.After(k.until) {
			delete(v.keys, id) // expired (max age)
			continue
		}
		live[id] = true
		if k.assignable {
			assignable[id] = true
		}
	}
	v.mu.Unlock()
	r.mu.Lock()
	draining := r.draining
	r.mu.Unlock()
	if draining {
		delete(live, r.id)
		delete(assignable, r.id)
	} else {
		live[r.id], assignable[r.id] = true, true
	}
	return live, assignable, true
}

// partitionPass is one round of rebalancing: claim the partitions
// assigned to this runner that nobody (alive) owns, release those
// assigned to another live runner.
func (r *Runner) partitionPass(ctx context.Context, releases *sync.WaitGroup) {
	live, assignable, ok := r.liveRunners(ctx)
	if !ok {
		return // cannot tell
	}
	ids := make([]string, 0, len(assignable))
	for id := range assignable {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for p := range r.nparts {
		want := partition.Owner(p, ids)
		t := r.parts
		t.mu.Lock()
		owner, rev, releasing := t.owner[p], t.rev[p], t.releasing[p]
		t.mu.Unlock()
		switch {
		case owner == r.id && want != r.id && !releasing:
			t.mu.Lock()
			t.releasing[p] = true
			t.mu.Unlock()
			releases.Add(1)
			go func() {
				defer releases.Done()
				r.release(ctx, p, rev)
			}()
		case want != r.id || owner == r.id:
		case owner == "":
			r.claim(ctx, p, 0, "")
		case !live[owner] && !r.alive(ctx, owner):
			r.claim(ctx, p, rev, owner)
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
	} else {
		got, err = r.partKV.Update(ctx, partKey(p), []byte(r.id), rev)
	}
	if err != nil && (rev == 0 || previous == "") && errors.Is(err, jetstream.ErrKeyExists) {
		// A key naming this runner that is no claim of its own (a
		// re-created bucket, lost writes: verifyPartition) is claimed
		// anew at its revision.
		if e, gerr := r.partKV.Get(ctx, partKey(p)); gerr == nil && string(e.Value()) == r.id {
			got, err = r.partKV.Update(ctx, partKey(p), []byte(r.id), e.Revision())
			if err == nil {
				r.parts.mu.Lock()
				if r.parts.owner[p] == "" {
					r.parts.rev[p] = 0 // the claim below is the revision to compare with
				}
				r.parts.mu.Unlock()
			}
		}
	}
	if err != nil {
		r.log.Debug("partition claim lost", "partition", p, "err", err)
		return
	}
	t := r.parts
	t.mu.Lock()
	if got > t.rev[p] {
		t.owner[p], t.rev[p] = r.id, got
	}
	t.scanDue[p], t.releasing[p] = true, false
	t.mu.Unlock()
	r.log.Info("partition claimed", "partition", p, "previous", previous)
}

// release gives partition p up (SEMANTICS §8, graceful: nothing uncertain).
// The partition is marked releasing (partitionPass): no run of it is
// acquired any more (owns answers runner_busy); the acquisitions that
// passed the ownership check before are waited for, so that their runs
// are handed off too. Then the runs of it this runner holds are handed
// off, their running bodies and model calls are waited for — up to their
// recorded deadlines (a body's attempt deadline, its tool timeout, is
// recorded with the attempt: bounded), at least the drain window — and
// recorded, and the runs are forgotten. Only when every run of the
// partition is handed off and forgotten (a run whose lock or hand-off
// could not be had is tried again, for as long as ctx lasts) is the key
// deleted at the revision this runner claimed it with, so that the
// runner it is assigned to claims it. When ctx ends first (the drain) the
// partition is left to the drain (releaseQuiet, releaseAll).
func (r *Runner) release(ctx context.Context, p int, rev uint64) {
	r.log.Info("releasing partition", "partition", p)
	if !r.waitAcquisitions(ctx, p) {
		return
	}
	back := backoff.New(50*time.Millisecond, time.Second)
	for {
		r.handOff(ctx, r.runsOf(p), handOffKeep)
		if !r.waitSettled(ctx, r.runsOf(p)) {
			return
		}
		r.handOff(ctx, r.runsOf(p), handOffForgetRecorded)
		left := r.runsOf(p)
		if len(left) == 0 {
			break
		}
		r.log.Warn("partition release: runs not handed off yet; trying again", "partition", p, "runs", len(left))
		r.testHook("release-retry", p, "")
		if back.Wait(ctx) != nil {
			return
		}
	}
	// Until the key is deleted the partition stays "releasing": none of
	// its runs is acquired here (a run this runner handed off is never
	// recovered by it).
	back = backoff.New(50*time.Millisecond, time.Second)
	for {
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := r.deletePartKey(fctx, p, rev)
		fcancel()
		if err == nil {
			break
		}
		r.log.Warn("partition release", "partition", p, "err", err)
		if back.Wait(ctx) != nil {
			return // the drain deletes it (releaseAll)
		}
	}
	r.testHook("release-deleted", p, "")
	t := r.parts
	t.mu.Lock()
	t.releasing[p] = false
	if t.owner[p] == r.id {
		t.owner[p] = ""
	}
	t.mu.Unlock()
}

// settleGrace is how long past a recorded deadline a release still waits
// for the work's outcome (the timeout's own recording).
const settleGrace = time.Second

// waitSettled waits until nothing of list (runs handed off) runs any more:
// no body running, no model call in flight. It waits at least the drain
// window and, for the work whose deadline is recorded, up to that
// deadline and settleGrace: a graceful release leaves nothing uncertain
// that would have finished in time (SEMANTICS §8). It returns false when
// ctx ends first.
func (r *Runner) waitSettled(ctx context.Context, list []*run) bool {
	limit := time.Now().Add(r.drain)
	for {
		busy, until := r.runningUntil(list)
		if !busy {
			return true
		}
		if until.After(limit) {
			limit = until
		}
		if time.Now().After(limit) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runningUntil reports whether something of list runs (as busyIn) and the
// latest wall-clock time its recorded deadlines (a running attempt's, an
// in-flight model call's) allow it, plus settleGrace. A run whose lock is
// held is busy, its deadline unknown (zero).
func (r *Runner) runningUntil(list []*run) (busy bool, until time.Time) {
	later := func(rn *run, at time.Time) {
		if w := time.Now().Add(at.Sub(r.clock(rn)) + settleGrace); w.After(until) {
			until = w
		}
	}
	for _, rn := range list {
		select {
		case rn.sem <- struct{}{}:
		default:
			busy = true // a command is being applied
			continue
		}
		if rn.takeover == nil && rn.driven {
			if rn.modelTurn != 0 {
				busy = true
				if m := aggregate.Pending(rn.state).Model; m != nil && !m.Deadline.IsZero() {
					later(rn, m.Deadline)
				}
			}
			for _, a := range rn.state.Actions() {
				if a.State == aggregate.ActionRunning {
					busy = true
					if a.Attempt.Deadline != nil {
						later(rn, *a.Attempt.Deadline)
					}
				}
			}
		}
		rn.unlock()
	}
	return busy, until
}

// deletePartKey deletes partition p's key at revision rev and, when the
// key moved on meanwhile but still names this runner (a server restart
// lost the revision this runner knew), at its current revision. A key
// that names another runner is left alone (nil: not ours to delete).
func (r *Runner) deletePartKey(ctx context.Context, p int, rev uint64) error {
	err := r.partKV.Delete(ctx, partKey(p), jetstream.LastRevision(rev))
	if err == nil {
		return nil
	}
	e, gerr := r.partKV.Get(ctx, partKey(p))
	switch {
	case errors.Is(gerr, jetstream.ErrKeyNotFound):
		return nil
	case gerr != nil:
		return err
	case string(e.Value()) != r.id:
		return nil
	}
	return r.partKV.Delete(ctx, partKey(p), jetstream.LastRevision(e.Revision()))
}

// releaseQuiet gives up, during a drain, every partition this runner
// owns whose runs (handed off at the start of the drain) have nothing
// running any more: they are forgotten and the key deleted, so that the
// partition moves at once instead of at the end of the window.
//
// As in release, the acquisitions in flight are waited for first, and the
// key is deleted only once every run of the partition this runner holds
// is handed off and forgotten (otherwise the partition is tried again,
// and at the end of the drain released with the runner: releaseAll).
func (r *Runner) releaseQuiet(ctx context.Context) {
	t := r.parts
	for _, p := range r.ownedPartitions() {
		t.mu.Lock()
		t.releasing[p] = true
		t.mu.Unlock()
		if !r.waitAcquisitions(ctx, p) {
			return
		}
		list := r.runsOf(p)
		if r.busyIn(list) {
			continue
		}
		r.handOff(ctx, list, handOffForgetRecorded)
		if len(r.runsOf(p)) > 0 {
			continue
		}
		t.mu.Lock()
		rev, mine := t.rev[p], t.owner[p] == r.id
		if mine {
			t.owner[p] = ""
		}
		t.mu.Unlock()
		if !mine {
			continue
		}
		if err := r.deletePartKey(ctx, p, rev); err != nil {
			r.log.Debug("partition release", "partition", p, "err", err)
		}
	}
}

// releaseAll deletes the keys of every partition this runner owns (a
// drained runner, once its runs are handed off and forgotten).
func (r *Runner) releaseAll(ctx context.Context) {
	t := r.parts
	t.mu.Lock()
	type owned struct {
		p   int
		rev uint64
	}
	var list []owned
	for p, o := range t.owner {
		if o == r.id {
			list = append(list, owned{p, t.rev[p]})
			t.owner[p] = ""
		}
	}
	t.mu.Unlock()
	for _, o := range list {
		if err := r.deletePartKey(ctx, o.p, o.rev); err != nil {
			r.log.Debug("partition release", "partition", o.p, "err", err)
		}
	}
}

// scanPartitions wakes the driver entries of the owned partitions due for
// a scan (all owned ones with all): the runs some runner drove with work in
// flight that this runner does not hold, bounded (takeOrphans). An idle
// run has no entry (idle.go): it costs nothing until a command, a report
// or a timer reaches it.
func (r *Runner) scanPartitions(ctx context.Context, all bool) {
	t := r.parts
	t.mu.Lock()
	var due []int
	for p, o := range t.owner {
		if o == r.id && !t.releasing[p] && (all || t.scanDue[p]) {
			due = append(due, p)
		}
	}
	t.mu.Unlock()
	if len(due) == 0 {
		return
	}
	filters := make([]string, len(due))
	for i, p := range due {
		filters[i] = partPrefix(p) + ".>"
	}
	entries, err := r.driverEntries(ctx, filters)
	if err != nil {
		r.log.Debug("list driver entries", "err", err)
		return
	}
	var todo []string
	for run := range entries {
		if r.isQuarantined(run) {
			continue // watchQuarantined wakes it once repaired
		}
		r.mu.Lock()
		_, held := r.runs[run]
		_, loading := r.loading[run]
		r.mu.Unlock()
		if held || loading {
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
	if failed := r.takeOrphans(ctx, mine, entries); failed > 0 || len(mine) < len(todo) {
		return // scanned again next time
	}
	t.mu.Lock()
	for _, p := range due {
		t.scanDue[p] = false
	}
	t.mu.Unlock()
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

// markerTTL is how long the marker of a removed weft_drivers entry is
// kept: a lease (at least a second, the server's smallest message TTL).
// Nothing reads the markers (a scan, driverEntries, ignores removals); a
// marker only has to outlive the purge's own acknowledgement.
func markerTTL(lease time.Duration) time.Duration { return max(lease, time.Second) }

// removeDriverKey removes run's weft_drivers entry — at revision rev when
// rev is not 0 — with a purge whose marker expires after markerTTL. A
// plain delete leaves a marker forever: every partition scan, a
// last-per-subject watch of the bucket, then costs the server one message
// per run that ever had work in flight (issue 17: an idle or finished run
// costs nothing; at a million runs an idle runner's scans kept nats-server
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

// jsMessageTTLDisabled is nats-server's JSMessageTTLDisabledErr: a
// message TTL on a stream that does not allow them.
const jsMessageTTLDisabled jetstream.ErrorCode = 10166
