package aggregate

import "github.com/weftrun/weft/events"

// Signed chain heads (docs/adr/0026-signed-heads.md): a runner that holds a
// head key signs the run's head after every decision a person made and at
// the run's end, and after anything appended to a finished run. What is
// still to sign is decided from the log, so that the runner that takes
// over from one that died between an append and its signature signs what
// it left, without reading the whole history again.

// Vouched reports whether ev is a decision a person made, or the run's
// end: what a head key's signature must follow. An approval's expiry is
// the store clock's, not a person's. A restart is a person's decision (who
// restarted it, with a proof: docs/adr/0040-who-restarted-and-who-held.md),
// recorded in the new run's run_forked: the new run's first message owes a
// signed head, not only its next decision or its end.
func Vouched(ev events.Event) bool {
	switch e := ev.(type) {
	case events.ApprovalAnswered:
		return e.Answer != events.AnswerExpired
	case events.Reconciled, events.Resolved, events.CancelRequested, events.RunPaused, events.RunResumed, events.RunFinished, events.AttemptNotStarted, events.RunForked:
		return true
	}
	return false
}

// HeadBehind reports whether a signature is owed: a Vouched event, or any
// event appended after the run's end, follows the run's last head_signed
// (or there is none).
func (s State) HeadBehind() bool { return s.headBehind }

// headOwed is the rule State.HeadBehind follows: whether a signature is
// owed after ev is folded into a state where one was owed (behind) and
// the run had ended (finished) or not. A head_signed pays what is owed;
// a Vouched event, or any event after the run's end, owes one.
func headOwed(behind, finished bool, ev events.Event) bool {
	if _, signed := ev.(events.HeadSigned); signed {
		return false
	}
	return behind || finished || Vouched(ev)
}

// HeadOwedAfter reports what the state s gives once evs, a decision about
// to be appended, are folded in would say, without folding them: whether
// a signature is owed (State.HeadBehind) and whether the run has ended
// (State.Finished). A runner with a head key seals a decision that owes
// one with its signed head, in the decision's own message
// (docs/adr/0044), and that signed head says whether it is the run's end.
// Which event ends the run is said here and in Evolve: property (t) of
// TestProperties keeps the two in step over the random runs.
func HeadOwedAfter(s State, evs []events.Event) (owed, finished bool) {
	owed, finished = s.headBehind, s.finished
	for _, ev := range evs {
		owed = headOwed(owed, finished, ev)
		if _, ok := ev.(events.RunFinished); ok {
			finished = true
		}
	}
	return owed, finished
}
