package chaos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
)

// TestScenario20_AnApprovalRefusedExpiredAfterItsDeadlineIsNotContradicted
// (docs/semantics.md §4 and §12 scenario 20: expiry follows recorded time):
// an approve that reached the runner at or after its request's recorded
// deadline is rightly refused approval_expired even while the log does not
// record the expiry yet (the command could not append it — the server was
// down — and the request's timer records it later). The check
// refusal_contradicted_by_log flags such a refusal only when the whole
// command came before the deadline; any other refusal of a pending request
// stays a contradiction.
func TestScenario20_AnApprovalRefusedExpiredAfterItsDeadlineIsNotContradicted(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deadline := t0.Add(2 * time.Second)
	req := events.Requirement{Name: "finance", Version: 1}
	evs := []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Runner: "r"},
		events.ModelRequested{Turn: 1, Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":500}`)}}},
		events.CallValidated{Action: "1/c1", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/c1", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/c1", Revision: 1, Requirement: req, Expires: &deadline},
	}
	var recs []events.Recorded
	for i, e := range evs {
		recs = append(recs, events.Recorded{Run: "r1", Version: uint64(i + 1), At: t0, Event: e})
	}
	s := aggregate.Fold(recs)
	base := command{kind: "approve", run: "r1", action: "1/c1", rev: 1, sent: t0.Add(time.Second)}
	if !pending(s, base) {
		t.Fatal("the request is not pending in the folded log; the test's history is wrong")
	}
	for _, tc := range []struct {
		name string
		code string
		recv time.Time
		want bool
	}{
		{"expired, answered after the deadline", "approval_expired", deadline.Add(time.Millisecond), true},
		{"expired, answered at the deadline", "approval_expired", deadline, true},
		{"expired, answered before the deadline", "approval_expired", deadline.Add(-time.Millisecond), false},
		{"another refusal after the deadline", "already_answered", deadline.Add(time.Second), false},
	} {
		c := base
		c.code, c.recv = tc.code, tc.recv
		if got := expiredBy(s, c); got != tc.want {
			t.Errorf("%s: expiredBy %v, want %v", tc.name, got, tc.want)
		}
	}
}
