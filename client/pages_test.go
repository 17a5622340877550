package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// The inbox pages (docs/protocol/50-queries.md, weft.api.query.approvals,
// uncertain, questions): each page holds at most its limit, oldest first,
// and names the next page's cursor until the last; the pages together are
// what Approvals, Uncertain and Questions return whole. CaughtUp compares
// a view with the run's log: a view read before an approval is applied is
// behind once the approval is answered (docs/protocol/40-commands.md: a
// success is answered once the command's decision landed in the log).
func TestClientInboxPagesAndCaughtUp(t *testing.T) {
	c := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// INV-7 waits for an approval; INV-13's payment is uncertain.
	runs := map[string]string{"pg-1": "INV-7", "pg-2": "INV-7", "pg-3": "INV-7", "pg-4": "INV-13", "pg-5": "INV-13"}
	views := map[string]projections.RunView{}
	for run, inv := range runs {
		if _, err := c.Start(ctx, api.StartRequest{Run: run, Agent: demo.AgentName, Input: "pay invoice " + inv}); err != nil {
			t.Fatal(err)
		}
	}
	for run := range runs {
		v, err := c.Wait(ctx, run, client.Suspended)
		if err != nil {
			t.Fatal(err)
		}
		views[run] = v
	}
	// The projector follows the log: wait until it lists every item.
	var all []projections.ApprovalItem
	var unc projector.UncertainReply
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		all, _ = c.Approvals(ctx, projector.InboxRequest{})
		unc, _ = c.Uncertain(ctx, projector.InboxRequest{})
		if len(all) == 3 && len(unc.Items) == 2 {
			break
		}
	}
	if len(all) != 3 || len(unc.Items) != 2 {
		t.Fatalf("inbox: %d approvals, %d uncertain; want 3 and 2", len(all), len(unc.Items))
	}

	first, err := c.ApprovalsPage(ctx, projector.InboxRequest{Limit: 2})
	if err != nil || len(first.Items) != 2 || first.Next == "" {
		t.Fatalf("approvals page 1: %v, %d items, next %q; want 2 items and a next cursor", err, len(first.Items), first.Next)
	}
	second, err := c.ApprovalsPage(ctx, projector.InboxRequest{Limit: 2, Cursor: first.Next})
	if err != nil || len(second.Items) != 1 || second.Next != "" {
		t.Fatalf("approvals page 2: %v, %d items, next %q; want the last item and no next cursor", err, len(second.Items), second.Next)
	}
	for i, it := range append(first.Items, second.Items...) {
		if it.Run != all[i].Run || it.Action != all[i].Action {
			t.Fatalf("approvals page item %d is %s/%s, Approvals has %s/%s", i, it.Run, it.Action, all[i].Run, all[i].Action)
		}
	}

	u1, err := c.UncertainPage(ctx, projector.InboxRequest{Limit: 1})
	if err != nil || len(u1.Items) != 1 || u1.Next == "" {
		t.Fatalf("uncertain page 1: %v, %d items, next %q", err, len(u1.Items), u1.Next)
	}
	u2, err := c.UncertainPage(ctx, projector.InboxRequest{Limit: 1, Cursor: u1.Next})
	if err != nil || len(u2.Items) != 1 || u2.Next != "" || u2.Items[0].Run == u1.Items[0].Run {
		t.Fatalf("uncertain page 2: %v, %+v", err, u2)
	}

	// An unconfirmed reconciliation leaves an open question: two of them,
	// one page each.
	notes := map[string]string{"pg-4": "asking the bank", "pg-5": "asking the payee"}
	for _, run := range []string{"pg-4", "pg-5"} {
		pay := views[run].Actions[len(views[run].Actions)-1].ID
		if _, err := c.Reconcile(ctx, api.ReconcileRequest{CommandID: run + "-r", Run: run, Action: pay, Content: []byte(`{"unconfirmed":"` + notes[run] + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	var open []projections.QuestionItem
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if open, err = c.Questions(ctx, projector.InboxRequest{}); err == nil && len(open) == 2 {
			break
		}
	}
	if len(open) != 2 {
		t.Fatalf("questions: %v, %d open; want 2", err, len(open))
	}
	q1, err := c.QuestionsPage(ctx, projector.InboxRequest{Limit: 1})
	if err != nil || len(q1.Items) != 1 || q1.Next == "" {
		t.Fatalf("questions page 1: %v, %d items, next %q; want 1 item and a next cursor", err, len(q1.Items), q1.Next)
	}
	q2, err := c.QuestionsPage(ctx, projector.InboxRequest{Limit: 1, Cursor: q1.Next})
	if err != nil || len(q2.Items) != 1 || q2.Next != "" {
		t.Fatalf("questions page 2: %v, %d items, next %q; want the last item and no next cursor", err, len(q2.Items), q2.Next)
	}
	for i, it := range append(q1.Items, q2.Items...) {
		if it.Run != open[i].Run || it.Action != open[i].Action || it.Note != notes[it.Run] {
			t.Fatalf("questions page item %d is %s/%s %q, Questions has %s/%s", i, it.Run, it.Action, it.Note, open[i].Run, open[i].Action)
		}
	}

	// Wait's view is the run's log folded: caught up. Once an approval
	// is answered, the same view is behind.
	v := views["pg-1"]
	if ok, err := c.CaughtUp(ctx, v); err != nil || !ok {
		t.Fatalf("CaughtUp of a view at the log's head: %v, %v; want true", ok, err)
	}
	a := v.Actions[len(v.Actions)-1]
	if a.Pending == nil {
		t.Fatalf("pg-1's last action %s has no pending approval", a.ID)
	}
	if _, err := c.Approve(ctx, api.ApproveRequest{CommandID: "pg-a", Run: "pg-1", Action: a.ID, Revision: a.Pending.Revision, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.CaughtUp(ctx, v); err != nil || ok {
		t.Fatalf("CaughtUp of a view read before an applied approval: %v, %v; want false", ok, err)
	}
}
