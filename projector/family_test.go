package projector_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// family drives runs through the decision core, as a runner would, and
// collects the events they record.
type family struct {
	t      *testing.T
	at     time.Time
	states map[string]aggregate.State
	recs   []events.Recorded
}

func (f *family) apply(run string, c aggregate.Command) {
	f.t.Helper()
	f.at = f.at.Add(time.Second)
	s := f.states[run]
	evs, err := aggregate.Decide(s, c, f.at)
	if err != nil {
		f.t.Fatalf("%s %s: %v", run, c.CommandName(), err)
	}
	for _, e := range evs {
		r := events.Recorded{Run: run, Version: s.Version() + 1, At: f.at, Event: e}
		s = aggregate.Evolve(s, r)
		f.recs = append(f.recs, r)
	}
	f.states[run] = s
}

// flush returns the events recorded since the last flush.
func (f *family) flush() []events.Recorded {
	out := f.recs
	f.recs = nil
	return out
}

func (f *family) delegate(run, callID, agent string) {
	f.apply(run, aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: callID, Name: agent, Arguments: json.RawMessage(`{"input":"look into it"}`)}}}}})
	f.apply(run, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: callID, Validation: events.CallValid,
		Delegate: &events.AgentRef{Name: agent, Version: "1"}, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}}}})
}

// TestRunQueryFamilyStatus (docs/semantics.md §6: status "computed for the run
// and its children"; docs/protocol/50-queries.md): a three-generation
// family recorded through the decision core — desk delegates to
// researcher, which delegates to a clerk — answered by the run query over
// NATS. While the clerk works every run's family status is working; once
// the clerk waits for an approval, the researcher's family is suspended
// waiting for the clerk and the desk's is suspended waiting for the
// researcher, while every own status stays working. A delegation whose
// child run has no events yet leaves the parent working, the child listed
// without a status.
func TestRunQueryFamilyStatus(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })

	limits := events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000, MaxChildren: 4, MaxDepth: 2, ApprovalExpiry: 60000}
	f := &family{t: t, at: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), states: map[string]aggregate.State{}}
	f.apply("desk-1", aggregate.Start{Run: "desk-1", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Runner: "r", Limits: limits})
	f.delegate("desk-1", "a", "researcher")
	researcher := aggregate.ChildRunID("desk-1", "1/a")
	f.apply(researcher, aggregate.Start{Run: researcher, Agent: events.AgentRef{Name: "researcher", Version: "1"}, Input: "look into it", Runner: "r", Limits: limits,
		Parent: &events.Parent{Run: "desk-1", Action: "1/a", Depth: 1, FamilyTurns: 6, MaxDepth: 2}})
	f.delegate(researcher, "b", "clerk")
	clerk := aggregate.ChildRunID(researcher, "1/b")
	f.apply(clerk, aggregate.Start{Run: clerk, Agent: events.AgentRef{Name: "clerk", Version: "1"}, Input: "look into it", Runner: "r", Limits: limits,
		Parent: &events.Parent{Run: researcher, Action: "1/b", Depth: 2, FamilyTurns: 4, MaxDepth: 2}})
	appendLog(t, s.Log, f.flush())
	waitSeq(t, p, lastSeq(t, s.JS))

	desk, _ := request[projector.RunReply](t, s.Conn, "run", `{"run":"desk-1"}`)
	if desk.View.Status != projections.StatusWorking || desk.FamilyStatus.Status != projections.StatusWorking || desk.FamilyStatus.Waiting != nil {
		t.Fatalf("clerk working: desk %s family %+v", desk.View.Status, desk.FamilyStatus)
	}
	if len(desk.ChildStatus) != 1 || desk.ChildStatus[0].Run != researcher || desk.ChildStatus[0].Status != projections.StatusWorking {
		t.Fatalf("clerk working: desk children %+v", desk.ChildStatus)
	}

	// The clerk asks for a refund that needs approval.
	f.apply(clerk, aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: "c", Name: "refund", Arguments: json.RawMessage(`{}`)}}}}})
	f.apply(clerk, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "c", Validation: events.CallValid,
		Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "refund-review", Version: 1}}}}})
	appendMore(t, s.Log, f.flush())
	waitSeq(t, p, lastSeq(t, s.JS))

	desk, _ = request[projector.RunReply](t, s.Conn, "run", `{"run":"desk-1"}`)
	if desk.View.Status != projections.StatusWorking {
		t.Fatalf("desk's own status %s", desk.View.Status)
	}
	if desk.FamilyStatus.Status != projections.StatusSuspended || !slices.Equal(desk.FamilyStatus.Waiting, []string{researcher}) {
		t.Fatalf("clerk suspended: desk family %+v", desk.FamilyStatus)
	}
	cs := desk.ChildStatus
	if len(cs) != 1 || cs[0].Status != projections.StatusWorking || cs[0].FamilyStatus == nil ||
		cs[0].FamilyStatus.Status != projections.StatusSuspended || !slices.Equal(cs[0].FamilyStatus.Waiting, []string{clerk}) {
		t.Fatalf("clerk suspended: desk children %+v", cs)
	}
	mid, _ := request[projector.RunReply](t, s.Conn, "run", `{"run":"`+researcher+`"}`)
	if mid.View.Parent == nil || mid.View.Parent.Run != "desk-1" || mid.FamilyStatus.Status != projections.StatusSuspended ||
		len(mid.ChildStatus) != 1 || mid.ChildStatus[0].Status != projections.StatusSuspended {
		t.Fatalf("researcher reply %+v family %+v children %+v", mid.View.Parent, mid.FamilyStatus, mid.ChildStatus)
	}
	leaf, _ := request[projector.RunReply](t, s.Conn, "run", `{"run":"`+clerk+`"}`)
	if leaf.FamilyStatus.Status != projections.StatusSuspended || leaf.FamilyStatus.Waiting != nil || leaf.ChildStatus != nil {
		t.Fatalf("clerk family %+v children %+v", leaf.FamilyStatus, leaf.ChildStatus)
	}
	// The same reply through the Go client.
	got, err := projector.NewClient(s.Conn).RunFamily(ctx, "desk-1")
	if err != nil || got.FamilyStatus.Status != projections.StatusSuspended || len(got.ChildStatus) != 1 {
		t.Fatalf("client: %+v %v", got.FamilyStatus, err)
	}

	// A delegation whose child run has not recorded its start yet.
	f.apply("desk-2", aggregate.Start{Run: "desk-2", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Runner: "r", Limits: limits})
	f.delegate("desk-2", "a", "researcher")
	appendMore(t, s.Log, f.flush())
	waitSeq(t, p, lastSeq(t, s.JS))
	d2, _ := request[projector.RunReply](t, s.Conn, "run", `{"run":"desk-2"}`)
	if d2.FamilyStatus.Status != projections.StatusWorking || len(d2.ChildStatus) != 1 ||
		d2.ChildStatus[0].Run != aggregate.ChildRunID("desk-2", "1/a") || d2.ChildStatus[0].Status != "" || d2.ChildStatus[0].FamilyStatus != nil {
		t.Fatalf("unstarted child: family %+v children %+v", d2.FamilyStatus, d2.ChildStatus)
	}
}

// appendMore appends recs after the runs' current heads.
func appendMore(t *testing.T, log *eventlog.Log, recs []events.Recorded) {
	t.Helper()
	ctx := context.Background()
	for _, r := range recs {
		head, err := log.Head(ctx, r.Run)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := log.Append(ctx, r.Run, head, r.At, r.Event); err != nil {
			t.Fatalf("append %s v%d: %v", r.Run, r.Version, err)
		}
	}
}
