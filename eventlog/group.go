package eventlog

import (
	"github.com/weftrun/weft/internal/groupcommit"
)

// Group commit (docs/adr/0025-group-commit.md; internal/groupcommit): with
// WithGroupCommit, the publishes of Appends that wait at the same time,
// when they are at least 16, leave together as ONE JetStream atomic batch.
// Each message is the very one Append would publish alone, so per-run
// optimistic concurrency is unchanged. A batch refused whole (one run's
// head moved, a duplicate, a limit) or not acknowledged is published
// again message by message: the run whose head moved gets its conflict,
// the others land (or, when the batch had landed after all, are answered
// "wrong last sequence" and Append finds its message id in the log, as for
// any lost acknowledgement). So one run's conflict costs the others one
// retry, never their decision.

// WithGroupCommit makes the Appends of this Log that wait at the same time
// leave together as one atomic batch when there are 16 or more of them
// (fewer are published one by one, concurrently; see CommitStats). It
// pays on a server with sync_interval: always, where a batch is one fsync;
// on one that syncs on its interval a batch costs more than it saves. On a
// stream that does not allow atomic publish the Log publishes one by one
// after a refusal, and tries a batch again after a cool-down.
func WithGroupCommit() Option {
	return func(l *Log) {
		g := groupcommit.New(l.js, l.publish)
		l.group, l.publish = g, g.Publish
	}
}

// CommitStats counts, process-wide, what group commit sent: the log's
// appends, the runner's task copies and the worker's claims.
type CommitStats struct {
	// Batches is how many atomic batches committed.
	Batches uint64
	// Batched is how many messages those batches held.
	Batched uint64
	// Retried is how many messages were published again on their own
	// after their batch was refused or not acknowledged.
	Retried uint64
}

// ReadCommitStats returns the process's group-commit counts.
func ReadCommitStats() CommitStats {
	s := groupcommit.Read()
	return CommitStats{Batches: s.Batches, Batched: s.Batched, Retried: s.Retried}
}
