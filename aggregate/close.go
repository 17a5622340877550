package aggregate

import "github.com/weftrun/weft/events"

// ToClose returns the fenced attempts that the decision evs of c on s
// (Decide's events) ends or abandons without a result of their own (docs/adr/0023-closing-attempts.md,
// docs/semantics.md §8 "Closing an attempt"): a running attempt stopped by a
// cancel or the run's end, lost at its timer or at a takeover, and the lost
// latest attempt of an action waiting to start again that the decision ends
// uncertain (a cancel, the run's end, a rejected, expired or denied re-asked
// approval). Each is named by its fence (action, attempt, incarnation: its
// claim key) with the path (Why); Closed is false. A runner closes their
// claims and decides Closing{Closes: the outcomes, Then: c} instead of c.
// An attempt the log already records closed, or whose earlier close found a
// worker's claim (AttemptClosed with Claimed), and the attempt a worker's
// own report or a loss notice that implies its claim (Report, Lost crashed
// or worker_lost) is about, are not listed: the latter has a claim. It is pure, as Decide.
func ToClose(s State, c Command, evs []events.Event) []Close {
	switch c.(type) {
	case Start, Closing, Reconcile, Resolve, MarkedNotStarted:
		return nil
	}
	reporting := reportedAction(c)
	why := func(cause string) string {
		for _, e := range evs {
			switch e := e.(type) {
			case events.CancelRequested:
				return events.ClosedCancelled
			case events.RunRecovered:
				if cause == events.CauseRunnerLost {
					if e.Cause == events.RecoveredHandedOff {
						return events.ClosedHandedOff
					}
					return events.ClosedRunnerLost
				}
			}
		}
		switch cause {
		case events.CauseTimedOut:
			return events.ClosedTimedOut
		case events.CauseStopped:
			return events.ClosedRunEnded
		}
		for _, e := range evs {
			if _, ok := e.(events.RunFinished); ok {
				return events.ClosedRunEnded
			}
		}
		return events.ClosedReasked
	}
	var out []Close
	seen := map[string]bool{}
	add := func(id, cause string) {
		a, ok := s.Action(id)
		if !ok || seen[id] || id == reporting || !closable(a) || currentClosed(a) || currentClaimed(a) {
			return
		}
		seen[id] = true
		out = append(out, Close{Action: id, Attempt: a.Attempts, Incarnation: a.Attempt.Incarnation, Why: why(cause)})
	}
	for _, e := range evs {
		switch e := e.(type) {
		case events.AttemptLost:
			switch e.Cause {
			case events.CauseStopped, events.CauseTimedOut, events.CauseRunnerLost:
				add(e.Action, e.Cause)
			}
		case events.ActionUncertain:
			if a, ok := s.Action(e.Action); ok && hasUnresultedFence(a) {
				add(e.Action, "")
			}
		}
	}
	return out
}

// reportedAction is the action whose attempt a worker reports in c, also
// as a takeover's Then: a Report, or a Lost whose cause implies the
// worker's claim (crashed, worker_lost: the body ran or was taken). ""
// for none: a Lost timed_out may come from a worker that got the task
// after its deadline and never claimed it, so its attempt is closed (the
// close finds the claim if there is one).
func reportedAction(c Command) string {
	switch c := c.(type) {
	case Report:
		return c.Action
	case Lost:
		if c.Cause == events.CauseCrashed || c.Cause == events.CauseWorkerLost {
			return c.Action
		}
	case Recover:
		if c.Then != nil {
			return reportedAction(c.Then)
		}
	}
	return ""
}
