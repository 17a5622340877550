// Package ownership is the runner's state of partition ownership
// (docs/adr/0019-partitions.md) apart from the command loop's. It has two
// types, each keeping locks of its own, none the command loop's:
//
//   - Table is this runner's table of the partitions' owners: the watcher
//     of weft_partitions (Watch), the claims and the catch-up after a
//     refused one, the store's word before a takeover, read from the
//     stream's leader (Verify), the check of the owned partitions after a
//     reconnection (VerifyOwned), a round of rebalancing (Pass, which asks
//     partition.Round.Decide), the releases (Release and ReleaseQuiet,
//     which wait for the acquisitions in flight, Acquiring; ReleaseKey)
//     and the scans of a partition's driver entries (Scan). It reads no
//     clock: its only waits are context deadlines and backoffs, on the
//     wall clock.
//   - Peers is this runner's view of its peers: its heartbeat in
//     weft_runners, the view of the live runners its watcher keeps, and
//     its judgement of whether a peer is gone (docs/semantics.md §8: only
//     a runner that is gone is recovered from; NonParticipant). It reads
//     an injected clock (internal/clock; Config.Clock): the wall clock in
//     production, a clock.Fake in tests, so that the timing of liveness
//     and of the view is tested without sleeping; Config.Stamp stamps the
//     recorded time of a beat.
//
// The command loop (the runner) asks them through their exported methods
// and passes in what is its own: the runs' part of a release or a scan,
// and, through Loop and Owners, whether it drains, that a runner left,
// and to forget the runs of a partition lost (docs/architecture.md, "The
// runner: the command loop and partition ownership", lists the boundary).
//
// The package is internal to the runner: applications configure ownership
// through runner's options only.
package ownership
