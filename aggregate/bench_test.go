package aggregate

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/weftrun/weft/events"
)

// history100 is the history of a 100-turn run with two tool calls per turn.
func history100(tb testing.TB) []events.Recorded {
	l := defaultLimits()
	l.MaxTurns = 101
	var s State
	var h []events.Recorded
	run := func(c Command) {
		evs, err := Decide(s, c, epoch)
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range evs {
			r := events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: e}
			h = append(h, r)
			s = Evolve(s, r)
		}
	}
	run(Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "go", Limits: l, Runner: "r"})
	for turn := int64(1); turn <= 100; turn++ {
		run(ModelReply{Turn: turn, Reply: Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Calls: []events.ToolCall{
			{ID: "a", Name: "t", Arguments: json.RawMessage(`{}`)}, {ID: "b", Name: "t", Arguments: json.RawMessage(`{}`)}}}}})
		var rs []Resolution
		for _, id := range []string{"a", "b"} {
			rs = append(rs, Resolution{CallID: id, Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}})
		}
		run(ResolveCalls{Turn: turn, Calls: rs})
		for _, id := range []string{"b", "a"} {
			run(Report{Action: fmt.Sprintf("%d/%s", turn, id), Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"ok":true}`)})
		}
	}
	return h
}

// BenchmarkFold100Turns folds a 100-turn, 200-action history (~1400
// events) from scratch, as recovery and audit do.
func BenchmarkFold100Turns(b *testing.B) {
	h := history100(b)
	b.ReportMetric(float64(len(h)), "events")
	for b.Loop() {
		Fold(h)
	}
}

// BenchmarkDecideLateInRun decides one report on the last turn of a
// 100-turn run (Decide clones the state once).
func BenchmarkDecideLateInRun(b *testing.B) {
	h := history100(b)
	s := Fold(h[:len(h)-3])
	c := Report{Action: "100/a", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"ok":true}`)}
	for b.Loop() {
		if _, err := Decide(s, c, epoch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvolveOneEvent folds one report into the state of a 100-turn
// run: the per-event cost of a runner keeping a driven run current.
func BenchmarkEvolveOneEvent(b *testing.B) {
	h := history100(b)
	s := Fold(h[:len(h)-1])
	last := h[len(h)-1]
	for b.Loop() {
		Evolve(s.Clone(), last)
	}
}

// BenchmarkDecideResolve decides the resolution of a tool request (one
// allowed call) early in a run, the decision of every workload step.
func BenchmarkDecideResolve(b *testing.B) {
	h := history100(b)
	// The state right after turn 1's model reply: the run waits for the
	// resolution of its calls.
	var s State
	for _, r := range h {
		s = Evolve(s, r)
		if _, ok := r.Event.(events.ModelReplied); ok {
			break
		}
	}
	c := ResolveCalls{Turn: 1, Calls: []Resolution{
		{CallID: "a", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}},
		{CallID: "b", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}}}}
	for b.Loop() {
		if _, err := Decide(s, c, epoch); err != nil {
			b.Fatal(err)
		}
	}
}
