// Package runner executes Weft runs: the library applications embed with
// their agents, tools and policy (cmd/runner is a thin main around it).
//
// # The loop
//
// For every command — a start, an approval, a worker's report, a timer
// firing, a model reply — the runner driving the run does four things, in
// this order, and nothing else decides:
//
//  1. Load: hold the run's state (a snapshot and the log's tail folded
//     with aggregate.Evolve, kept in memory while it drives the run).
//  2. Decide: aggregate.Decide(state, command, now) at the store time it
//     will record. Every rule of what happens is there or in a pure
//     helper beside it (aggregate.PlanAnswer for the order of an answer's
//     checks, AwaitBody for the settle wait, LostCommand for a worker's
//     lost causes, UnrecordableReply for a reply too large to record,
//     Work.Draining for what a draining runner still does). The runner
//     only gathers the inputs a decision needs that are I/O (a proof
//     verified, the policy evaluated, calls validated) and passes them in
//     the command. A model reply is the one command whose decision takes
//     a second one with it: its tool request's calls are validated and
//     the policy asked before the append, and the reply and its
//     resolution (ResolveCalls, decided at the time the policy answered)
//     are appended as one message (drive.go's withResolution,
//     docs/adr/0027-fewer-writes-per-step.md). The policy may so be asked
//     about an action that is then never recorded (the append failed or
//     another runner won the run); what it answered counts only once
//     recorded.
//  3. Append: the events, with per-run optimistic concurrency
//     (eventlog.Append against the head it decided on). On a conflict it
//     re-reads the run and decides again, performing no effect.
//  4. THEN perform aggregate.Pending: call the model for a requested turn,
//     validate calls and run the policy (then decide ResolveCalls) for a
//     tool request recorded without its resolution,
//     publish fenced attempts as tasks on the queue of the run's agent
//     identity, weft.task.<agent>.<version>.<tool> (deduplicated by
//     Nats-Msg-Id) — a task of the runner's own worker's queues is handed
//     to that worker as it is published (handtask.go) — stop bodies on
//     weft.stop.<run>, tend child runs, and
//     arm timers (a local timer for precision plus a durable timer.Timers
//     schedule).
//
// In code: command.go holds the loop, in the order a command passes it —
// route (the API's commands) or command and commandLocked (the runner's
// own), step, decideAppend (decide and append), act and actOnce (perform
// Pending) — and its top comment walks one command through it, naming
// the helpers it calls. Around it: acquire.go acquires a run (from
// memory, or read back by its partition's owner, taking it over);
// drive.go holds the run in memory, its load and the detail of an append
// (keyBeforeAppend, withResolution, appendUnknown and resync,
// afterConflict); act.go act's helpers (transient, refresh, the driver
// entry's delete and correction); effects.go the effects (model call,
// dispatch, resolution); retry.go the retries of step 4; wake.go the
// wakes and the timers due; the API's commands by command: backend.go
// (start, reconcile, cancel), answers.go (approve, reject, decide),
// reports.go (report, settle), resolve.go, pause.go, restart.go;
// forward.go and handoff.go what passes between runners; orphans.go the
// takeovers; partitions.go the ownership check (owns) and release.go the
// runs' part of a partition's release (handing them off,
// handOffPartition); drivers.go the runs' part of a scan (waking their
// driver entries, wakePartitions). Partition ownership — the table of the
// partitions' owners, its watcher and claims, this runner's view of its
// peers (heartbeat, the live runners, their liveness), the partition
// loop, the steps of a release and the scan bookkeeping — is the package
// internal/ownership: the runner asks its Coordinator and answers its
// CommandLoop (ownership.go; the package doc lists both).
//
// # Ready and Advance
//
// Pending work is acknowledged by being recorded, never by having been
// attempted (etcd-io/raft's Ready/Advance: the caller persists before it
// sends, and what was not done is handed out again). Concretely:
//
//  1. Work is derived from the state alone (aggregate.Pending) after every
//     append and on every wake; nothing is remembered as "done" except
//     what the log records (a dispatch is deduplicated by its attempt key
//     and Nats-Msg-Id, a timer by its key, both idempotent).
//  2. Whatever could not be performed or recorded — a task publish, a
//     durable timer, the model's reply, the resolution of a tool request,
//     a stop, a child run — makes the run be woken again after a backoff
//     (retryLater), and that wake derives the work again from the state
//     and does what is still missing (docs/semantics.md §8: pending work is
//     retried, never dropped).
//  3. A wake first checks that the state in memory is the log's (its head
//     is the log's), so a runner that lost the run never performs work
//     from stale memory.
//  4. A model reply that could not be recorded is kept only until the
//     next pass records it for the turn still requested (keepReply);
//     anything else kept in memory is a cache the log can rebuild.
//
// A refused append (the store did not answer, the log's limits refuse new
// messages, writers contended) is such a failure: the decision is not
// recorded, nothing is performed for it, and the command is answered as
// not applied (unavailable, runner_busy or contended) or retried.
//
// # Drivers, partitions, liveness and recovery
//
// Each run belongs to a partition, partition.Of(run, P) = fnv1a32(run) % P
// (the hash of nats-server's partition() mapping), P fixed per deployment
// (WithPartitions, recorded in the KV bucket weft_partitions under
// "config"; a runner configured otherwise refuses to start). Each
// partition has one owner, the runner named by its key p.<nnnn> in
// weft_partitions, and only the owner acquires the partition's runs: any
// runner receives commands (the "weft" micro service is a queue group); a
// runner that does not own the run's partition forwards the command at
// once to the owner on weft.runner.<id>.cmd, without reading the run, and
// answers runner_busy while nobody owns it (a partition moving). Each run
// has one driver: the runner recorded in its RunStarted or latest
// RunRecovered. The owner drives every unfinished run of its partition: a
// run the log records as another runner's is taken over
// (aggregate.Recover, cause runner_lost, handed_off, or idle for a run
// waiting only for people, recorded with its next decision: exactly one
// takeover append wins), because that runner gave the partition up — it
// released it, after handing off and forgetting every run of it it held,
// or it was judged gone. So exactly one process performs each effect.
//
// Liveness: each runner puts its id in the KV bucket weft_runners every
// lease/4 (the value says the deployment's P, and whether it drains); the
// bucket's max age is the lease (WithLease, default 1 s), so a SIGKILLed
// runner's key disappears within the lease. "Cannot tell" is never gone
// (internal/ownership: the judgement of Peers, which Table.Pass and
// Peers.NonParticipant ask). Every lease/4 the partition loop lists the live
// runners, assigns the partitions among them by rendezvous hashing
// (partition.Owner: a join or a leave moves about P/n partitions), claims
// those assigned to it whose key is absent or names a runner judged gone
// (kv.Create, or kv.Update at the revision seen: one claim wins), and
// releases those it owns that are assigned to another live runner: it
// stops acquiring their runs, hands off those it holds (RunHandedOff), lets
// their bodies and model calls in flight finish within the drain window,
// forgets them and deletes the key. On claiming a partition it wakes the
// entries of weft_drivers under <nnnn>.> that it does not hold (bounded,
// takeOrphans): those are the runs some runner drove with work in flight.
// A run idle by the log (aggregate.Idle: waiting only for people) has no
// entry and costs its owner nothing, in memory or at a takeover, until a
// command, report or timer reaches it (idle.go) — unless it owes a signed
// head that a runner before docs/adr/0044 left unsigned (signBehind,
// signhead.go; a runner with a head key seals a decision with its signed
// head, in one append, and owes none after it). A SIGKILLed runner's
// partitions move within about lease + lease/4 and its runs in flight
// continue (the docs/semantics.md §8 outcomes follow from the recorded fences);
// a
// joining runner gets its share within about lease/4 plus the drain window
// of the runs in flight there. SIGTERM (cancelling Run's context) drains:
// no new commands are taken and every driven run is handed off at once;
// running bodies and model calls in flight may finish within the drain
// window and are recorded; partitions with nothing running are released
// at once, the others at the end; then the runner's liveness key is
// deleted. Until a partition is released its runs stay its owner's:
// commands for them are forwarded to it.
package runner
