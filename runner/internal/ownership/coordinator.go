package ownership

// The Coordinator (docs/adr/0019-partitions.md): the Table and the Peers
// of a runner and what drives them — the heartbeat, the watchers, the
// partition loop (its ticker and kick, the check after a reconnection, the
// rounds of rebalancing, the releases they start, the wake of the owned
// partitions' driver entries beside it) and the releases of a drain. The
// runs' part of all of it is the command loop's (CommandLoop).

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftrun/weft/internal/clock"
)

// CommandLoop is what the Coordinator asks of the command loop that runs
// it (the runner): what acts on the runs it holds. Its methods take the
// loop's own locks; the Coordinator calls them with none of its own held
// but ForgetPartition with later, which only starts a task, called under
// the reconnect check's lock (Table.VerifyOwned).
type CommandLoop interface {
	// Draining reports whether this runner drains: it beats so, is
	// assigned no partition, and judges itself not alive.
	Draining() bool
	// ForgetPartition drops the runs of partition p this runner holds
	// (a partition lost), taking each run's lock for at most a few
	// seconds; with later, in the background: the caller may hold one of
	// the runs (locked), which it drops itself.
	ForgetPartition(ctx context.Context, p int, later bool)
	// Unbounded reports whether a run of partition p this runner holds
	// has work running without a recorded deadline: the partition is not
	// released (Pass) until that work ends.
	Unbounded(p int) bool
	// HandOff hands off and forgets the runs of partition p (releasing,
	// its acquisitions waited for) this runner holds. Without quiet (a
	// release of a round, Release) it waits for their work in flight, up
	// to its recorded deadlines, tries again until ctx ends, and says what
	// it came to. With quiet (a drain, ReleaseQuiet) it hands off only
	// when nothing of them runs any more, once, and answers HandedOff
	// when no run of p is held afterwards, Postponed otherwise.
	HandOff(ctx context.Context, p int, quiet bool) HandOff
	// WatchQuarantined wakes the quarantined runs that were repaired
	// (beside the partition loop, before each scan of the driver
	// entries).
	WatchQuarantined(ctx context.Context)
	// WakePartitions wakes the driver entries of the partitions due
	// (owned, not releasing, due for a scan: Table.Scan lists them, beside
	// the partition loop). It returns whether every entry's run was woken
	// (false: the partitions stay due, scanned again by the next wake).
	WakePartitions(ctx context.Context, due []int) bool
}

// CoordinatorConfig is what a Coordinator reads: this runner's identity
// and lease, the deployment's partitions, the connection and the buckets.
// Every field but Stamp, Log, NoScan and Hook is required.
type CoordinatorConfig struct {
	ID         string
	Lease      time.Duration
	Partitions int
	Conn       *nats.Conn
	PartKV     jetstream.KeyValue // weft_partitions
	PartBucket string             // its name
	Live       jetstream.KeyValue // weft_runners
	LiveStream jetstream.Stream   // Live's stream, for reading the keys' markers
	LiveBucket string             // its name
	// Clock measures this process's intervals and drives the tickers
	// (liveness, the runners view, the partition loop): the wall clock, a
	// clock.Fake in tests. Stamp stamps a beat's recorded time.
	Clock clock.Clock
	Stamp func() time.Time
	Log   *slog.Logger
	// NoScan (tests) makes the partition loop wake nothing (no
	// WatchQuarantined, no WakePartitions).
	NoScan bool
	// Hook, when set (tests), is called at the named points: the Table's
	// (key ""), the Peers' (p -1), "partition-pass" after a round that
	// could tell, "partition-scanned" after a wake (both p -1, key "").
	Hook func(event string, p int, key string)
}

// Coordinator is this runner's partition ownership: its Table, its Peers
// and the goroutines that drive them, from Start to Leave (Close ends the
// goroutines, Leave deletes the keys). Its methods are
// the boundary the command loop uses (doc.go lists it).
type Coordinator struct {
	cfg   CoordinatorConfig
	loop  CommandLoop
	table *Table
	peers *Peers

	// bg is the context of the watchers, the first round and the
	// partition loop, which stop ends (Stop); stopBeat ends the heartbeat
	// (Close). group holds them all (none fails); loopDone is closed once
	// the partition loop ended (nil until StartLoop), releases counts the
	// releases the rounds started. Start, StartLoop, Stop and Close write
	// and read them on the one goroutine that runs the Coordinator (the
	// runner's Run): no lock.
	bg             context.Context
	stop, stopBeat context.CancelFunc
	group          errgroup.Group
	loopDone       chan struct{}
	releases       sync.WaitGroup
}

