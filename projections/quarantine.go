package projections

// StatusQuarantined means the run's log holds a message no reader can fold
// (RunView.Quarantine says which): the view shows the run as it was before
// that message, nothing acts on the run and its inbox items are withdrawn
// until the message is voided (`weft repair`, docs/adr/0011). It is not a
// status of docs/semantics.md §6 (the run's state is not known), so it is not
// in the lifecycle order of Statuses(); lists accept it as a filter.
const StatusQuarantined = "quarantined"

// Quarantine says why a run is quarantined: the stream sequence of the
// first message of the run no reader can fold, and what is wrong with it.
type Quarantine struct {
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// Quarantined returns what to store for the run of old (the view folded
// from the events before the bad message; zero when there are none) once
// the message at seq is found unfoldable: the view marked quarantined and
// every inbox item of old dropped (nobody may answer or reconcile a run
// whose state is not known).
func Quarantined(old RunView, run string, seq uint64, reason string) Change {
	v := old.clone()
	if v.Version == 0 {
		v.Schema, v.Run = 1, run
		v.Approvals, v.Uncertain, v.Actions = []string{}, []string{}, []ActionView{}
	}
	v.Status = StatusQuarantined
	v.Quarantine = &Quarantine{Seq: seq, Reason: reason}
	c := Change{View: v, Summary: Summarize(v), Applied: true}
	for _, it := range ApprovalItems(old) {
		c.DropApprovals = append(c.DropApprovals, ItemKey(it.Run, it.Action))
	}
	for _, it := range UncertainItems(old) {
		c.DropUncertain = append(c.DropUncertain, ItemKey(it.Run, it.Action))
	}
	for _, it := range QuestionItems(old) {
		c.DropQuestions = append(c.DropQuestions, ItemKey(it.Run, it.Action))
	}
	return c
}
