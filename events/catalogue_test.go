package events

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// samples holds one fully populated value of every event type.
func samples() []Event {
	at := time.Date(2026, 1, 1, 0, 0, 1, 5e6, time.UTC)
	req := Requirement{Name: "refund-review", Version: 2}
	return []Event{
		RunStarted{Agent: AgentRef{Name: "desk", Version: "3"}, Input: "refund order 7", Correlation: "c-1", Typed: true, Runner: "runner-a",
			Limits: Limits{MaxTurns: 8, MaxConcurrency: 4, TokenBudget: 100, ModelTimeout: 600000, ModelRetryDelay: 200, ToolTimeout: Infinite,
				MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000, ApprovalExpiry: 30, AnswerAttempts: 2, MaxChildren: 4, MaxDepth: 1}},
		ModelRequested{Turn: 2, Incarnation: 1, Why: TurnToolResults, Deadline: &at},
		ModelReplied{Turn: 1, Kind: ReplyToolRequest, Text: "let me look", Calls: []ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{"id":7}`)}},
			ProviderData: json.RawMessage(`{"id":"resp_1"}`), Usage: &Usage{InputTokens: 10, OutputTokens: 2}},
		ModelFailed{Turn: 1, Kind: FailureRateLimited, Status: 429, Message: "slow down", RetryAfter: 1000, RetryAt: &at},
		AnswerRejected{Turn: 1, Reason: "missing field total"},
		CallValidated{Action: "1/c1", Turn: 1, CallID: "c1", Tool: "lookup", Outcome: CallValid, Normalized: json.RawMessage(`{"id":7,"full":false}`)},
		PolicyDecided{Action: "1/c1", Context: "approval", Decision: PolicyRequireApproval, Requirement: &req},
		ApprovalRequested{Action: "1/c1", Revision: 3, Requirement: req, Expires: &at, Why: AskRecovery},
		ApprovalAnswered{Action: "1/c1", Revision: 3, Requirement: req, Answer: AnswerApprove, Reviewer: "alice", Verifier: "desk-approvers"},
		RequirementChanged{Action: "1/c1", Revision: 3, From: Requirement{Name: "refund-review", Version: 1}, To: req},
		ActionQueued{Action: "1/c1", Why: QueuedApproved, Config: ToolConfig{Timeout: 50, MaxAttempts: 3, SettleWithin: 20}},
		AttemptFenced{Action: "1/c1", Tool: "lookup", Attempt: 2, Incarnation: 2, Timeout: 50, MaxAttempts: 3, SettleWithin: 20, Deadline: &at},
		AttemptReported{Action: "1/c1", Attempt: 2, Outcome: OutcomeOutput, Content: json.RawMessage(`{"name":"x"}`)},
		AttemptLost{Action: "1/c1", Attempt: 2, Cause: CauseTimedOut, Evidence: "attempt 2 timed out after 50 ms", Next: NextSettle, SettleBy: &at},
		ReportRefused{Action: "1/c1", Attempt: 1, Reason: RefusedStale},
		ActionUncertain{Action: "1/c1", Evidence: "no settlement within 20 ms"},
		SettlementAccepted{Action: "1/c1", Attempt: 2, Outcome: OutcomeExplain, Message: "card declined", Summary: "bank said no", Late: true},
		SettlementRefused{Action: "1/c1", Reason: "not_awaited", Summary: "wire w-1 sent"},
		Reconciled{Action: "1/c1", Kind: ReconciledUnconfirmed, Content: json.RawMessage(`{"unconfirmed":"ask the bank"}`), By: "carol", Stored: true},
		ActionsNotStarted{Actions: []string{"1/c2", "1/c3"}, Reason: NotStartedCancelled},
		CancelRequested{By: "dave", Reason: "customer left"},
		RunHandedOff{Runner: "runner-a", Incarnation: 1, Uncalled: 3},
		RunRecovered{Runner: "runner-b", Incarnation: 2, Previous: "runner-a", Cause: RecoveredHandedOff},
		RunFinished{Outcome: Outcome{Kind: OutcomeBudgetExhausted, Reason: ReasonTokenLimit, Limit: 10, Used: 12}},
		ChildStarted{Action: "1/c1", Child: "c-0a1b", Agent: AgentRef{Name: "researcher", Version: "1"}, Input: "find the invoice", Depth: 1, FamilyTurns: 6},
		ChildSettled{Action: "1/c1", Child: "c-0a1b", Outcome: Outcome{Kind: OutcomeCompleted, Answer: json.RawMessage(`"found"`)}, Turns: 2, Content: json.RawMessage(`"found"`)},
		Resolved{Action: "1/c1", Kind: ReconciledOutput, Content: json.RawMessage(`{"id":"w-1","status":"sent"}`), By: "erin"},
		HeadSigned{Version: 41, Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Key: "UCKNE3MXR6UAONAOVKMSVHBHN5IS6JLVOVQ6JXN2OJBBMNR3VALSCZIV", Signer: "runner-a", Signature: "c2ln"},
		AttemptClosed{Action: "1/c1", Attempt: 2, Incarnation: 2, By: "runner-a", Why: ClosedCancelled},
		RunPaused{By: "dave", Reason: "checking the vendor"},
		RunResumed{By: "erin", Reason: "vendor confirmed"},
		RunForked{From: ForkedFrom{Run: "r-1", Version: 14, Turn: 3}, Transcript: []Message{{Role: "assistant", Text: "paying", Calls: []ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":80}`)}}, ProviderData: json.RawMessage(`{"id":"resp-1"}`)}, {Role: "tool", Results: []ToolResult{{CallID: "c1", Name: "pay", Content: json.RawMessage(`{"id":"p-1"}`)}}}}},
		AttemptNotStarted{Action: "1/c1", Attempt: 1, Incarnation: 1, Worker: "w-1", Why: "ended", By: "runner-a"},
	}
}