// NewCoordinator returns the Coordinator of cfg, run by loop, owning
// nothing, its first period of continuous view beginning now.
func NewCoordinator(cfg CoordinatorConfig, loop CommandLoop) *Coordinator {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Coordinator{cfg: cfg, loop: loop}
	c.table = NewTable(TableConfig{
		ID: cfg.ID, Partitions: cfg.Partitions, Conn: cfg.Conn, KV: cfg.PartKV, Bucket: cfg.PartBucket, Log: cfg.Log,
		Hook: func(event string, p int) { c.hook(event, p, "") },
	}, tableLoop{c})
	c.peers = New(Config{
		ID: cfg.ID, Lease: cfg.Lease, Partitions: cfg.Partitions, Conn: cfg.Conn,
		Live: cfg.Live, LiveStream: cfg.LiveStream, Bucket: cfg.LiveBucket,
		Clock: cfg.Clock, Stamp: cfg.Stamp, Log: cfg.Log,
		Hook: func(event, key string) { c.hook(event, -1, key) },
	}, peersLoop{c})
	return c
}

func (c *Coordinator) hook(event string, p int, key string) {
	if c.cfg.Hook != nil {
		c.cfg.Hook(event, p, key)
	}
}

// tableLoop and peersLoop are what the Table and the Peers ask of the
// command loop, through the Coordinator.
type (
	tableLoop struct{ c *Coordinator }
	peersLoop struct{ c *Coordinator }
)

func (l tableLoop) ForgetPartition(ctx context.Context, p int) {
	l.c.loop.ForgetPartition(ctx, p, false)
}
func (l tableLoop) ForgetPartitionLater(p int) {
	l.c.loop.ForgetPartition(context.Background(), p, true)
}
func (l peersLoop) Draining() bool { return l.c.loop.Draining() }

// RunnersChanged makes the partition loop pass again now.
func (l peersLoop) RunnersChanged() { l.c.table.Kick() }

// Start beats, starts the watchers of weft_partitions and weft_runners
// and the heartbeat, waits until both views are ready (or ctx ends, or
// 30 s passed) and makes a first round of rebalancing: the partitions
// assigned to this runner that nobody owns are claimed before it serves
// (a lone runner owns every partition at once). It acquires no run: the
// partition loop, whose first act is a wake of every owned partition's
// driver entries (taking their runs over), starts with StartLoop, once
// the runner serves. A failed heartbeat is "cannot tell", never a reason
// to stop serving (the bucket may refuse writes, or be re-created by a
// server restart or an operator, while this runner starts): Heartbeat
// reset the judgement, so nobody is judged gone until a beat lands, and
// the loop beats again within lease/4.
func (c *Coordinator) Start(ctx context.Context) {
	if err := c.peers.Heartbeat(ctx); err != nil {
		c.cfg.Log.Warn("heartbeat failed; serving on", "err", err)
	}
	// The watchers and the partition loop live until the drain (Stop);
	// the heartbeat until the hand-off (Close).
	bg, stop := context.WithCancel(context.Background())
	hb, stopBeat := context.WithCancel(context.Background())
	c.bg, c.stop, c.stopBeat = bg, stop, stopBeat
	c.goDo(func() { _ = c.table.Watch(bg) })
	c.goDo(func() { _ = c.peers.WatchRunners(bg) })
	c.goDo(func() { c.peers.WatchRounds(bg) })
	c.goDo(func() { c.peers.HeartbeatLoop(hb) })
	startWait := time.After(30 * time.Second)
	for _, ready := range []<-chan struct{}{c.table.Ready(), c.peers.Ready()} {
		select {
		case <-ready:
		case <-ctx.Done():
		case <-startWait:
		}
	}
	c.pass(bg)
}

// StartLoop starts the partition loop (after Start; the runner calls it
// once it serves: its forwarded commands, its API): every lease/4 or when
// kicked, the check of the owned partitions after a reconnection, a round
// of rebalancing and the wake of the owned partitions' driver entries
// beside it, the first wake at once.
func (c *Coordinator) StartLoop() {
	if c.stop == nil || c.loopDone != nil {
		return
	}
	c.loopDone = make(chan struct{})
	c.goDo(func() {
		defer close(c.loopDone)
		c.partitionLoop(c.bg)
	})
}

func (c *Coordinator) goDo(f func()) {
	c.group.Go(func() error { f(); return nil })
}

// Stop ends the watchers and the partition loop (the drain begins: no
// round starts a release any more) and waits for the loop, if it was
// started, and for the releases the rounds started. A Coordinator not
// started stops at once; Stop may be called again.
func (c *Coordinator) Stop() {
	if c.stop == nil {
		return
	}
	c.stop()
	if c.loopDone != nil {
		<-c.loopDone
	}
	c.releases.Wait()
}

