// Package protocol holds the names every part of Weft agrees on over
// NATS: the JetStream streams, consumers and KV buckets (the assets
// docs/protocol/10-log.md, 40-commands.md and 41-tasks.md describe) and
// the message size they need. It is the one definition of each name:
// packages eventlog, api, worker, runner, projector, timer, provision and
// roles name them through it (TestOneDefinitionOfEachAssetName), and it
// imports nothing, so a program that only needs a name links nothing
// else (no NATS server). The wire types, subjects, error envelope and
// request helper that use these names live in package api, the wire
// protocol's home (docs/adr/0034).
package protocol

// The streams.
const (
	// EventsStream is the stream holding the event log: weft.ev.<run>.events.
	EventsStream = "WEFT_EVENTS"
	// TasksStream is the work-queue stream of tool tasks:
	// weft.task.<agent>.<version token>.<tool>.
	TasksStream = "WEFT_TASKS"
	// TimersStream is the stream holding the runners' armed schedules and
	// their firings.
	TimersStream = "WEFT_TIMERS"
)

// The durable consumers.
const (
	// TimersConsumer is the durable consumer of TimersStream shared by all
	// runners.
	TimersConsumer = "weft_timers"
	// TaskConsumerPrefix prefixes the durable consumer of a tool queue,
	// shared by all of its workers: weft_task_<agent>@<version token>@<tool>.
	TaskConsumerPrefix = "weft_task_"
)

// The KV buckets of the runtime.
const (
	// CommandsBucket keeps the replies of commands by command id.
	CommandsBucket = "weft_commands"
	// ClaimsBucket holds attempt claims: a worker creates the attempt's
	// key, create-only, before it starts the body.
	ClaimsBucket = "weft_claims"
	// RunnersBucket holds a key per live runner id (liveness).
	RunnersBucket = "weft_runners"
	// DriversBucket holds the runner driving each run.
	DriversBucket = "weft_drivers"
	// PartitionsBucket holds the partition table and its claims.
	PartitionsBucket = "weft_partitions"
	// SnapshotsBucket holds each run's state folded up to a head.
	SnapshotsBucket = "weft_snapshots"
)

// The KV buckets of retention (package retention, docs/security.md
// "Retention and legal hold").
const (
	// HoldsBucket holds the legal holds by run id: who placed a hold, why
	// and when, and who released it.
	HoldsBucket = "weft_holds"
	// PurgesBucket holds a key per run whose purge started and has not
	// completed: the next purge completes it.
	PurgesBucket = "weft_purges"
)

// The KV buckets of the read models (package projector).
const (
	// ViewsBucket holds each run's view under the run id.
	ViewsBucket = "weft_views"
	// RunsBucket holds each run's summary under the run id.
	RunsBucket = "weft_runs"
	// ApprovalsBucket holds the pending approval requests.
	ApprovalsBucket = "weft_inbox_approvals"
	// UncertainBucket holds the uncertain effects.
	UncertainBucket = "weft_inbox_uncertain"
	// QuestionsBucket holds the open questions.
	QuestionsBucket = "weft_open_questions"
	// IndexBucket holds the order indexes of the run list and the inboxes.
	IndexBucket = "weft_index"
	// ProjectorBucket holds the projector's checkpoint.
	ProjectorBucket = "weft_projector"
	// ProjectorLeaseBucket holds the lease of the one active projector.
	ProjectorLeaseBucket = "weft_projector_lease"
)

// ForwardPrefix prefixes the subject on which a runner takes commands
// forwarded to it as driver: weft.runner.<id>.cmd.
const ForwardPrefix = "weft.runner."

// MaxPayload is the max_payload (bytes) of the embedded server and of the
// repository's nats.conf: 8 MiB. A tool result of up to max result bytes
// (default 1 MiB, docs/semantics.md §2) travels in a worker's report and is
// recorded in one event-log message together with its envelope and the
// follow-on events of the same decision, so the NATS default of 1 MiB is
// too small. An external server must allow at least this much
// (docs/protocol/10-log.md).
const MaxPayload = 8 << 20
