package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projector"
)

// loadInboxes appends n runs, one decision each (AppendBatch), whose
// events leave one approval pending (action 1/a), one effect uncertain
// (1/b) and one question open (1/c), the runs a microsecond apart.
func loadInboxes(tb testing.TB, log *eventlog.Log, n int) {
	tb.Helper()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	req := events.Requirement{Name: "finance", Version: 1}
	var ds []eventlog.Decision
	for i := range n {
		ds = append(ds, eventlog.Decision{Run: fmt.Sprintf("inbox-%05d", i), At: t0.Add(time.Duration(i) * time.Microsecond), Events: []events.Event{
			events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "x", Runner: "r"},
			events.ModelRequested{Turn: 1},
			events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
				{ID: "a", Name: "pay", Arguments: json.RawMessage(`{}`)}, {ID: "b", Name: "wire", Arguments: json.RawMessage(`{}`)}, {ID: "c", Name: "wire", Arguments: json.RawMessage(`{}`)}}},
			events.ApprovalRequested{Action: "1/a", Revision: 1, Requirement: req, Why: "policy"},
			events.AttemptFenced{Action: "1/b", Tool: "wire", Attempt: 1},
			events.AttemptReported{Action: "1/b", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "timed out"},
			events.AttemptFenced{Action: "1/c", Tool: "wire", Attempt: 1},
			events.AttemptReported{Action: "1/c", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "timed out"},
			events.Reconciled{Action: "1/c", Kind: events.ReconciledUnconfirmed, Content: json.RawMessage(`{"unconfirmed":"asking the bank"}`), By: "alice"},
		}})
	}
	for i, o := range log.AppendBatch(context.Background(), ds) {
		if o.Err != nil {
			tb.Fatalf("append %s: %v", ds[i].Run, o.Err)
		}
	}
}

// TestInboxesListEveryItem_ClientFollowsNext (docs/protocol/50-queries.md:
// an inbox pages by `next`; docs/adr/0020-query-indexes.md): with 1,010 items
// in each inbox (more than one page of the default 1,000), the query
// client's Approvals, Uncertain and Questions return every item, oldest
// first, none twice — they follow `next` — and the page helpers return
// one page and its cursor.
func TestInboxesListEveryItem_ClientFollowsNext(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	const n = 1010
	loadInboxes(t, s.Log, n)
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	waitSeq(t, p, lastSeq(t, s.JS))
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	c := projector.NewClient(s.Conn)
	check := func(what string, runs []string) {
		t.Helper()
		if len(runs) != n {
			t.Fatalf("%s: %d items, want %d", what, len(runs), n)
		}
		for i, r := range runs {
			if want := fmt.Sprintf("inbox-%05d", i); r != want {
				t.Fatalf("%s: item %d is of %s, want %s (oldest first, each once)", what, i, r, want)
			}
		}
	}
	appr, err := c.Approvals(ctx, projector.InboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for _, it := range appr {
		runs = append(runs, it.Run)
	}
	check("approvals", runs)
	unc, err := c.Uncertain(ctx, projector.InboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	runs = nil
	for _, it := range unc.Items {
		runs = append(runs, it.Run)
	}
	check("uncertain", runs)
	if unc.Next != "" || unc.Now.IsZero() {
		t.Fatalf("uncertain: next %q, now %v", unc.Next, unc.Now)
	}
	qs, err := c.Questions(ctx, projector.InboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	runs = nil
	for _, it := range qs {
		runs = append(runs, it.Run)
	}
	check("questions", runs)
	small, err := c.Approvals(ctx, projector.InboxRequest{Agent: "desk", Limit: 300})
	if err != nil || len(small) != n {
		t.Fatalf("approvals by pages of 300: %d items, %v", len(small), err)
	}
	pg, err := c.ApprovalsPage(ctx, projector.InboxRequest{})
	if err != nil || len(pg.Items) != projector.DefaultInboxLimit || pg.Next == "" {
		t.Fatalf("approvals page: %d items, next %q, %v", len(pg.Items), pg.Next, err)
	}
	// The cursor names a position (time, run, action): the questions
	// after approval 1/a of run inbox-00999 include that run's 1/c.
	rest, err := c.QuestionsPage(ctx, projector.InboxRequest{Cursor: pg.Next})
	if err != nil || len(rest.Items) != n-projector.DefaultInboxLimit+1 || rest.Next != "" {
		t.Fatalf("questions after the approvals' cursor: %d items, next %q, %v", len(rest.Items), rest.Next, err)
	}
}
