package ownership

// The partition loop (docs/adr/0019-partitions.md): the rounds of
// rebalancing every lease/4 or when kicked, the check of the owned
// partitions after a reconnection, the releases the rounds start and the
// wake of the owned partitions' driver entries beside it.

import (
	"context"
	"sync"
)

// partitionLoop rebalances the partitions every lease/4 (pass) until ctx
// ends, and wakes the driver entries of the partitions it claimed
// (wakeBeside). It returns once the wake in flight ended too.
func (c *Coordinator) partitionLoop(ctx context.Context) {
	// Made before the first wake: a test on a fake clock (the runner's
	// ownClock.armed) takes the first scan's end as the ticker armed.
	t := c.cfg.Clock.NewTicker(c.cfg.Lease / 4)
	defer t.Stop()
	w := &waker{busy: make(chan struct{}, 1)}
	defer w.wg.Wait()
	// Every owned partition is scanned at the start, and again now and
	// then: entries a failed wake left, or put by a runner that did not
	// know it lost the partition.
	all := !c.wakeBeside(ctx, w, true)
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-c.table.Kicked():
		}
		if err := c.table.VerifyOwned(ctx); err != nil {
			c.cfg.Log.Debug("verify partitions", "err", err)
		}
		c.pass(ctx)
		all = all || tick%32 == 0
		if c.wakeBeside(ctx, w, all) {
			all = false
		}
	}
}

// waker is the partition loop's wake in flight (wakeBeside): at most one.
type waker struct {
	busy chan struct{} // holds a token while a wake runs
	wg   sync.WaitGroup
}

// wakeBeside starts, beside the partition loop, the wake of the runs the
// command loop looks after — the quarantined runs repaired
// (CommandLoop.WatchQuarantined), the driver entries of the owned
// partitions due, all of them with all (Table.Scan, which asks
// CommandLoop.WakePartitions) — unless one still runs (false: the
// partitions stay due, woken by the next). A wake may wait on the server
// for up to its timeouts (a watch of weft_drivers whose consumer a server
// restart lost waits its whole 30 s, a takeover's reads as long): run in
// the loop, it held every round of rebalancing meanwhile, and the
// partitions of a peer that died then stayed its own, every command of
// their runs forwarded to a runner that does not answer
// (docs/semantics.md §8: a run can always be answered). A release
// meanwhile waits for the wake's acquisitions (Table.Release), as for a
// command's.
func (c *Coordinator) wakeBeside(ctx context.Context, w *waker, all bool) bool {
	if c.cfg.NoScan {
		return true
	}
	select {
	case w.busy <- struct{}{}:
	default:
		return false
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.busy }()
		c.loop.WatchQuarantined(ctx)
		c.table.Scan(all, func(due []int) bool { return c.loop.WakePartitions(ctx, due) })
		c.hook("partition-scanned", -1, "") // a test on a fake clock steps after it
	}()
	return true
}

// pass is one round of rebalancing (Table.Pass: claim the partitions
// assigned to this runner that nobody alive owns, release those assigned
// to another live runner); each release runs in the background, counted
// in releases.
func (c *Coordinator) pass(ctx context.Context) {
	if !c.table.Pass(ctx, c.peers, c.loop.Unbounded, func(p int, rev uint64) {
		c.releases.Add(1)
		go func() {
			defer c.releases.Done()
			c.release(ctx, p, rev)
		}()
	}) {
		return // cannot tell
	}
	c.hook("partition-pass", -1, "")
}

// release gives partition p up (docs/semantics.md §8, graceful: nothing
// uncertain). The pass marked it releasing (Table.Pass): no run of it is
// acquired any more (OwnerOf says releasing). The table's Release waits
// for the acquisitions that passed the ownership check before, and
// deletes the key at the revision this runner claimed it with once the
// command loop handed off and forgot every run of it this runner holds
// (CommandLoop.HandOff), so that the runner it is assigned to claims it.
// When ctx ends first (the drain) the partition is left to the drain
// (releaseQuiet, Release).
func (c *Coordinator) release(ctx context.Context, p int, rev uint64) {
	c.table.Release(ctx, p, rev, func(ctx context.Context) HandOff { return c.loop.HandOff(ctx, p, false) })
}

// releaseQuiet gives up, during a drain, every partition this runner
// owns whose runs (handed off at the start of the drain) have nothing
// running any more: they are forgotten and the key deleted, so that the
// partition moves at once instead of at the end of the window.
//
// As in release, the acquisitions in flight are waited for first
// (Table.ReleaseQuiet), and the key is deleted only once every run of the
// partition this runner holds is handed off and forgotten (otherwise the
// partition is tried again, and at the end of the drain released with the
// runner: Release, Close).
func (c *Coordinator) releaseQuiet(ctx context.Context) {
	c.table.ReleaseQuiet(ctx, func(ctx context.Context, p int) bool {
		return c.loop.HandOff(ctx, p, true) == HandedOff
	})
}