// Drain makes this runner's drain known to its peers (a beat: they assign
// it no partition from now on) and, until ctx ends or busy reports that
// no driven run has work in flight any more, gives up now and then the
// partitions whose runs have nothing running (ReleaseQuiet): those with
// nothing running move at once, the others once their work is done.
func (c *Coordinator) Drain(ctx context.Context, busy func() bool) {
	if err := c.peers.Heartbeat(ctx); err != nil {
		c.cfg.Log.Debug("heartbeat", "err", err)
	}
	for i := 0; ctx.Err() == nil; i++ {
		if i%5 == 0 {
			c.releaseQuiet(ctx)
		}
		if !busy() {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Release deletes the keys of every partition this runner owns but those
// of keep (a drained runner's, once its runs are handed off and
// forgotten: a partition's key is deleted only when none of its runs is
// driven here; Leave deletes the rest).
func (c *Coordinator) Release(ctx context.Context, keep []int) {
	busy := make(map[int]bool, len(keep))
	for _, p := range keep {
		busy[p] = true
	}
	var list []int
	for _, p := range c.table.Owned() {
		if !busy[p] {
			list = append(list, p)
		}
	}
	for _, p := range list {
		c.table.ReleaseKey(ctx, p)
	}
}

// Close stops (Stop), ends the heartbeat and waits for every goroutine
// of the Coordinator. It deletes nothing: the keys of the partitions this
// runner still owns and its liveness key are left to expire, unless Leave
// deletes them after. A Coordinator not started closes at once.
func (c *Coordinator) Close() {
	if c.stop == nil {
		return
	}
	c.Stop()
	c.stopBeat()
	_ = c.group.Wait()
}

// Leave deletes, not leaves to expire, the keys of the partitions this
// runner still owns, so that the runners they are assigned to claim them
// at once, and its liveness key, whose delete marker (kept for a lease)
// says this runner is gone, so that its runs are taken over at once (an
// absent key only counts as gone after a grace, see judgement). It is
// called after Close, once nothing of the runner acts on its runs any
// more. A Coordinator not started deletes nothing.
func (c *Coordinator) Leave() {
	if c.stop == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.Release(ctx, nil)
	_ = c.cfg.Live.Delete(ctx, c.cfg.ID)
}

// OwnerOf returns partition p's owner as this runner sees it (its
// watcher may be behind: Verify reads the store), and whether this runner
// is releasing it.
func (c *Coordinator) OwnerOf(p int) (string, bool) { return c.table.OwnerOf(p) }

// Owned lists the partitions this runner owns (none before Start).
func (c *Coordinator) Owned() []int {
	if c == nil {
		return nil
	}
	return c.table.Owned()
}

// Verify reads partition p's key from the stream's leader (before a
// takeover is recorded) and returns the runner it names (Table.Verify).
func (c *Coordinator) Verify(ctx context.Context, p int) (string, error) {
	return c.table.Verify(ctx, p)
}

// Acquiring counts an acquisition in flight in partition p (a read of a
// run from the log, a start) until done is called, and then, after each
// reconnection of the connection, verifies every owned partition against
// weft_partitions before anything is acquired (Table.VerifyOwned): err
// says a key could not be read (checked again at the next acquisition).
// done is to be called in every case. It is counted before the ownership
// check (OwnerOf), under the lock that marks a partition releasing, so
// that a release either makes the check fail or finds the acquisition
// counted and waits for it (Table.Release) before it lists the
// partition's runs to hand them off: no run is installed behind a
// release's back (docs/semantics.md §8: the releasing runner would drive
// a run its partition's new owner takes over). A Coordinator not started
// counts and verifies nothing.
func (c *Coordinator) Acquiring(ctx context.Context, p int) (done func(), err error) {
	if c == nil {
		return func() {}, nil
	}
	done = c.table.Acquiring(p)
	return done, c.table.VerifyOwned(ctx)
}

// NonParticipant reports whether runner id is alive and takes no part in
// the partitions (an older release still driving its runs).
func (c *Coordinator) NonParticipant(ctx context.Context, id string) bool {
	return c.peers.NonParticipant(ctx, id)
}

// ScanAll makes every owned partition due for a scan of its driver
// entries again (the driver index was rebuilt).
func (c *Coordinator) ScanAll() { c.table.ScanAll() }

// Assume makes the table say again that this runner owns partition p at
// revision rev (tests: a view behind the store).
func (c *Coordinator) Assume(p int, rev uint64) { c.table.Assume(p, rev) }

// ForgetReconnectCheck makes the next acquisition verify the owned
// partitions as after a reconnection (tests).
func (c *Coordinator) ForgetReconnectCheck() { c.table.ForgetReconnectCheck() }