func TestCatalogueIsClosedAndRoundTrips(t *testing.T) {
	ss := samples()
	if len(ss) != len(Names()) {
		t.Fatalf("%d samples for %d names", len(ss), len(Names()))
	}
	seen := map[Name]bool{}
	for i, e := range ss {
		n := e.EventName()
		if n != Names()[i] {
			t.Errorf("sample %d is %s, Names has %s", i, n, Names()[i])
		}
		if seen[n] || slices.Contains(Reserved(), n) {
			t.Errorf("name %s is used twice or reserved", n)
		}
		seen[n] = true
		env, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := env.Event()
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if !reflect.DeepEqual(back, e) {
			t.Errorf("%s does not round-trip:\n got %#v\nwant %#v", n, back, e)
		}
		d := Describe(e)
		if !strings.HasPrefix(d, string(n)) || strings.Contains(d, "\n") {
			t.Errorf("Describe(%s) = %q: want one line starting with the name", n, d)
		}
	}
}

func TestDecodeRefusesUnknownNamesAndSchemas(t *testing.T) {
	if _, err := Decode("run_exploded", 1, json.RawMessage(`{}`)); !errors.Is(err, ErrUnknownEvent) {
		t.Errorf("unknown name: %v", err)
	}
	if _, err := Decode(NameRunStarted, 2, json.RawMessage(`{}`)); !errors.Is(err, ErrUnknownEvent) {
		t.Errorf("unknown schema: %v", err)
	}
	if _, err := Decode(NameRunStarted, 1, json.RawMessage(`{"agent":`)); err == nil || errors.Is(err, ErrUnknownEvent) {
		t.Errorf("bad payload: %v", err)
	}
}

// TestDescribeGolden pins the Describe format: golden scripts and the CLI
// timeline depend on it.
func TestDescribeGolden(t *testing.T) {
	var b strings.Builder
	for _, e := range samples() {
		b.WriteString(Describe(e))
		b.WriteByte('\n')
	}
	want, err := os.ReadFile("testdata/describe.golden")
	if os.Getenv("REWRITE") != "" {
		_ = os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile("testdata/describe.golden", []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("Describe changed (REWRITE=1 to accept):\n%s", got)
	}
}

// TestProtocolDocListsEveryEvent checks that docs/protocol/20-events.md
// documents every event of the catalogue.
func TestProtocolDocListsEveryEvent(t *testing.T) {
	doc, err := os.ReadFile("../docs/protocol/20-events.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range Names() {
		if !strings.Contains(string(doc), "`"+string(n)+"`") {
			t.Errorf("docs/protocol/20-events.md does not document %s", n)
		}
	}
}

// TestMillisDurationSaturates checks that the longest limits (approval
// expiry allows 2^53-1 ms) never overflow into a negative duration, which
// would put a deadline in the past (scenario 20).
func TestMillisDurationSaturates(t *testing.T) {
	for _, m := range []Millis{1<<53 - 1, Millis(math.MaxInt64 / int64(time.Millisecond)), Millis(math.MaxInt64/int64(time.Millisecond)) + 1} {
		if d, ok := m.Duration(); !ok || d < time.Duration(math.MaxInt64/int64(time.Millisecond))*time.Millisecond {
			t.Errorf("%d ms: %v %v", m, d, ok)
		}
	}
	if d, ok := Millis(1500).Duration(); !ok || d != 1500*time.Millisecond {
		t.Errorf("1500 ms: %v %v", d, ok)
	}
	if _, ok := Infinite.Duration(); ok {
		t.Error("infinite has a duration")
	}
}
