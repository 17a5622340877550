package aggregate

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

func defaultLimits() events.Limits {
	return events.Limits{MaxTurns: 8, MaxConcurrency: 4, ModelTimeout: 600000, ModelRetryDelay: 200, ToolTimeout: 60000,
		MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000, ApprovalExpiry: events.Infinite, AnswerAttempts: 2}
}

// TestScenario01_InvalidLimitsStartNothing is the decision part of scenario
// 1: the agent builder reports every limit error; the aggregate still
// refuses a Start whose limits could never drive a run, and writes nothing.
func TestScenario01_InvalidLimitsStartNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*events.Limits)
	}{
		{"max turns 0", func(l *events.Limits) { l.MaxTurns = 0 }},
		{"concurrency 0", func(l *events.Limits) { l.MaxConcurrency = 0 }},
		{"token budget negative", func(l *events.Limits) { l.TokenBudget = -1 }},
		{"max result bytes 0", func(l *events.Limits) { l.MaxResultBytes = 0 }},
	} {
		l := defaultLimits()
		tc.edit(&l)
		evs, err := Decide(State{}, Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Limits: l}, epoch)
		if weft.ErrorCode(err) != weft.CodeInvalidRequest || len(evs) != 0 {
			t.Errorf("%s: %v, %d events; want invalid_request and nothing", tc.name, err, len(evs))
		}
	}
	for _, id := range []string{"", "a.b", "a b", strings.Repeat("x", 129)} {
		if _, err := Decide(State{}, Start{Run: id, Limits: defaultLimits()}, epoch); weft.ErrorCode(err) != weft.CodeInvalidName {
			t.Errorf("run id %q: %v, want invalid_name", id, err)
		}
	}
}

// TestScenario02_ToolConfigRanges is the decision part of scenario 2: a
// recorded replay budget outside 1..100 or a timeout or settle window
// outside 1 ms..2^32-1 ms is refused; 100 attempts and infinity are fine.
func TestScenario02_ToolConfigRanges(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1")
	for _, tc := range []struct {
		cfg events.ToolConfig
		ok  bool
	}{
		{events.ToolConfig{MaxAttempts: 101}, false},
		{events.ToolConfig{MaxAttempts: -1}, false},
		{events.ToolConfig{MaxAttempts: 100}, true},
		{events.ToolConfig{MaxAttempts: 1, Timeout: 1 << 32}, false},
		{events.ToolConfig{MaxAttempts: 1, Timeout: events.Infinite}, true},
		{events.ToolConfig{MaxAttempts: 1, SettleWithin: 1 << 32}, false},
		{events.ToolConfig{MaxAttempts: 1, SettleWithin: 1<<32 - 1}, true},
	} {
		_, err := Decide(s, ResolveCalls{Turn: 1, Calls: []Resolution{{CallID: "c1", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}, Tool: tc.cfg}}}, epoch)
		if (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.cfg, err)
		}
	}
}

// mustFold starts a run and folds a tool request with the given call ids.
func mustFold(t *testing.T, l events.Limits, calls ...string) State {
	t.Helper()
	var s State
	run := func(c Command) {
		t.Helper()
		evs, err := Decide(s, c, epoch)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			s = Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: e})
		}
	}
	run(Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "go", Limits: l, Runner: "r"})
	r := Reply{Kind: events.ReplyToolRequest}
	for _, id := range calls {
		r.Turn.Calls = append(r.Turn.Calls, events.ToolCall{ID: id, Name: "t", Arguments: json.RawMessage(`{}`)})
	}
	run(ModelReply{Turn: 1, Reply: r})
	return s
}

