// Package aggregate is Weft's pure decision core for one run: given the
// run's State, a Command and the store's time, Decide says which events
// happen; Evolve folds a recorded event into the State. Everything in
// docs/semantics.md §2–§10 that is a decision lives here, so that any runner —
// or an auditor offline — reaches the same conclusion from the same log.
// There is no I/O, no clock, no randomness and no map iteration in here;
// times and ids arrive as arguments.
//
// The action and run state machine is defined once, in ActionTransition,
// ActionState.Active and RunStatusOf: Evolve applies it to the State and
// the read models (package projections) to their views (docs/adr/0017).
// Where the model port's types meet the log's (a reply becoming
// ModelReplied, recorded calls becoming the next request's transcript) is
// this package too, so that a change to package model never changes the
// log (docs/adr/0018).
//
// # Who calls what, in which order
//
// A runner drives a run in the etcd-raft style: it persists before it acts.
//
//  1. Load the run's history and Fold it (or Evolve a snapshot with the
//     tail). If the run is driven by nobody (its runner was lost or handed it
//     off), the command is decided as part of a takeover: Decide
//     Recover{Runner, Cause, Then: command} in step 2 instead of the command
//     alone. Recover bumps the incarnation and decides every lost attempt
//     from its recorded fence; Then is decided on that recovered state in
//     the same decision, and only then come the recovery's follow-ons (the
//     replay's fence, the re-issued model call, queued fences). So a cancel
//     that takes a run over starts no body and issues no model call
//     (docs/semantics.md §7). A takeover with no command (a recovery scan) is
//     Recover with a nil Then. To pre-check a command on the recovered
//     state (CheckAnswer, the proof, the policy re-run of an approve), use
//     Recovered; it records nothing. Cause is what the log says
//     (State.HandedOff: handed_off, else runner_lost).
//  2. Decide(state, command, now), where now is the store time the runner
//     will pass to eventlog.Append as the recorded time of the batch. Decide
//     never changes state: it returns the events, or a *weft.Error refusal.
//     Decide may return events together with a refusal (expiries that were
//     due before an approval answer, and the SettlementRefused of a
//     not_awaited settlement): append whatever it returns, then give the
//     refusal to the caller.
//  3. Append the events with optimistic concurrency on the run's head. On a
//     conflict, reload and go back to step 2; perform no effect.
//  4. Evolve the state with each appended event (events.Recorded from the
//     returned envelopes). Evolve consumes its argument like append: keep
//     only the returned State (use State.Clone to keep an old one).
//  5. Call Pending(state) and act on the Work: make the model call for
//     Work.Model (the request is Transcript(state) converted to the model
//     port's types by the runner (runner/modelport.go), with the run, turn
//     and correlation, plus the agent's system prompt, tool specs and
//     answer schema), validate and run policy on
//     Work.Resolve and Decide a ResolveCalls, dispatch Work.Dispatch
//     (idempotent per run/action/attempt: dispatch only what is not yet
//     dispatched), stop the bodies of attempts it just recorded lost
//     (AttemptLost with cause "stopped" or "timed_out"), and
//     arm Work.Timers (idempotent per kind/action/attempt/revision). Every
//     answer of the outside world — a model reply, a worker's report, a timer
//     firing, a person's answer — comes back as a Command in step 2.
//
// Commands are Start, ModelReply, ModelFailure, ResolveCalls, Approve,
// Reject, Answers (a batch of one run's approvals and rejections, all or
// nothing), Report, Lost, Settle, Reconcile (with its stored form), Cancel,
// TimerFired, HandOff, Recover, ChildSettle, ToolMissing, Closing (a
// command decided after its attempts' claims were closed) and
// MarkedNotStarted (a claim's not-started mark read after the decision that
// found the claim: docs/adr/0023-closing-attempts.md), and Pause and
// Resume (pause.go; docs/semantics.md §13: a paused run gets no fence and no
// new turn until the resume). Decide emits
// the follow-on events of a decision in the same batch: Start gives RunStarted and ModelRequested{1};
// the last model-visible result of a batch is followed by ModelRequested for
// the next turn; a freed concurrency slot by the next AttemptFenced; due
// approval expiries are applied before any command is judged.
//
// Action ids are "<turn>/<call_id>". Approvals are answered in two steps:
// CheckAnswer is the pure pre-check (wrong, stale, answered, expired
// references and ended runs) a runner makes before it verifies a proof or
// re-runs the policy; Approve then carries the proof's reviewer and
// verifier and the re-run policy's decision.
//
// The transcript is stored once: the input in RunStarted, each assistant
// turn in ModelReplied, each tool result in the event that ended its action,
// each corrective prompt in AnswerRejected. Transcript rebuilds the
// conversation from State, in the log's types (events.Message: the core
// never imports the model port; the runner converts, docs/adr/0037);
// nothing is recorded twice.
//
// A State encodes as JSON (MarshalJSON, schema SnapshotSchema): a runner may
// keep it as a snapshot with the head it was folded to, decode it, and Evolve
// only the events after it (eventlog's LoadAfter).
//
// Package aggregatetest drives runs with random (seeded) commands; packages
// that fold these events (projections, audit) can use it to compare their
// views with Status and Actions over thousands of histories.
//
// # Sub-agent delegation and tool_changed
//
// A Resolution with Delegate is a call of a sub-agent. DelegationLimits
// checks max depth, max children and the family turn budget before policy
// (the runner evaluates no policy for a call over a bound; Decide records
// it CallValidated limit_reached). An allowed delegation emits ChildStarted
// (state delegated, no concurrency slot) with the child run id ChildRunID
// derives; Pending lists it in Work.Children until ChildSettle brings the
// child's outcome (state child_settled, content ChildContent). A cancelled
// run waits for its children's outcomes (Work.Children Cancel); a run that
// finishes otherwise detaches them. A child run's Start carries its
// events.Parent; its family budget ends it budget_exhausted(family_limit).
// FamilyStatus computes a run's status with its children's.
// ToolMissing fails a run tool_changed. See docs/adr/0007.
package aggregate
