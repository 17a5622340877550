package ownership

// The table of the partitions' owners (docs/adr/0019-partitions.md): this
// runner's own claims at once, everyone's through a watcher of
// weft_partitions. Every run belongs to the partition partition.Of(run,
// P); each partition has one owner, the runner whose id is the value of
// its key p.<nnnn>, and only the owner acquires the partition's runs.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/partition"
)

// tableRunner is what the Table needs from the command loop: to drop the
// runs of a partition it lost (through the Coordinator: tableLoop).
type tableRunner interface {
	// ForgetPartition drops the runs of partition p this runner holds,
	// taking each run's lock for at most a few seconds.
	ForgetPartition(ctx context.Context, p int)
	// ForgetPartitionLater does so in the background: the caller may
	// hold one of the runs (locked), which it drops itself.
	ForgetPartitionLater(p int)
}

// TableConfig is what a Table reads: this runner's identity, the
// deployment's partitions, the connection and the weft_partitions bucket.
// Every field but Log and Hook is required.
type TableConfig struct {
	ID         string
	Partitions int
	Conn       *nats.Conn         // reads a key from the stream's leader; its reconnect count (VerifyOwned)
	KV         jetstream.KeyValue // weft_partitions
	Bucket     string             // KV's name (weft_partitions)
	Log        *slog.Logger
	// Hook, when set (tests), is called at the named points of a
	// release (release.go): "release-acquiring" when it waits for an
	// acquisition in flight, "release-check" once none is, before the
	// runs are handed off, "release-deleted" once the key is deleted,
	// "release-quiet" before ReleaseQuiet deletes a key.
	Hook func(event string, p int)
}

// Table is this runner's view of the partitions' owners. Its lock is its
// own, never held while the command loop's is taken, nor the other way.
type Table struct {
	cfg  TableConfig
	loop tableRunner

	mu        sync.Mutex
	owner     []string // by partition; "" when nobody owns it
	rev       []uint64 // revision of the key's last message
	releasing []bool   // owned by this runner and being released
	scanDue   []bool   // owned; its driver entries are still to be woken
	// acquiring counts the acquisitions in flight by partition
	// (Acquiring); acquired is closed (and replaced) whenever a count
	// drops to zero.
	acquiring []int
	acquired  chan struct{}
	ready     chan struct{}
	kick      chan struct{} // a partition was released, a runner left: pass again now

	owned reconnectCheck // the reconnect check of the owned partitions (VerifyOwned)
}

// reconnectCheck is the state of the reconnect check (VerifyOwned).
type reconnectCheck struct {
	mu         sync.Mutex
	reconnects uint64 // the connection's reconnect count the owned partitions were verified at
}

// NewTable returns the Table of cfg, owning nothing, its reconnect check
// at the connection's current reconnect count (nothing owned to verify).
func NewTable(cfg TableConfig, loop tableRunner) *Table {
	n := cfg.Partitions
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	t := &Table{cfg: cfg, loop: loop, owner: make([]string, n), rev: make([]uint64, n), releasing: make([]bool, n), scanDue: make([]bool, n),
		acquiring: make([]int, n), acquired: make(chan struct{}), ready: make(chan struct{}), kick: make(chan struct{}, 1)}
	t.owned.reconnects = cfg.Conn.Stats().Reconnects
	return t
}

func (t *Table) hook(event string, p int) {
	if t.cfg.Hook != nil {
		t.cfg.Hook(event, p)
	}
}

// Key is partition p's key in weft_partitions.
func Key(p int) string { return fmt.Sprintf("p.%04d", p) }

// Ready returns a channel closed once the watcher delivered the bucket
// as it is.
func (t *Table) Ready() <-chan struct{} { return t.ready }

// Kicked returns the channel Kick signals: the partition loop passes
// again when it receives.
func (t *Table) Kicked() <-chan struct{} { return t.kick }

// Kick makes the partition loop pass again now (a partition was released,
// a runner left). A nil Table (a runner not running) ignores it.
func (t *Table) Kick() {
	if t == nil {
		return
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// OwnerOf returns partition p's owner as this runner sees it, and whether
// this runner is releasing it.
func (t *Table) OwnerOf(p int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owner[p], t.releasing[p]
}

// Owned lists the partitions this runner owns (none for a nil Table).
func (t *Table) Owned() []int {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for p, o := range t.owner {
		if o == t.cfg.ID {
			out = append(out, p)
		}
	}
	return out
}

// slot returns partition p as the rebalancing choice reads it
// (partition.Round.Decide).
func (t *Table) slot(p int) partition.Slot {
	t.mu.Lock()
	defer t.mu.Unlock()
	return partition.Slot{Owner: t.owner[p], Rev: t.rev[p], Releasing: t.releasing[p]}
}

// setReleasing marks partition p being released (no run of it is
// acquired any more) or not (a release postponed).
func (t *Table) setReleasing(p int, releasing bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releasing[p] = releasing
}

// deleted records that partition p's key was deleted by its release: not
// releasing, and not owned by this runner any more.
func (t *Table) deleted(p int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releasing[p] = false
	if t.owner[p] == t.cfg.ID {
		t.owner[p] = ""
	}
}

// scanDueList lists the partitions this runner owns and does not release
// whose driver entries are still to be woken (all owned ones with all),
// and the revision each is owned at.
func (t *Table) scanDueList(all bool) (due []int, revs []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, o := range t.owner {
		if o == t.cfg.ID && !t.releasing[p] && (all || t.scanDue[p]) {
			due, revs = append(due, p), append(revs, t.rev[p])
		}
	}
	return due, revs
}

// scanned records that the driver entries of partitions ps, owned at
// revisions revs when they were listed, were all woken. A partition owned
// at another revision since (lost and claimed again while the scan ran
// beside the rounds of rebalancing) stays due: its entries are the new
// claim's to wake.
func (t *Table) scanned(ps []int, revs []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, p := range ps {
		if t.rev[p] == revs[i] {
			t.scanDue[p] = false
		}
	}
}

// ScanAll makes every owned partition due for a scan (the driver entries
// were rebuilt).
func (t *Table) ScanAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, o := range t.owner {
		if o == t.cfg.ID {
			t.scanDue[p] = true
		}
	}
}

// Assume makes the table say that this runner owns partition p at
// revision rev, not releasing it, not due: as the table of a runner paused
// (SIGSTOP) or cut off while another claimed the partition says. For
// tests (runner.StaleView).
func (t *Table) Assume(p int, rev uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.owner[p], t.rev[p], t.releasing[p], t.scanDue[p] = t.cfg.ID, rev, false, false
}

// ForgetReconnectCheck makes the next VerifyOwned verify the owned
// partitions as after a reconnection. For tests.
func (t *Table) ForgetReconnectCheck() {
	t.owned.mu.Lock()
	defer t.owned.mu.Unlock()
	t.owned.reconnects = ^uint64(0)
}

// Acquiring counts an acquisition in flight in partition p until done is
// called (Coordinator.Acquiring says why). A nil Table counts nothing.
func (t *Table) Acquiring(p int) (done func()) {
	if t == nil {
		return func() {}
	}
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
func (t *Table) waitAcquisitions(ctx context.Context, p int) bool {
	for hooked := false; ; hooked = true {
		t.mu.Lock()
		n, ch := t.acquiring[p], t.acquired
		t.mu.Unlock()
		if n == 0 {
			return true
		}
		if !hooked {
			t.hook("release-acquiring", p)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}
