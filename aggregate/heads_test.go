package aggregate_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
)

// TestHeadBehindFollowsPeoplesDecisionsAndTheEnd (docs/adr/0026-signed-heads.md):
// a signature is owed after a decision a person made (a pause, a resume, a
// cancel), after the run's end, and after anything appended to a finished
// run; a head_signed pays it; the runner's own events (the start) owe
// nothing. The snapshot of each state folds to the same answer.
func TestHeadBehindFollowsPeoplesDecisionsAndTheEnd(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s aggregate.State
	fold := func(e events.Event) {
		t.Helper()
		s = aggregate.Evolve(s, events.Recorded{Run: "h1", Version: s.Version() + 1, At: now, Event: e})
		var back aggregate.State
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.HeadBehind() != s.HeadBehind() {
			t.Fatalf("after %s: the snapshot says head behind %v, the fold %v", e.EventName(), back.HeadBehind(), s.HeadBehind())
		}
	}
	step := func(c aggregate.Command) {
		t.Helper()
		evs, err := aggregate.Decide(s, c, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			fold(e)
		}
	}
	signed := events.HeadSigned{Key: "UKEY", Signer: "runner-a", Signature: "sig"}
	want := func(behind bool, after string) {
		t.Helper()
		if s.HeadBehind() != behind {
			t.Fatalf("after %s: head behind %v, want %v", after, s.HeadBehind(), behind)
		}
	}
	limits := events.Limits{MaxTurns: 4, MaxConcurrency: 1, ModelTimeout: events.Infinite, ToolTimeout: 1000, MaxResultBytes: 1024, ApprovalExpiry: events.Infinite, AnswerAttempts: 1}
	step(aggregate.Start{Run: "h1", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Limits: limits, Runner: "runner-a"})
	want(false, "the start")
	step(aggregate.Pause{By: "alice", Reason: "look"})
	want(true, "a pause")
	fold(signed)
	want(false, "a signed head")
	step(aggregate.Resume{By: "alice", Reason: "looked"})
	want(true, "a resume")
	fold(signed)
	step(aggregate.Cancel{By: "alice", Reason: "done"})
	if _, fin := s.Finished(); !fin {
		t.Fatal("the cancel of a run with nothing in flight did not finish it")
	}
	want(true, "the cancel and the run's end")
	fold(signed)
	want(false, "the end head")
	fold(events.ReportRefused{Action: "9/none", Attempt: 1, Reason: "run finished"})
	want(true, "an append to the finished run")
}
