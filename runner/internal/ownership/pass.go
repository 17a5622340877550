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
//
// An owner whose key left the view that the judgement cannot tell gone, or
// a view that cannot tell, for staleAfter (the grace of a new view and a
// lease), and a round that took as long, are said at Warn (stale.go).
func (t *Table) Pass(ctx context.Context, peers *Peers, unbounded func(p int) bool, release func(p int, rev uint64)) bool {
	start := peers.cfg.Clock.Now()
	peers.roundBegan(start)
	defer peers.noteRound(start)
	live, runners, ok := peers.liveRunners()
	if !ok {
		peers.noteBlind()
		return false // cannot tell
	}
	var stuck map[string]*undecided
	// One judgement per owner in a round: a gone owner's many partitions
	// are judged once, and a judgement that cannot tell (a server that
	// does not answer: up to three bounded reads) is not made again for
	// each of them, holding the round for as many times as long.
	// Remembering "cannot tell" for the round only postpones a claim to
	// the next round; "gone" is remembered longer already (seenGone).
	var judged map[string]ownerLook
	cur := 0
	round := partition.Round{Self: t.cfg.ID, Runners: runners, Live: live,
		Gone: func(id string) bool {
			j, ok := judged[id]
			if !ok {
				j.alive, j.saw = peers.look(ctx, id)
				peers.cfg.Log.Debug("partition owner judged", "owner", id, "gone", !j.alive, "saw", j.saw)
				if judged == nil {
					judged = map[string]ownerLook{}
				}
				judged[id] = j
			}
			alive, saw := j.alive, j.saw
			if alive {
				if stuck == nil {
					stuck = map[string]*undecided{}
				}
				u := stuck[id]
				if u == nil {
					u = &undecided{}
					stuck[id] = u
				}
				u.partitions, u.saw = append(u.partitions, cur), saw
			}
			return !alive
		},
		Unbounded: unbounded}
	var liveOwners map[string][]int
	defer func() {
		peers.noteUndecided(stuck)
		peers.noteLiveOwners(ctx, liveOwners)
	}()
	for p := range t.cfg.Partitions {
		cur = p
		peers.roundAt(p)
		s := t.slot(p)
		if o := s.Owner; o != "" && o != t.cfg.ID && live[o] && partition.Owner(p, runners) == t.cfg.ID {
			if liveOwners == nil {
				liveOwners = map[string][]int{}
			}
			liveOwners[o] = append(liveOwners[o], p)
		}
		switch m := round.Decide(p, s); m.Do {
		case partition.Release:
			t.setReleasing(p, true)
			release(p, m.Rev)
		case partition.Claim:
			t.claim(ctx, p, m.Rev, m.Previous)
		}
	}
	return true
}

// ownerLook is what a round's judgement of an owner found (Peers.look).
type ownerLook struct {
	alive bool
	saw   string
}
