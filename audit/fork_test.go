package audit_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
)

// forkOf is a run restarted from parent's turn 2 after its last event,
// recording hash as the parent's chain hash there: it asks turn 2 again
// and finishes.
func forkOf(t *testing.T, parent []events.Envelope, hash string) []events.Envelope {
	t.Helper()
	last := parent[len(parent)-1]
	return chain(t, "pay-42-again", []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay invoice 42", Runner: "runner-1",
			Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		events.RunForked{From: events.ForkedFrom{Run: last.Run, Version: last.Version, Turn: 2, Hash: hash}, Transcript: []events.Message{
			{Role: "assistant", Calls: []events.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"invoice":42}`)}}},
			{Role: "tool", Results: []events.ToolResult{{CallID: "c1", Name: "pay", Content: json.RawMessage(`{"receipt":"R-9"}`)}}},
		}},
		events.ModelRequested{Turn: 2, Incarnation: 1, Why: events.TurnToolResults},
		events.ModelReplied{Turn: 2, Kind: events.ReplyFinalAnswer, Text: "paid", Usage: &events.Usage{InputTokens: 150, OutputTokens: 5}},
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"paid"`)}},
	})
}

// TestVerifyChecksTheForksLinkToItsParent (docs/semantics.md §14; the
// fork records its parent's chain hash at the version it read): with the
// parent's history given, a child whose recorded hash is the parent's
// event's verifies with the link checked; a parent edited at that event,
// a parent cut short before it, or another run's history fails "fork"
// naming the run and version; without the parent, or for a fork recorded
// before forks recorded the hash, the child verifies as before and says
// the link is unchecked, and why.
func TestVerifyChecksTheForksLinkToItsParent(t *testing.T) {
	parent := chain(t, "pay-42", paymentRun())
	if rep := audit.Verify(parent); !rep.OK() || rep.Fork != nil {
		t.Fatalf("the parent: %+v", rep)
	}
	child := forkOf(t, parent, parent[len(parent)-1].Hash())

	rep := audit.Verify(child, audit.WithParent(parent))
	if !rep.OK() || rep.Fork == nil || !rep.Fork.Checked || rep.Fork.Parent != "pay-42" || rep.Fork.Version != uint64(len(parent)) {
		t.Fatalf("the child with its parent: %+v (fork %+v)", rep.Problem, rep.Fork)
	}

	edited := append([]events.Envelope(nil), parent...)
	edited[len(edited)-1].Payload = json.RawMessage(strings.Replace(string(edited[len(edited)-1].Payload), `paid`, `PAID`, 1))
	other := chain(t, "pay-43", paymentRun())
	for name, p := range map[string][]events.Envelope{"edited": edited, "cut": parent[:len(parent)-1], "another run": other} {
		rep := audit.Verify(child, audit.WithParent(p))
		if rep.OK() || rep.Problem.Kind != audit.KindFork || !strings.Contains(rep.Problem.Message, "pay-4") {
			t.Errorf("the child with its parent %s: %+v, want a %q problem", name, rep.Problem, audit.KindFork)
		}
	}

	for name, c := range map[string]struct {
		envs []events.Envelope
		opts []audit.Option
		why  string
	}{
		"no parent given":  {child, nil, "not given"},
		"recorded no hash": {forkOf(t, parent, ""), []audit.Option{audit.WithParent(edited)}, "recorded no chain hash"},
	} {
		rep := audit.Verify(c.envs, c.opts...)
		if !rep.OK() || rep.Fork == nil || rep.Fork.Checked || !strings.Contains(rep.Fork.Unchecked, c.why) {
			t.Errorf("%s: %+v (fork %+v), want it verified, the link unchecked: %s", name, rep.Problem, rep.Fork, c.why)
		}
	}
}
