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

// TestSemantics4_ShowSaysWhenTheViewLagsTheLog: the projector stored the
// view of pay-42 with its approval request pending and stopped; the run's
// log then went on (the request was answered). `weft show` still prints the
// stored view (the query service answers from it), but it must say that the
// view is behind the log, so that nobody takes the listed request as still
// open (docs/semantics.md §4: a person approves what they saw). Once a
// projector
// runs again, show prints the caught-up view and no such note. Before, show
// printed the stale view as the run.
func TestSemantics4_ShowSaysWhenTheViewLagsTheLog(t *testing.T) {
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
	contains(t, "show with the view behind the log", out, "awaiting_approval",
		"the view is at version 6 and the log at 7 (the projector is catching up)")
	_, out, errs = cli(t, "show", "pay-42", "--json")
	contains(t, "show --json with the view behind the log", out, `"version": 6`)
	contains(t, "show --json's note with the view behind the log", errs, "the view is at version 6 and the log at 7")

	startProjector(t, s)
	waitStoredView(t, s, "pay-42", 7)
	code, out, errs = cli(t, "show", "pay-42")
	if code != 0 || strings.Contains(out, "catching up") || strings.Contains(out, "waiting for approval") {
		t.Fatalf("show once the view caught up: %d\n%s%s", code, out, errs)
	}
}

// TestSemantics4_ApproveSaysTheViewLagsWhenItCannotFindTheRequest: the
// projector stored the view of pay-43 before its approval request and
// stopped; the log then got the request. `weft approve` without --revision
// takes the revision from the view, which still has no request: it waits
// for the view (bounded), and when the view does not catch up its refusal
// (still wrong_reference: the CLI sends nothing it could not read) says
// that the view is behind the log and how to go on, instead of telling the
// person the action never asked for approval. Before, it said just that.
func TestSemantics4_ApproveSaysTheViewLagsWhenItCannotFindTheRequest(t *testing.T) {
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
		{"approve", "pay-43", "1/c1", "--approver", "desk", "--credential", "alice"},
		{"reject", "pay-43", "1/c1", "--reason", "no", "--approver", "desk", "--credential", "alice"},
	} {
		code, _, errs := cli(t, args...)
		if code != exitFailed || !strings.Contains(errs, "wrong_reference") ||
			!strings.Contains(errs, "the view is at version 4 and the log at 6 (the projector is catching up)") ||
			!strings.Contains(errs, "--revision") {
			t.Fatalf("%s with the view behind the log: %d %s", args[0], code, errs)
		}
	}
}