// TestTranscriptStoredOnce runs 100 turns of one tool call each and checks
// that the history grows linearly: every turn adds the same number of
// bytes, and no event repeats an earlier message.
func TestTranscriptStoredOnce(t *testing.T) {
	l := defaultLimits()
	l.MaxTurns = 101
	var s State
	var sizes []int
	total := 0
	now := epoch
	run := func(c Command) {
		t.Helper()
		evs, err := Decide(s, c, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			env, err := events.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			total += len(env.Payload)
			s = Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: now, Event: e})
		}
	}
	run(Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "count the sheep", Limits: l, Runner: "r"})
	for turn := int64(1); turn <= 100; turn++ {
		before := total
		id := fmt.Sprintf("c%03d", turn)
		run(ModelReply{Turn: turn, Reply: Reply{Kind: events.ReplyToolRequest,
			Turn:  events.Message{Text: "one more sheep", Calls: []events.ToolCall{{ID: id, Name: "count", Arguments: json.RawMessage(`{"n":1}`)}}},
			Usage: &events.Usage{InputTokens: 100, OutputTokens: 10}}})
		run(ResolveCalls{Turn: turn, Calls: []Resolution{{CallID: id, Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}}}})
		run(Report{Action: ActionID(turn, id), Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"sheep":1}`)})
		sizes = append(sizes, total-before)
	}
	// Only the longer turn numbers and action ids may make a later turn
	// bigger; re-recording earlier messages would add hundreds of bytes per
	// earlier turn.
	if sizes[99] > sizes[1]+20 {
		t.Fatalf("turn 100 added %d bytes, turn 2 added %d: the history does not grow linearly", sizes[99], sizes[1])
	}
	tr := Transcript(s)
	// input + 100 × (assistant turn + tool results)
	if len(tr) != 201 {
		t.Fatalf("transcript has %d messages, want 201", len(tr))
	}
	if r := tr[200].Results; len(r) != 1 || string(r[0].Content) != `{"sheep":1}` || r[0].CallID != "c100" {
		t.Fatalf("last results %+v", r)
	}
	if s.Turn() != 101 || s.Run() != "r1" {
		t.Fatalf("next request: turn %d run %q", s.Turn(), s.Run())
	}
}

// TestEvolvePanicsOnImpossibleTransitions checks that Evolve names both the
// event and the state it met.
func TestEvolvePanicsOnImpossibleTransitions(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1")
	defer func() {
		msg := fmt.Sprint(recover())
		if !strings.Contains(msg, "attempt_fenced") || !strings.Contains(msg, "requested") {
			t.Fatalf("panic %q does not name the event and the state", msg)
		}
	}()
	Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: events.AttemptFenced{Action: "1/c1", Attempt: 1, MaxAttempts: 1}})
	t.Fatal("no panic")
}

// TestDecideDoesNotChangeItsState checks that Decide leaves the state it
// was given untouched even when its decision evolves a long batch.
func TestDecideDoesNotChangeItsState(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1", "c2", "c3")
	before := s.Clone()
	evs, err := Decide(s, ResolveCalls{Turn: 1, Calls: []Resolution{
		{CallID: "c1", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}},
		{CallID: "c2", Validation: events.CallUnknownTool},
		{CallID: "c3", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyDeny}},
	}}, epoch)
	if err != nil || len(evs) == 0 {
		t.Fatal(err)
	}
	if fmt.Sprint(s.Actions()) != fmt.Sprint(before.Actions()) {
		t.Fatal("Decide changed the state it was given")
	}
}

// TestErrorsAreCoded checks that refusals are *weft.Error with protocol
// codes, comparable with errors.Is.
func TestErrorsAreCoded(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1")
	_, err := Decide(s, Reconcile{Action: "1/c1", Content: json.RawMessage(`{}`)}, epoch)
	if !errors.Is(err, &weft.Error{Code: weft.CodeNotReconcilable}) {
		t.Fatalf("got %v", err)
	}
	_, err = Decide(State{}, Cancel{}, epoch)
	if weft.ErrorCode(err) != weft.CodeUnknownRun {
		t.Fatalf("got %v", err)
	}
	if d := RetryDelay(200, 10, 0); d != 64*200*time.Millisecond {
		t.Fatalf("retry delay caps at 64x: %v", d)
	}
	if d := RetryDelay(200, 0, time.Hour); d != 10*time.Minute {
		t.Fatalf("retry-after caps at 10 minutes: %v", d)
	}
}

// TestScenario38_ContentKind: reconciliation content is the tool's encoded
// output, {"error": m} or {"unconfirmed": note} (docs/semantics.md §10); null
// and an unconfirmed note that is no string are refused invalid_content,
// so the model never reads null as a result.
func TestScenario38_ContentKind(t *testing.T) {
	for _, tc := range []struct {
		content, kind string // kind "" = refused invalid_content
	}{
		{`{"ok":true}`, events.ReconciledOutput},
		{`42`, events.ReconciledOutput},
		{`"done"`, events.ReconciledOutput},
		{`[]`, events.ReconciledOutput},
		{`{"error":"bank refused"}`, events.ReconciledError},
		{`{"error":"denied","detail":"x"}`, events.ReconciledError},
		{`{"error":null,"data":1}`, events.ReconciledOutput},
		{`{"unconfirmed":"bank says maybe"}`, events.ReconciledUnconfirmed},
		{`{"unconfirmed":"maybe","amount":1}`, events.ReconciledOutput},
		{`null`, ""},
		{` null `, ""},
		{`{"unconfirmed":null}`, ""},
		{`{"unconfirmed":7}`, ""},
		{``, ""},
		{`not json`, ""},
		{`{} {}`, ""},
	} {
		kind, err := ContentKind(json.RawMessage(tc.content))
		if tc.kind == "" {
			if weft.ErrorCode(err) != weft.CodeInvalidContent {
				t.Errorf("%q: kind %q, error %v; want invalid_content", tc.content, kind, err)
			}
			continue
		}
		if err != nil || kind != tc.kind {
			t.Errorf("%q: kind %q, error %v; want %q", tc.content, kind, err, tc.kind)
		}
	}
}

// TestRecoveredPrechecksOnTheRecoveredState checks Recovered, the pure
// pre-check view of a takeover (docs/semantics.md §7): it equals folding the
// recovery's own decision, leaves its argument unchanged, and a command
// pre-checked on it (CheckAnswer) sees what Recover{Then} decides on.
func TestRecoveredPrechecksOnTheRecoveredState(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1", "c2")
	evs, err := Decide(s, ResolveCalls{Turn: 1, Calls: []Resolution{
		{CallID: "c1", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 1}}, Tool: events.ToolConfig{MaxAttempts: 2}},
		{CallID: "c2", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyAllow}, Tool: events.ToolConfig{MaxAttempts: 2}},
	}}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		s = Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: e})
	}
	before, _ := json.Marshal(s)
	r := Recover{Runner: "b", Cause: events.RecoveredRunnerLost, Then: Cancel{}}
	got, err := Recovered(s, r, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := json.Marshal(s); string(after) != string(before) {
		t.Fatal("Recovered changed its argument")
	}
	want := s.Clone()
	evs, err = Decide(s, Recover{Runner: "b", Cause: events.RecoveredRunnerLost}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		want = Evolve(want, events.Recorded{Run: "r1", Version: want.Version() + 1, At: epoch, Event: e})
	}
	a, _ := json.Marshal(got)
	b, _ := json.Marshal(want)
	if string(a) != string(b) || got.Incarnation() != 2 {
		t.Fatalf("Recovered differs from folding the recovery:\n%s\n%s", a, b)
	}
	if _, err := CheckAnswer(got, "1/c1", 1, epoch); err != nil {
		t.Fatalf("pre-check on the recovered state: %v", err)
	}
	if _, err := Recovered(s, Recover{Runner: "b", Cause: events.RecoveredHandedOff}, epoch); weft.ErrorCode(err) != weft.CodeInvalidRequest {
		t.Fatalf("a recovery whose cause contradicts the log: %v, want invalid_request", err)
	}
}

// TestFoldCheckedReturnsImpossibleEvents checks the rule of docs/semantics.md
// §8
// (one malformed message must not stop the world;
// docs/adr/0011-quarantine-and-repair-of-malformed-messages.md) at the
// decision core: a history holding an event no decision could have
// produced (a report for an action that does not exist) folds to an
// *ImpossibleError naming the run, the version and the event, instead of
// a panic; a possible history folds as Fold does.
func TestFoldCheckedReturnsImpossibleEvents(t *testing.T) {
	var s State
	var history []events.Recorded
	run := func(c Command) {
		t.Helper()
		evs, err := Decide(s, c, epoch)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			r := events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: e}
			history = append(history, r)
			s = Evolve(s, r)
		}
	}
	run(Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "go", Limits: defaultLimits(), Runner: "r"})
	reply := Reply{Kind: events.ReplyToolRequest}
	reply.Turn.Calls = []events.ToolCall{{ID: "c1", Name: "t", Arguments: json.RawMessage(`{}`)}}
	run(ModelReply{Turn: 1, Reply: reply})

	got, err := FoldChecked(history)
	if err != nil {
		t.Fatalf("possible history: %v", err)
	}
	if got.Version() != s.Version() || fmt.Sprint(got.Actions()) != fmt.Sprint(s.Actions()) {
		t.Fatalf("FoldChecked folded version %d, Fold %d", got.Version(), s.Version())
	}

	bad := events.Recorded{Run: "r1", Version: s.Version() + 1, At: epoch, Event: events.AttemptReported{Action: "9/nope", Attempt: 1, Outcome: events.OutcomeOutput}}
	_, err = FoldChecked(append(history, bad))
	var ie *ImpossibleError
	if !errors.As(err, &ie) {
		t.Fatalf("impossible history folded to %v, want *ImpossibleError", err)
	}
	if ie.Run != "r1" || ie.Version != bad.Version || ie.Event != events.NameAttemptReported || !strings.Contains(ie.Detail, "9/nope") {
		t.Fatalf("error %+v does not name the run, the version and the event", ie)
	}
	if _, err := EvolveChecked(State{}, bad); !errors.As(err, &ie) || ie.Version != bad.Version {
		t.Fatalf("an event before the start: %v", err)
	}
}
