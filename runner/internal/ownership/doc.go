// Package ownership is the runner's state of partition ownership
// (docs/adr/0019-partitions.md) apart from the command loop's. The runner
// uses one type of it, the Coordinator, made of two others: the
// Coordinator has no lock of its own (Start, StartLoop, Stop, Drain,
// Release, Close and Leave are called from the runner's Run only), the
// two others each keep locks of their own; none holds the command loop's:
//
//   - Coordinator is this runner's partition ownership from Start to
//     Leave (Close ends its goroutines, Leave deletes its keys): its Table and its Peers, the heartbeat, the watchers, the
//     partition loop (a ticker every lease/4 and a kick when a runner
//     left or a partition was released, the check of the owned partitions
//     after a reconnection, a round of rebalancing, the releases it
//     starts, the wake of the owned partitions' driver entries beside it)
//     and the releases of a drain.
//   - Table is this runner's table of the partitions' owners: the watcher
//     of weft_partitions (Watch), the claims and the catch-up after a
//     refused one, the store's word before a takeover, read from the
//     stream's leader (Verify), the check of the owned partitions after a
//     reconnection (VerifyOwned), a round of rebalancing (Pass, which asks
//     partition.Round.Decide), the releases (Release and ReleaseQuiet,
//     which wait for the acquisitions in flight, Acquiring; ReleaseKey)
//     and the scans of a partition's driver entries. It reads no clock:
//     its only waits are context deadlines and backoffs, on the wall
//     clock.
//   - Peers is this runner's view of its peers: its heartbeat in
//     weft_runners, the view of the live runners its watcher keeps, and
//     its judgement of whether a peer is gone (docs/semantics.md §8: only
//     a runner that is gone is recovered from; NonParticipant). It reads
//     an injected clock (internal/clock; Config.Clock): the wall clock in
//     production, a clock.Fake in tests, so that the timing of liveness
//     and of the view is tested without sleeping; Config.Stamp stamps the
//     recorded time of a beat.
//
// # The boundary
//
// The command loop (the runner) asks the Coordinator, and only it,
// through these methods (TestBoundary holds the Coordinator's exported
// methods to this list):
//
//   - Start, StartLoop, Stop, Drain, Release, Close, Leave: its
//     lifecycle;
//   - OwnerOf, Owned, Verify, Acquiring, NonParticipant, ScanAll: the
//     runner's questions and the rebuilt index's rescan;
//   - Assume, ForgetReconnectCheck: for the runner's tests only.
//
// The Coordinator asks the command loop, for what acts on the runs it
// holds, through CommandLoop (TestBoundary holds it to this list):
//
//   - Draining, ForgetPartition, Unbounded, HandOff, WatchQuarantined,
//     WakePartitions.
//
// docs/architecture.md, "The runner: the command loop and partition
// ownership", says what each is for.
//
// The package is internal to the runner: applications configure ownership
// through runner's options only.
package ownership
