package partition

import (
	"slices"
	"time"
)

// The rebalancing choice of a runner (docs/adr/0019-partitions.md,
// decision 4), pure: no I/O, no clock (the time is passed in). The
// runner's ownership (runner/internal/ownership/pass.go: Table.Pass)
// reads its table of the partitions' owners and its view of the live
// runners, asks Decide what to do with each partition, performs the
// claims and starts the releases, whose runs the runner hands off
// (runner/release.go) before the key is deleted. The judgement of a peer
// whose liveness key is absent (Judge) is made here on the facts the
// runner read (docs/semantics.md §8: only a runner that is gone is
// recovered from).

// Slot is a partition as a runner's table sees it: the runner its key in
// weft_partitions names ("" when absent or deleted), the key's revision,
// and whether this runner, its owner, is releasing it.
type Slot struct {
	Owner     string
	Rev       uint64
	Releasing bool
}

// Do is what a runner does with a partition in a round.
type Do int

const (
	// Nothing means the partition stays as it is.
	Nothing Do = iota
	// Claim means: create the partition's key (Rev 0: absent or deleted) or
	// update it at Rev (it names Previous, a runner judged gone). One
	// claim of several wins.
	Claim
	// Release means: hand off the runs of the partition this runner holds and
	// delete its key at Rev (the claim's revision).
	Release
	// Postpone means the partition is assigned to another runner, but a run
	// of it has work without a deadline; it is released once that work
	// ended.
	Postpone
)

// String names d as the scripts print it.
func (d Do) String() string {
	switch d {
	case Claim:
		return "claim"
	case Release:
		return "release"
	case Postpone:
		return "postpone"
	}
	return "nothing"
}

// Move is the choice for one partition.
type Move struct {
	Partition int
	Do        Do
	Rev       uint64 // Claim: the revision to update at (0: create); Release: the revision to delete at
	Previous  string // Claim: the owner judged gone ("" when nobody owned it)
}

// Round is what a runner knows in one round of rebalancing.
type Round struct {
	// Self is this runner's id.
	Self string
	// Runners are the runners the partitions are assigned among (their
	// heartbeat names this deployment's number of partitions and they do
	// not drain), this one included unless it drains (Members).
	Runners []string
	// Live are the runners whose liveness key is in the view.
	Live map[string]bool
	// Gone judges a runner that is not live (its key left the view):
	// true only when it is gone (Judge); "cannot tell" is false. It is
	// asked only for the owner of a partition this runner would claim.
	Gone func(id string) bool
	// Unbounded reports whether a run of partition p this runner holds
	// has work without a recorded deadline.
	Unbounded func(p int) bool
}

// Decide chooses what this runner does with partition p, whose slot in
// its table is s: release it when this runner owns it and it is assigned
// to another runner (postponed while work without a deadline runs of
// it), claim it when it is assigned to this runner and nobody owns it or
// its owner is gone, nothing otherwise — a live owner releases a
// partition itself, and a partition being released is left to that.
func (r Round) Decide(p int, s Slot) Move {
	want := Owner(p, r.Runners)
	switch {
	case s.Owner == r.Self && want != r.Self && !s.Releasing:
		if r.Unbounded != nil && r.Unbounded(p) {
			return Move{Partition: p, Do: Postpone}
		}
		return Move{Partition: p, Do: Release, Rev: s.Rev}
	case want != r.Self || s.Owner == r.Self:
	case s.Owner == "":
		return Move{Partition: p, Do: Claim}
	case !r.Live[s.Owner] && r.Gone != nil && r.Gone(s.Owner):
		return Move{Partition: p, Do: Claim, Rev: s.Rev, Previous: s.Owner}
	}
	return Move{Partition: p, Do: Nothing}
}

// Plan decides every partition of table (Decide) and returns the moves
// that are not Nothing, in partition order.
func (r Round) Plan(table []Slot) []Move {
	var out []Move
	for p, s := range table {
		if m := r.Decide(p, s); m.Do != Nothing {
			out = append(out, m)
		}
	}
	return out
}

// Member is a liveness key as a runner's view of weft_runners holds it:
// whether its runner takes part in the assignment, and until when the
// view counts it (a lease after the view last saw the key change, by
// the viewer's own clock).
type Member struct {
	Assignable bool
	Until      time.Time
}

// Members returns, from the view's keys at now, the live runners and,
// among them, those the partitions are assigned among (sorted), with self
// in both unless it drains, and the keys that expired (their runner
// stopped beating for a lease: the view drops them).
func Members(view map[string]Member, self string, draining bool, now time.Time) (live map[string]bool, runners, expired []string) {
	live = make(map[string]bool, len(view)+1)
	for id, m := range view {
		if now.After(m.Until) {
			expired = append(expired, id)
			continue
		}
		live[id] = true
		if m.Assignable {
			runners = append(runners, id)
		}
	}
	runners = slices.DeleteFunc(runners, func(id string) bool { return id == self })
	if draining {
		delete(live, self)
	} else {
		live[self] = true
		runners = append(runners, self)
	}
	slices.Sort(runners)
	slices.Sort(expired)
	return live, runners, expired
}
