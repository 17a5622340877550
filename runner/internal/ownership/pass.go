package ownership

import (
	"context"

	"github.com/weftrun/weft/partition"
)

// Pass is one round of rebalancing (docs/adr/0019-partitions.md): it
// claims the partitions assigned to this runner that nobody (alive) owns
// and marks releasing those assigned to another live runner, handing each
// to release, which gives it up (Release: the runs of it the command loop
// holds are handed off before its key is deleted). The choice is
// partition.Round.Decide on the runners peers' view lists; unbounded tells
// it whether a run of a partition has work without a deadline (its
// release is postponed). Pass returns false, having done nothing, when
// the view cannot tell.
func (t *Table) Pass(ctx context.Context, peers *Peers, unbounded func(p int) bool, release func(p int, rev uint64)) bool {
	live, runners, ok := peers.liveRunners()
	if !ok {
		return false // cannot tell
	}
	round := partition.Round{Self: t.cfg.ID, Runners: runners, Live: live,
		Gone:      func(id string) bool { return !peers.alive(ctx, id) },
		Unbounded: unbounded}
	for p := range t.cfg.Partitions {
		switch m := round.Decide(p, t.slot(p)); m.Do {
		case partition.Release:
			t.setReleasing(p, true)
			release(p, m.Rev)
		case partition.Claim:
			t.claim(ctx, p, m.Rev, m.Previous)
		}
	}
	return true
}
