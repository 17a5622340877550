package projections_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// TestDelegationView drives a parent run through the decision core — one
// delegation started and settled, one over max children (limit_reached) —
// and checks that the run view shows the delegated, child_settled and
// limit_reached states, the children with their outcome, and agrees with
// aggregate.Status after every event (docs/adr/0007).
func TestDelegationView(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s aggregate.State
	var hist []events.Recorded
	var v projections.RunView
	apply := func(c aggregate.Command) {
		t.Helper()
		evs, err := aggregate.Decide(s, c, at)
		if err != nil {
			t.Fatalf("%s: %v", c.CommandName(), err)
		}
		for _, e := range evs {
			r := events.Recorded{Run: "p1", Version: s.Version() + 1, At: at, Event: e}
			hist = append(hist, r)
			s = aggregate.Evolve(s, r)
			v = projections.Apply(v, r)
			if st := aggregate.Status(s); string(st.Kind) != v.Status {
				t.Fatalf("after %s: view status %s, decision core %s", e.EventName(), v.Status, st.Kind)
			}
		}
	}
	apply(aggregate.Start{Run: "p1", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Runner: "r",
		Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000, MaxChildren: 1, MaxDepth: 1}})
	apply(aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: "a", Name: "researcher", Arguments: json.RawMessage(`{"input":"x"}`)},
		{ID: "b", Name: "researcher", Arguments: json.RawMessage(`{"input":"y"}`)},
	}}}})
	sub := &events.AgentRef{Name: "researcher", Version: "1"}
	apply(aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{
		{CallID: "a", Validation: events.CallValid, Delegate: sub, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}},
		{CallID: "b", Validation: events.CallValid, Delegate: sub},
	}})
	if got := []string{v.Actions[0].State, v.Actions[1].State}; !slices.Equal(got, []string{projections.StateDelegated, projections.StateLimitReached}) {
		t.Fatalf("states %v", got)
	}
	if v.Status != projections.StatusWorking || len(v.Children) != 1 || v.Children[0].Run != aggregate.ChildRunID("p1", "1/a") || v.Children[0].Outcome != nil {
		t.Fatalf("view %+v", v)
	}
	apply(aggregate.ChildSettle{Action: "1/a", Child: aggregate.ChildRunID("p1", "1/a"), Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"found"`)}, Turns: 2})
	a := v.Actions[0]
	if a.State != projections.StateChildSettled || a.Result != `"found"` {
		t.Fatalf("settled action %+v", a)
	}
	if c := v.Children[0]; c.Outcome == nil || c.Outcome.Kind != events.OutcomeCompleted || c.Turns != 2 {
		t.Fatalf("child %+v", c)
	}
	if !v.ModelInFlight || v.Turns != 2 {
		t.Fatalf("next turn not requested: %+v", v)
	}
	if folded := projections.Fold(hist); folded.Status != v.Status || len(folded.Children) != 1 {
		t.Fatalf("fold differs: %+v", folded)
	}
}
