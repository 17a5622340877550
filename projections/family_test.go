package projections_test

import (
	"encoding/json"
	"hash/fnv"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
)

// driven is a run driven through the decision core, with its view folded
// alongside.
type driven struct {
	t     *testing.T
	run   string
	state aggregate.State
	view  projections.RunView
}

func (d *driven) apply(c aggregate.Command) {
	d.t.Helper()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	evs, err := aggregate.Decide(d.state, c, at)
	if err != nil {
		d.t.Fatalf("%s %s: %v", d.run, c.CommandName(), err)
	}
	for _, e := range evs {
		r := events.Recorded{Run: d.run, Version: d.state.Version() + 1, At: at, Event: e}
		d.state = aggregate.Evolve(d.state, r)
		d.view = projections.Apply(d.view, r)
	}
}

// TestFamilyStatus (docs/semantics.md §6 "status computed for the run and its
// children", docs/adr/0007): a parent whose only work is a delegation is
// working by its own status; its family status is working while the child
// works and suspended, waiting for the child run, once the child waits for
// an approval — computed from the two views, as aggregate.FamilyStatus
// computes it from the two states. The view's own status stays the
// aggregate's Status.
func TestFamilyStatus(t *testing.T) {
	limits := events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000, MaxChildren: 4, MaxDepth: 1, ApprovalExpiry: 60000}
	parent := &driven{t: t, run: "p"}
	parent.apply(aggregate.Start{Run: "p", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Runner: "r", Limits: limits})
	parent.apply(aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: "a", Name: "researcher", Arguments: json.RawMessage(`{"input":"x"}`)}}}}})
	parent.apply(aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "a", Validation: events.CallValid,
		Delegate: &events.AgentRef{Name: "researcher", Version: "1"}, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}}}})
	childID := aggregate.ChildRunID("p", "1/a")
	child := &driven{t: t, run: childID}
	child.apply(aggregate.Start{Run: childID, Agent: events.AgentRef{Name: "researcher", Version: "1"}, Input: "x", Runner: "r", Limits: limits,
		Parent: &events.Parent{Run: "p", Action: "1/a", Depth: 1, FamilyTurns: 6, MaxDepth: 1}})

	views := map[string]projections.RunView{"p": parent.view, childID: child.view}
	var lookup func(run string) (projections.Family, bool)
	lookup = func(run string) (projections.Family, bool) {
		v, ok := views[run]
		if !ok {
			return projections.Family{}, false
		}
		return projections.FamilyStatus(v, lookup), true
	}
	if f := projections.FamilyStatus(parent.view, lookup); f.Status != projections.StatusWorking || f.Waiting != nil {
		t.Fatalf("child working: family %+v", f)
	}

	child.apply(aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: "c", Name: "refund", Arguments: json.RawMessage(`{}`)}}}}})
	child.apply(aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "c", Validation: events.CallValid,
		Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "refund-review", Version: 1}}}}})
	views[childID] = child.view
	if child.view.Status != projections.StatusSuspended {
		t.Fatalf("child view %s", child.view.Status)
	}
	f := projections.FamilyStatus(parent.view, lookup)
	if f.Status != projections.StatusSuspended || !slices.Equal(f.Waiting, []string{childID}) {
		t.Fatalf("child suspended: family %+v", f)
	}
	if parent.view.Status != projections.StatusWorking || string(aggregate.Status(parent.state).Kind) != parent.view.Status {
		t.Fatalf("the parent's own status changed: view %s", parent.view.Status)
	}
	agg := aggregate.FamilyStatus(parent.state, func(run string) (aggregate.RunStatus, bool) {
		return aggregate.Status(child.state), run == childID
	})
	if string(agg.Kind) != f.Status || !slices.Equal(agg.Waiting, f.Waiting) {
		t.Fatalf("aggregate.FamilyStatus %+v, view %+v", agg, f)
	}
	if f := projections.FamilyStatus(parent.view, func(string) (projections.Family, bool) { return projections.Family{}, false }); f.Status != projections.StatusWorking {
		t.Fatalf("unknown child: family %+v", f)
	}
}

// TestFamilyStatusAgreesWithAggregate folds random runs that delegate
// (aggregatetest) and, after every event, computes the family status from
// the view and from the state with the same child statuses (every child
// suspended; children suspended by a hash of their id; no child known):
// projections.FamilyStatus and aggregate.FamilyStatus must agree.
func TestFamilyStatusAgreesWithAggregate(t *testing.T) {
	hashed := func(run string) bool {
		h := fnv.New32a()
		h.Write([]byte(run))
		return h.Sum32()%2 == 0
	}
	policies := []struct {
		name string
		kind func(run string) (aggregate.StatusKind, bool)
	}{
		{"all_suspended", func(string) (aggregate.StatusKind, bool) { return aggregate.StatusSuspended, true }},
		{"hashed", func(run string) (aggregate.StatusKind, bool) {
			if hashed(run) {
				return aggregate.StatusSuspended, true
			}
			return aggregate.StatusWorking, true
		}},
		{"unknown", func(string) (aggregate.StatusKind, bool) { return "", false }},
	}
	delegatingSuspended := 0
	for seed := uint64(1); seed <= 1000; seed++ {
		sim := aggregatetest.RandomRun(aggregatetest.Rand(seed), 40)
		var s aggregate.State
		var v projections.RunView
		for _, r := range sim.History {
			s = aggregate.Evolve(s, r)
			v = projections.Apply(v, r)
			for _, p := range policies {
				agg := aggregate.FamilyStatus(s, func(run string) (aggregate.RunStatus, bool) {
					k, ok := p.kind(run)
					return aggregate.RunStatus{Kind: k}, ok
				})
				got := projections.FamilyStatus(v, func(run string) (projections.Family, bool) {
					k, ok := p.kind(run)
					return projections.Family{Status: string(k)}, ok
				})
				if string(agg.Kind) != got.Status || !slices.Equal(agg.Waiting, got.Waiting) {
					t.Fatalf("seed %d version %d %s: aggregate %s %v, view %s %v", seed, r.Version, p.name, agg.Kind, agg.Waiting, got.Status, got.Waiting)
				}
				if len(got.Waiting) > 0 && p.name == "all_suspended" {
					delegatingSuspended++
				}
			}
		}
	}
	if delegatingSuspended == 0 {
		t.Fatal("no random history reached a parent waiting only on suspended children: the cross-check proves nothing")
	}
	t.Logf("%d states of a family suspended on its children", delegatingSuspended)
}
