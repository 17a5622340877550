package client

import (
	"encoding/json"

	"github.com/weftrun/weft/projections"
)

// ArgumentsAmount returns the "amount" an approval's arguments carry at
// their top level, when it is a number: what a batch decision's summary
// totals and its amount filters compare (weft decide, the console).
func ArgumentsAmount(args json.RawMessage) (float64, bool) {
	var top map[string]json.RawMessage
	if json.Unmarshal(args, &top) != nil {
		return 0, false
	}
	var n float64
	if raw, ok := top["amount"]; ok && json.Unmarshal(raw, &n) == nil {
		return n, true
	}
	return 0, false
}

// Selection summarizes pending approvals chosen for a batch decision.
type Selection struct {
	// Items and Runs count the approvals and their runs.
	Items, Runs int
	// Total is the sum of the amounts of the WithAmount items whose
	// arguments carry one (ArgumentsAmount).
	Total      float64
	WithAmount int
}

// Summarize counts items, their runs and their total amount.
func Summarize(items []projections.ApprovalItem) Selection {
	runs := map[string]bool{}
	var s Selection
	for _, it := range items {
		runs[it.Run] = true
		if n, ok := ArgumentsAmount(it.Arguments); ok {
			s.Total += n
			s.WithAmount++
		}
	}
	s.Items, s.Runs = len(items), len(runs)
	return s
}
