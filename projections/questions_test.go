package projections_test

import (
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
)

// An action reconciled as unconfirmed is an
// open question — in the view's questions, the summary's count and the
// open-questions read model, with its run, tool, arguments and note —
// while the run goes on and after it finished, until it is resolved; the
// resolution is kept on the action and drops the item.
func TestOpenQuestionUntilResolved(t *testing.T) {
	h := history("q1",
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Runner: "r"},
		events.ModelRequested{Turn: 1, Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "p", Name: "pay", Arguments: json.RawMessage(`{"amount":80}`)}}},
		events.CallValidated{Action: "1/p", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/p", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/p"},
		events.AttemptFenced{Action: "1/p", Attempt: 1},
		events.AttemptReported{Action: "1/p", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "gateway timed out"},
		events.Reconciled{Action: "1/p", Kind: events.ReconciledUnconfirmed, Content: json.RawMessage(`{"unconfirmed":"checking with the bank"}`), By: "alice"},
		events.ModelRequested{Turn: 2, Incarnation: 1},
		events.ModelReplied{Turn: 2, Kind: events.ReplyFinalAnswer, Text: "paid, maybe"},
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted}},
	)
	var old projections.RunView
	for _, r := range h[:9] {
		old = projections.Apply(old, r)
	}
	if old.Status != projections.StatusWorking || len(old.Questions) != 1 {
		t.Fatalf("after the reconciliation: status %s, questions %v; want working with one question", old.Status, old.Questions)
	}
	v := projections.Fold(h)
	items := projections.QuestionItems(v)
	if len(items) != 1 {
		t.Fatalf("open questions %+v", items)
	}
	it := items[0]
	if it.Run != "q1" || it.Action != "1/p" || it.Tool != "pay" || string(it.Arguments) != `{"amount":80}` || it.Note != "checking with the bank" ||
		it.Evidence != "gateway timed out" || it.By != "alice" || !it.Since.Equal(t0.Add(9e9)) || !it.Finished {
		t.Fatalf("open question %+v", it)
	}
	if s := projections.Summarize(v); s.Questions != 1 || s.Status != projections.StatusFinished {
		t.Fatalf("summary %+v", s)
	}
	c := projections.Step(v, rec("q1", 13, events.Resolved{Action: "1/p", Kind: events.ReconciledOutput, Content: json.RawMessage(`{"id":"PAY-1","status":"sent"}`), By: "bob"}))
	a, _ := c.View.Action("1/p")
	if a.State != projections.StateReconciled || a.Result != `{"unconfirmed":"checking with the bank"}` || a.Question == nil || a.Question.Resolution == nil ||
		a.Question.Resolution.Kind != "output" || a.Question.Resolution.Result != `{"id":"PAY-1","status":"sent"}` || a.Question.Resolution.By != "bob" {
		t.Fatalf("after resolve: %+v %+v", a, a.Question)
	}
	if len(c.Questions) != 0 || len(c.DropQuestions) != 1 || c.DropQuestions[0] != "q1.1=2Fp" || len(c.View.Questions) != 0 || c.Summary.Questions != 0 || c.View.Status != projections.StatusFinished {
		t.Fatalf("change after resolve: %+v", c)
	}
}

// The randomized histories the rebuild property runs on hold open
// questions and resolutions (so TestRebuildEqualsIncremental covers them).
func TestHistoriesHoldOpenQuestions(t *testing.T) {
	_, log := projtest.Histories(1, 1000)
	open, resolved := 0, 0
	for _, r := range log {
		switch e := r.Event.(type) {
		case events.Reconciled:
			if e.Kind == events.ReconciledUnconfirmed {
				open++
			}
		case events.Resolved:
			resolved++
		}
	}
	if open == 0 || resolved == 0 {
		t.Fatalf("%d unconfirmed reconciliations, %d resolutions", open, resolved)
	}
}
