package projections_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// A run that asked for a payment needing approval is suspended, and the
// approvals inbox lists the request.
func ExampleFold() {
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	req := events.Requirement{Name: "finance", Version: 1}
	h := []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice 42"},
		events.ModelRequested{Turn: 1, Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"invoice":42}`)}}},
		events.CallValidated{Action: "1/c1", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/c1", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/c1", Revision: 1, Requirement: req, Why: events.AskPolicy},
	}
	var recs []events.Recorded
	for i, e := range h {
		recs = append(recs, events.Recorded{Run: "pay-42", Version: uint64(i + 1), At: at.Add(time.Duration(i) * time.Second), Event: e})
	}
	v := projections.Fold(recs)
	fmt.Println(v.Status, v.Approvals)
	for _, it := range projections.ApprovalItems(v) {
		fmt.Println(it.Run, it.Action, it.Tool, string(it.Arguments), it.Requirement.Name, it.Revision, projections.ItemKey(it.Run, it.Action))
	}
	// Output:
	// suspended [1/c1]
	// pay-42 1/c1 pay {"invoice":42} finance 1 pay-42.1=2Fc1
}
