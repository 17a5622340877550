package runner

import "slices"

// Stats is what a runner holds and has done since it started: the
// figures by which its cost follows its own runs, not every run in the
// system (docs/adr/0019-partitions.md).
type Stats struct {
	// ID is the runner's id.
	ID string
	// Partitions are the partitions it owns, in increasing order.
	Partitions []int
	// Driven is how many runs it holds in memory (idle runs it evicted
	// are not counted).
	Driven int
	// Loaded is how many times it read a run from the log (a snapshot and
	// its tail, or the whole history) since it started.
	Loaded uint64
	// TakenOver is how many takeovers (run_recovered appends) it made
	// since it started.
	TakenOver uint64
	// InternalRefusals is how many decisions the runtime derived itself
	// (a takeover, a timer, a resolution, a model's answer) the decision
	// core refused since it started: each is a bug, logged at error level
	// (docs/semantics.md §8, "A run can always be answered").
	InternalRefusals uint64
}

// Stats returns the runner's current Stats.
func (r *Runner) Stats() Stats {
	r.mu.Lock()
	driven := len(r.runs)
	r.mu.Unlock()
	return Stats{ID: r.id, Partitions: slices.Clone(r.ownedPartitions()), Driven: driven, Loaded: r.loaded.Load(), TakenOver: r.takenOver.Load(), InternalRefusals: r.internalRefusals.Load()}
}
