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
//     the command.
//  3. Append: the events, with per-run optimistic concurrency
//     (eventlog.Append against the head it decided on). On a conflict it
//     re-reads the run and decides again, performing no effect.
//  4. THEN perform aggregate.Pending: call the model for a requested turn,
//     validate calls and run the policy (then decide ResolveCalls),
//     publish fenced attempts as tasks on the queue of the run's agent
//     identity, weft.task.<agent>.<version>.<tool> (deduplicated by
//     Nats-Msg-Id), stop bodies on weft.stop.<run>, tend child runs, and
//     arm timers (a local timer for precision plus a durable timer.Timers
//     schedule).
//
// In code: step (decide and append, drive.go's decideAppend) then act
// (act.go). The files follow the loop: drive.go loads, acquires and
// appends; act.go performs Pending; effects.go holds the effects (model
// call, dispatch, resolution); retry.go the retries of step 4; wake.go
// the internal commands; backend.go the API's commands; forward.go and
// handoff.go what passes between runners; liveness.go the leases and
// takeovers.
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
//     and does what is still missing (SEMANTICS §8: pending work is
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
// # Drivers, liveness and recovery
//
// Each run has one driver: the runner recorded in its RunStarted or latest
// RunRecovered. Any runner receives commands (the "weft" micro service is a
// queue group); a runner that is not the driver forwards the command to the
// driver on weft.runner.<id>.cmd while the driver is alive, and otherwise
// takes the run over first (aggregate.Recover, cause runner_lost or
// handed_off: exactly one takeover append wins). So exactly one process
// performs each effect.
//
// Liveness: each runner puts its id in the KV bucket weft_runners every
// lease/4; the bucket's max age is the lease (WithLease, default 1 s), so a
// SIGKILLed runner's key disappears within the lease. The KV bucket
// weft_drivers maps every unfinished run to its driver. Every runner scans
// it every lease/4 and takes over the runs whose driver is gone, so runs
// in flight continue within about lease + lease/4 (the SEMANTICS §8
// outcomes follow from the recorded fences). SIGTERM (cancelling Run's
// context) drains: no new commands are taken and every driven run is handed
// off at once (RunHandedOff: it fences no new attempt and requests no model
// turn); running bodies and model calls in flight may finish within the
// drain window and are recorded; then the runs are released and the
// runner's liveness key is deleted so another runner takes over at once.
// Until then a live draining runner keeps its runs: commands for them are
// forwarded to it.
package runner
