package events

import (
	"fmt"
	"time"
)

// Note returns a plain-words explanation of e for a person reading a
// timeline, or "" when Describe says it all. It explains the events whose
// stable Describe line reads like a failure on a normal path, such as a
// settling tool's body stopped at its timeout while the run waits for its
// settlement. Unlike Describe, its wording may change.
func Note(e Event) string {
	switch e := e.(type) {
	case AttemptLost:
		switch e.Next {
		case NextSettle:
			if e.SettleBy != nil {
				return "waiting for a settlement until " + e.SettleBy.UTC().Format(time.RFC3339)
			}
			return "waiting for a settlement"
		case NextReplay:
			return "no result of its own: the tool is replayable, a new attempt follows"
		case NextReapprove:
			return "no result of its own: the approval is asked again before a new attempt"
		case NextUncertain:
			return "the effect may have happened: a person reconciles the action"
		}
	case ActionUncertain:
		return "no settlement in time: a person reconciles the action"
	case ApprovalRequested:
		return fmt.Sprintf("waiting for a %s approval (revision %d)", e.Requirement.Name, e.Revision)
	case Reconciled:
		if e.Kind == ReconciledUnconfirmed {
			return "an open question until someone resolves it with the final truth"
		}
	case Resolved:
		return "the open question's final truth, for audit: the run does not change"
	case RunHandedOff:
		return "the next runner on this store continues it"
	}
	return ""
}
