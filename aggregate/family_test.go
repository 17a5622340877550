package aggregate_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
)

// TestFamilyStatus (docs/semantics.md §6, docs/adr/0007): a parent whose only
// work is a delegation is working while its child works and suspended,
// waiting for the child, while the child waits for people.
func TestFamilyStatus(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s aggregate.State
	apply := func(c aggregate.Command) {
		t.Helper()
		evs, err := aggregate.Decide(s, c, at)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			s = aggregate.Evolve(s, events.Recorded{Run: "p", Version: s.Version() + 1, At: at, Event: e})
		}
	}
	apply(aggregate.Start{Run: "p", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Runner: "r",
		Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000, MaxChildren: 4, MaxDepth: 1}})
	apply(aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Calls: []events.ToolCall{
		{ID: "a", Name: "researcher", Arguments: json.RawMessage(`{"input":"x"}`)}}}}})
	apply(aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "a", Validation: events.CallValid,
		Delegate: &events.AgentRef{Name: "researcher", Version: "1"}, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}}}})
	child := aggregate.ChildRunID("p", "1/a")
	childStatus := aggregate.RunStatus{Kind: aggregate.StatusWorking}
	lookup := func(run string) (aggregate.RunStatus, bool) { return childStatus, run == child }
	if st := aggregate.FamilyStatus(s, lookup); st.Kind != aggregate.StatusWorking {
		t.Fatalf("child working: family %s", st.Kind)
	}
	childStatus = aggregate.RunStatus{Kind: aggregate.StatusSuspended, Approvals: []string{"1/c"}}
	st := aggregate.FamilyStatus(s, lookup)
	if st.Kind != aggregate.StatusSuspended || !slices.Equal(st.Waiting, []string{child}) {
		t.Fatalf("child suspended: family %+v", st)
	}
	if aggregate.Status(s).Kind != aggregate.StatusWorking {
		t.Fatal("the run's own status changed")
	}
	if st := aggregate.FamilyStatus(s, func(string) (aggregate.RunStatus, bool) { return aggregate.RunStatus{}, false }); st.Kind != aggregate.StatusWorking {
		t.Fatalf("unknown child: family %s", st.Kind)
	}
}
