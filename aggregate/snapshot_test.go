package aggregate_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/events"
)

var update = flag.Bool("update", false, "rewrite testdata/snapshot/*.json from the current encoding")

// TestSnapshotGolden pins the bytes of State's JSON encoding (the snapshot a
// runner keeps, docs/adr/0037): a forked run whose transcript holds every
// field of a message (text, calls, provider data, tool results, a
// corrective prompt) and random runs of fixed seeds encode exactly as the
// files in testdata/snapshot, which were written before the core moved to
// the log's types. Each file also decodes to a State that re-encodes to
// the same bytes, so the snapshots the old code stored still load. A
// change of shape fails here; a deliberate one bumps SnapshotSchema and
// rewrites them with -update.
func TestSnapshotGolden(t *testing.T) {
	cases := map[string]aggregate.State{"forked": forkedState(t)}
	for _, seed := range []uint64{3, 17, 41} {
		cases[fmt.Sprintf("random_%d", seed)] = aggregate.Fold(aggregatetest.RandomRun(aggregatetest.Rand(seed), 50).History)
	}
	for name, s := range cases {
		got, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "snapshot", name+".json")
		if *update {
			if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != string(got)+"\n" {
			t.Errorf("%s: the snapshot encodes\n%s\nwant\n%s", name, got, want)
		}
		var loaded aggregate.State
		if err := json.Unmarshal(want, &loaded); err != nil {
			t.Fatalf("%s: the stored snapshot does not load: %v", name, err)
		}
		again, err := json.Marshal(loaded)
		if err != nil {
			t.Fatal(err)
		}
		if string(want) != string(again)+"\n" {
			t.Errorf("%s: the stored snapshot loads and encodes\n%s\nwant\n%s", name, again, want)
		}
	}
}

// forkedState is a run restarted at turn 3 from a parent whose transcript
// holds every kind of message, then answered with provider data and
// corrected once.
func forkedState(t *testing.T) aggregate.State {
	t.Helper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	limits := events.Limits{MaxTurns: 8, MaxConcurrency: 1, MaxResultBytes: 1000, ApprovalExpiry: 60000}
	fork := &events.RunForked{From: events.ForkedFrom{Run: "parent", Version: 14, Turn: 3}, Transcript: []events.Message{
		{Role: "assistant", Text: "paying", Calls: []events.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":80}`)}}, ProviderData: json.RawMessage(`{"id":"resp-1"}`)},
		{Role: "tool", Results: []events.ToolResult{{CallID: "c1", Name: "pay", Content: json.RawMessage(`{"id":"p-1"}`)}}},
		{Role: "user", Text: "your final answer could not be read: not JSON"},
	}}
	var s aggregate.State
	fold := func(evs ...events.Event) {
		for _, e := range evs {
			s = aggregate.Evolve(s, events.Recorded{Run: "f1", Version: s.Version() + 1, At: now, Event: e})
		}
	}
	evs, err := aggregate.Decide(s, aggregate.Start{Run: "f1", Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Limits: limits, Typed: true, Runner: "r", Fork: fork}, now)
	if err != nil {
		t.Fatal(err)
	}
	fold(evs...)
	fold(events.ModelReplied{Turn: 3, Kind: events.ReplyFinalAnswer, Text: "{", ProviderData: json.RawMessage(`{"id":"resp-2"}`), Usage: &events.Usage{InputTokens: 5, OutputTokens: 1}},
		events.AnswerRejected{Turn: 3, Reason: "unexpected end"})
	return s
}
