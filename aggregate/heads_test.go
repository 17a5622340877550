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
		owed, ended := aggregate.HeadOwedAfter(s, evs)
		for _, e := range evs {
			fold(e)
		}
		if _, fin := s.Finished(); owed != s.HeadBehind() || ended != fin {
			t.Fatalf("after %s: HeadOwedAfter said owed %v, ended %v; the fold says %v, %v", c.CommandName(), owed, ended, s.HeadBehind(), fin)
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

// TestHeadOwedAfterASealedDecisionOwesNothing (docs/adr/0044): a decision
// that owes a signature (a person's cancel that ends the run) owes none
// once its own message ends with the head_signed that seals it, and
// HeadOwedAfter says so before anything is folded; a finished run's
// append owes one, and its seal pays it.
func TestHeadOwedAfterASealedDecisionOwesNothing(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	limits := events.Limits{MaxTurns: 4, MaxConcurrency: 1, ModelTimeout: events.Infinite, ToolTimeout: 1000, MaxResultBytes: 1024, ApprovalExpiry: events.Infinite, AnswerAttempts: 1}
	var s aggregate.State
	decide := func(c aggregate.Command) []events.Event {
		t.Helper()
		evs, err := aggregate.Decide(s, c, now)
		if err != nil {
			t.Fatal(err)
		}
		return evs
	}
	fold := func(evs []events.Event) {
		for _, e := range evs {
			s = aggregate.Evolve(s, events.Recorded{Run: "h2", Version: s.Version() + 1, At: now, Event: e})
		}
	}
	seal := events.HeadSigned{Key: "UKEY", Signer: "runner-a", Signature: "sig", End: true}
	fold(decide(aggregate.Start{Run: "h2", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Limits: limits, Runner: "runner-a"}))
	cancel := decide(aggregate.Cancel{By: "alice", Reason: "done"})
	if owed, ended := aggregate.HeadOwedAfter(s, cancel); !owed || !ended {
		t.Fatalf("the cancel that ends the run: owed %v, ended %v; want a signature owed over the run's end", owed, ended)
	}
	sealed := append(cancel[:len(cancel):len(cancel)], seal)
	if owed, ended := aggregate.HeadOwedAfter(s, sealed); owed || !ended {
		t.Fatalf("the cancel sealed: owed %v, ended %v; want nothing owed, the run ended", owed, ended)
	}
	fold(sealed)
	if _, fin := s.Finished(); s.HeadBehind() || !fin {
		t.Fatalf("folded: behind %v, finished %v", s.HeadBehind(), fin)
	}
	late := []events.Event{events.ReportRefused{Action: "9/none", Attempt: 1, Reason: "run finished"}}
	if owed, _ := aggregate.HeadOwedAfter(s, late); !owed {
		t.Fatal("an append to the finished run: no signature owed")
	}
	if owed, _ := aggregate.HeadOwedAfter(s, append(late, seal)); owed {
		t.Fatal("an append to the finished run, sealed: a signature still owed")
	}
}

// TestHeadBehindFollowsARestart (docs/adr/0026-signed-heads.md;
// docs/adr/0040-who-restarted-and-who-held.md): a restart is a person's
// decision, recorded in the new run's run_forked, so the new run's first
// message owes a signed head — with or without a name — as a pause or a
// cancel does; a fresh start owes none. The snapshot folds to the same
// answer, and HeadOwedAfter (docs/adr/0044) says so before the fold.
func TestHeadBehindFollowsARestart(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	limits := events.Limits{MaxTurns: 4, MaxConcurrency: 1, ModelTimeout: events.Infinite, ToolTimeout: 1000, MaxResultBytes: 1024, ApprovalExpiry: events.Infinite, AnswerAttempts: 1}
	transcript := []events.Message{{Role: "assistant", Text: "paying"}}
	for _, c := range []struct {
		name   string
		fork   *events.RunForked
		behind bool
	}{
		{"a fresh start", nil, false},
		{"a restart by a typed name", &events.RunForked{From: events.ForkedFrom{Run: "parent", Version: 14, Turn: 2}, Transcript: transcript, By: "carol", Reason: "tool fixed"}, true},
		{"a restart naming nobody", &events.RunForked{From: events.ForkedFrom{Run: "parent", Version: 14, Turn: 2}, Transcript: transcript}, true},
	} {
		var s aggregate.State
		evs, err := aggregate.Decide(s, aggregate.Start{Run: "h2", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "go", Limits: limits, Runner: "runner-a", Fork: c.fork}, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if owed, _ := aggregate.HeadOwedAfter(s, evs); owed != c.behind {
			t.Errorf("%s: HeadOwedAfter says owed %v before the fold, want %v (docs/adr/0044)", c.name, owed, c.behind)
		}
		for _, e := range evs {
			s = aggregate.Evolve(s, events.Recorded{Run: "h2", Version: s.Version() + 1, At: now, Event: e})
		}
		if s.HeadBehind() != c.behind {
			t.Errorf("%s: head behind %v, want %v", c.name, s.HeadBehind(), c.behind)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back aggregate.State
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.HeadBehind() != c.behind {
			t.Errorf("%s: the snapshot says head behind %v, want %v", c.name, back.HeadBehind(), c.behind)
		}
		s = aggregate.Evolve(s, events.Recorded{Run: "h2", Version: s.Version() + 1, At: now, Event: events.HeadSigned{Key: "UKEY", Signer: "runner-a", Signature: "sig"}})
		if s.HeadBehind() {
			t.Errorf("%s: a signed head does not pay what the start owed", c.name)
		}
	}
}
