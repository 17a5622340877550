package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// startProjector runs a projector on s's log until the returned stop is
// called (stop waits for it to return and release its lease).
func startProjector(t *testing.T, s *natstest.Server) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitStoredView waits until the projector stored a view of run at version
// at least v, and returns it.
func waitStoredView(t *testing.T, s *natstest.Server, run string, version uint64) projections.RunView {
	t.Helper()
	ctx := context.Background()
	views, err := s.JS.KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		e, err := views.Get(ctx, run)
		if err == nil {
			v, err := projections.DecodeView(e.Value())
			if err != nil {
				t.Fatal(err)
			}
			if v.Version >= version {
				return v
			}
		}
		if i == 3000 {
			t.Fatalf("the projector never stored the view of %s at version %d (last error %v)", run, version, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSemantics4_ShowPrintsTheLogsHeadAndSaysWhenTheListsLag: the
// projector stored the view of pay-42 with its approval request pending and
// stopped; the run's log then went on (the request was answered). `weft
// show` prints the run at the log's head (the run query folds the log's
// newer events onto the stored view), so nobody takes the answered request
// as still open (docs/semantics.md §4: a person approves what they saw), and
// says that the lists and inboxes, which follow the stored view, do not
// have it yet. Once a projector runs again, show prints no such note.
// Before, show printed the stored view, the request still pending, with a
// note; a run with no stored view yet was folded from the log, so a reader
// could see a run go back from a folded head to an older stored view.
func TestSemantics4_ShowPrintsTheLogsHeadAndSaysWhenTheListsLag(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	svc, err := projector.Serve(context.Background(), s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	stop := startProjector(t, s)

	req := events.Requirement{Name: "finance", Version: 1}
	appendRun(t, s.Log, "pay-42",
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice 42", Runner: "r1"},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
			{ID: "c1", Name: "pay_invoice", Arguments: json.RawMessage(`{"invoice":42}`)}}},
		events.CallValidated{Action: "1/c1", Turn: 1, CallID: "c1", Tool: "pay_invoice", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/c1", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/c1", Revision: 1, Requirement: req, Why: events.AskPolicy},
	)
	waitStoredView(t, s, "pay-42", 6)
	stop()
	appendRun(t, s.Log, "pay-42",
		events.ApprovalAnswered{Action: "1/c1", Revision: 1, Requirement: req, Answer: events.AnswerApprove, Reviewer: "alice"},
	)

	t.Setenv("NATS_URL", s.URL)
	code, out, errs := cli(t, "show", "pay-42")
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	contains(t, "show with the stored view behind the log", out,
		"the lists and inboxes may not have what follows yet: the stored view is at version 6 and the log at 7 (the projector is catching up)")
	contains(t, "show at the log's head", out, "1/c1 revision 1: approve by alice", "(version 7)")
	_, out, errs = cli(t, "show", "pay-42", "--json")
	contains(t, "show --json with the stored view behind the log", out, `"version": 7`)
	contains(t, "show --json's note with the stored view behind the log", errs, "the stored view is at version 6 and the log at 7")

	startProjector(t, s)
	waitStoredView(t, s, "pay-42", 7)
	code, out, errs = cli(t, "show", "pay-42")
	if code != 0 || strings.Contains(out, "catching up") || strings.Contains(out, "waiting for approval") {
		t.Fatalf("show once the view caught up: %d\n%s%s", code, out, errs)
	}
}

// TestSemantics4_ApproveFindsARequestTheProjectorHasNotStored: the
// projector stored the view of pay-43 before its approval request and
// stopped; the log then got the request. `weft approve` and `weft reject`
// without --revision take the revision from the run query, which answers
// at the log's head: they find revision 1 and send it (here no runner
// serves the command API, so the answer is unavailable, never the CLI's own
// wrong_reference). Before, the CLI read the stored view, found no request
// and refused by itself, telling the person the action never asked.
func TestSemantics4_ApproveFindsARequestTheProjectorHasNotStored(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	svc, err := projector.Serve(context.Background(), s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	stop := startProjector(t, s)

	req := events.Requirement{Name: "finance", Version: 1}
	appendRun(t, s.Log, "pay-43",
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay invoice 43", Runner: "r1"},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
			{ID: "c1", Name: "pay_invoice", Arguments: json.RawMessage(`{"invoice":43}`)}}},
		events.CallValidated{Action: "1/c1", Turn: 1, CallID: "c1", Tool: "pay_invoice", Outcome: events.CallValid},
	)
	waitStoredView(t, s, "pay-43", 4)
	stop()
	appendRun(t, s.Log, "pay-43",
		events.PolicyDecided{Action: "1/c1", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/c1", Revision: 1, Requirement: req, Why: events.AskPolicy},
	)

	t.Setenv("NATS_URL", s.URL)
	for _, args := range [][]string{
		{"approve", "pay-43", "1/c1", "--approver", "desk", "--credential", "alice", "--no-retry"},
		{"reject", "pay-43", "1/c1", "--reason", "no", "--approver", "desk", "--credential", "alice", "--no-retry"},
	} {
		code, _, errs := cli(t, args...)
		if code != exitUnavailable || strings.Contains(errs, "wrong_reference") || !strings.Contains(errs, "unavailable") {
			t.Fatalf("%s with the stored view behind the log: %d %s", args[0], code, errs)
		}
	}
}
