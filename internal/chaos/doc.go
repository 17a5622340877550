// Package chaos is Weft's seeded fault-injection harness: it runs the real
// processes of a deployment on loopback — a nats-server with file storage
// (or a 3-node cluster at R3), two or three runners, standalone workers and
// a projector — plays a workload against them while a seeded schedule
// kills, pauses and stops them, then lets everything recover and checks,
// against a side ledger of body starts, the runners' acknowledgements and
// the log, that Weft kept its promises.
//
// # Processes
//
// Every part is a process the harness starts from one executable (Config.Exe,
// by default the running one) with EnvRole set; the executable calls
// RoleMain first thing. The nats part runs the nats-server of the module's
// go.mod from a configuration file the harness writes (store on disk;
// sync_interval: always, or Config.SyncInterval's interval). Runner, worker and
// projector parts use the public packages runner, worker and projector,
// exactly as an application would. Each process runs in its own process
// group and dies with the harness (Pdeathsig); Run kills and reaps every one
// on every way out. A part that exits is started again, like a service
// manager would, after a delay the schedule draws.
//
// # Workload
//
// Each run of the agent "chaos" is given a script: one to three calls among
// a replayable read (read, in the runners' own workers, max attempts 3), a
// replayable read in the standalone workers (fetch, max attempts 2), a
// non-replayable effect in the standalone workers (ship), a payment that
// needs an approval over 100 (pay) and a settling tool whose stopped body
// settles through its callback or not at all (hold). The workload starts
// each run at a seeded time, approves requests (one to four approvers at
// once: exactly one may win), rejects a quarter, cancels some runs,
// settles some hold actions itself and reconciles every uncertain action
// (with an output, an error or unconfirmed), live or stored. When
// approvals expire (odd seeds), two more runs start as the quiet phase
// begins whose approval requests it never answers (expiryProbes), and in
// the quiet phase the requests it answers only after their expiry are
// left to the runtime's expiry for the stranded check's bound
// (leftToExpire): only the runners' durable timers move those runs.
//
// # Faults
//
// The schedule draws faults from a seeded generator: SIGKILL, SIGTERM and
// SIGSTOP/SIGCONT of runners, workers, the projector and the nats-server,
// and, for runners, a SIGKILL or SIGSTOP right after the next acknowledged
// append to the event log and before the effect that follows it (the runner
// part's test-only instrumentation, see RoleMain). On a cluster at most one
// node is down at a time, and every other node fault hits the leader of the
// event log stream. After Config.Duration a quiet phase continues every
// paused process, starts every stopped one and waits until every run
// finished.
//
// # Checks
//
// Every tool body writes an fsynced line to the ledger before anything
// else. A body makes its effect under its context, as a real tool's
// network call does: one called with an ended context (cancelled, or its
// deadline passed by the clock, which a process paused or starved of CPU
// between the worker's last look and the call can see) writes a late line
// instead, does nothing, and is counted apart (Result.LateCalls). Every
// runner writes each acknowledged append (stream sequence and first event
// id) to its ack ledger before it acts on the acknowledgement.
// Then, per run and action:
//
//   - body starts ≤ the fence's max attempts (1 for a non-replayable tool),
//     and no attempt started twice;
//   - every body start came after its fence was stored; none came after
//     its attempt was recorded lost or its run finished when the worker's
//     last look at the run (the worker's AttemptCheck, which the parts wrap
//     to record when each look began and answered) began after that was
//     acknowledged. A start after an end that the last look could not see
//     is the gap between a worker's last look and its body's first
//     instruction, which a pause or CPU starvation of the process can
//     stretch and no check can close: Result.UnseenEnds counts them;
//   - no action with a fenced attempt ended in a state that says it did not
//     run (not_started, rejected, denied, ...), unless every attempt it had
//     was closed before any worker claimed it (attempt_closed); no body
//     started under a closed attempt; no action is uncertain without a
//     body start, a worker's claim or an attempt whose close had no known
//     outcome. Result.Precision counts the uncertain actions, those that
//     never started a body, and of these the claimed and the unknown,
//     beside the violations (docs/reliability.md, "Precision");
//   - every run finished;
//   - from when the quiet phase has every part up, every run that needs
//     no person (not finished, not aggregate.Idle) moves by itself — a
//     new event — within 4 × (lease + a full scan of 8 leases), at least
//     30 s, plus a timer firing's longest way back (strandedBound: 67 s
//     at a 1 s lease), of its last move and its next due time
//     (docs/semantics.md §8: a run whose driver is gone is taken over,
//     pending work is never dropped); a run that does not is reported
//     stranded (run_stranded);
//   - once the workload is done, and while the runners still run,
//     weft_drivers holds within a grace no entry of a run that finished,
//     waits only for a person or does not exist (only runs with work in
//     flight have one); each entry left is named with the run's last
//     events;
//   - no well-formed command of the workload was answered invalid_request
//     or internal, and once the workload is done, while the runners still
//     run, every run that did not finish answers an approval of a revision
//     it never had for that reason (stale_reference, or wrong_reference
//     without a pending request), through the takeover of its run, and
//     no runner logged an internal refusal (docs/semantics.md §8, "A run can
//     always be answered"). Odd seeds give the agent a 2 s approval
//     expiry and answer half of the requests only after it
//     (Config.ApprovalExpiry), so that approvals expire while their
//     run's runner changes;
//   - once the quiet phase has every part up again, every run's stored
//     view reaches its log head within three times the projector's stall
//     bound (3 × projector.StallAfter, 90 s); a miss names each run
//     behind with its view's and its log's versions, and what the
//     projector was doing: its checkpoint
//     against the log, its lease holder, its last log lines and its
//     goroutines (SIGQUIT, written to its log);
//   - weft audit verify passes on every run (chain, refold, and the
//     projector's stored view byte for byte once it caught up), and with
//     --trust of the runners' head key on every finished run;
//   - every acknowledged append is in the stream at its sequence, no event
//     is in it twice, and every run's versions are 1, 2, 3, ...;
//   - every command answered ok left its event; concurrent approvals of
//     one request had at most one winner; no refusal is contradicted by the
//     log as it stood before and after the command; no runner recovered a
//     run from itself unless it had handed the run off (a partition it
//     released and claimed again: cause handed_off); no part panicked;
//   - no client of the harness (its own connection, a part) was
//     refused by a server on one of its nodes' ports: every node requires
//     the harness's own token, and a refusal means another server (another
//     run's) held that port (foreign_server).
//
// Result.Write prints the seed, the faults by kind, the runs, actions, body
// starts and every violation. `weft chaos` and `go tool -modfile=devtools/go.mod task chaos` run it
// from the command line; docs/reliability.md records the figures.
package chaos
