package events

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/encoding from the current encoding of encodingSamples")

// encodingSamples holds one value of every event type in which, across the
// set, every field of every type reachable from an event is set, so that
// the golden files pin every JSON key the log can hold.
func encodingSamples() []Event {
	at := time.Date(2026, 1, 1, 0, 0, 1, 5e6, time.UTC)
	later := at.Add(90 * time.Second)
	req := Requirement{Name: "refund-review", Version: 2}
	return []Event{
		RunStarted{Agent: AgentRef{Name: "desk", Version: "3"}, Input: "refund order 7", Correlation: "c-1", Typed: true, Runner: "runner-a",
			Limits: Limits{MaxTurns: 8, MaxConcurrency: 4, TokenBudget: 100, ModelTimeout: 600000, ModelRetryDelay: 200, ToolTimeout: Infinite,
				MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000, ApprovalExpiry: 30, AnswerAttempts: 2, MaxChildren: 4, MaxDepth: 1},
			Parent: &Parent{Run: "r-parent", Action: "2/c9", Depth: 1, FamilyTurns: 6, MaxDepth: 2}},
		ModelRequested{Turn: 2, Incarnation: 1, Why: TurnToolResults, Deadline: &at},
		ModelReplied{Turn: 1, Kind: ReplyToolRequest, Text: "let me look", Calls: []ToolCall{{ID: "c1", Name: "lookup", Arguments: json.RawMessage(`{"id":7}`)}},
			ProviderData: json.RawMessage(`{"id":"resp_1"}`), Reason: "stop", Usage: &Usage{InputTokens: 10, OutputTokens: 2}},
		ModelFailed{Turn: 1, Kind: FailureRateLimited, Status: 429, Message: "slow down", RetryAfter: 1000, RetryAt: &at},
		AnswerRejected{Turn: 1, Reason: "missing field total"},
		CallValidated{Action: "1/c1", Turn: 1, CallID: "c1", Tool: "research", Outcome: CallValid, Detail: "delegation",
			Normalized: json.RawMessage(`{"id":7,"full":false}`), Agent: &AgentRef{Name: "researcher", Version: "1"}},
		PolicyDecided{Action: "1/c1", Context: "approval", Decision: PolicyRequireApproval, Reason: "over 100 EUR", Requirement: &req},
		ApprovalRequested{Action: "1/c1", Revision: 3, Requirement: req, Expires: &at, Why: AskRecovery},
		ApprovalAnswered{Action: "1/c1", Revision: 3, Requirement: req, Answer: AnswerApprove, Reason: "checked", Reviewer: "alice", Verifier: "desk-approvers",
			Identity: Identity{Verified: true, Key: "UABC"},
			Proof: &ApprovalProof{Key: "UABC", Run: "r-1", Action: "1/c1", Revision: 3, Requirement: req, Tool: "refund",
				Arguments: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Approved: "ddccc0f8c09563212aae6802bc6f095158e222bf5564d12ad36947b5d13936b0", Answer: AnswerApprove, Reason: "checked", Expires: later, Signature: "c2lnbmVk"},
			Arguments: json.RawMessage(`{"amount":20}`)},
		RequirementChanged{Action: "1/c1", Revision: 3, From: Requirement{Name: "refund-review", Version: 1}, To: req},
		ActionQueued{Action: "1/c1", Why: QueuedApproved, Config: ToolConfig{Timeout: 50, MaxAttempts: 3, SettleWithin: 20}},
		AttemptFenced{Action: "1/c1", Tool: "lookup", Attempt: 2, Incarnation: 2, Timeout: 50, MaxAttempts: 3, SettleWithin: 20, Deadline: &at},
		AttemptReported{Action: "1/c1", Attempt: 2, Outcome: OutcomeOversize, Content: json.RawMessage(`{"name":"x"}`), Message: "card declined",
			Evidence: "the bank did not answer", Bytes: 2 << 20},
		AttemptLost{Action: "1/c1", Attempt: 2, Cause: CauseTimedOut, Evidence: "attempt 2 timed out after 50 ms", Next: NextSettle, SettleBy: &at},
		ReportRefused{Action: "1/c1", Attempt: 1, Reason: RefusedStale},
		ActionUncertain{Action: "1/c1", Evidence: "no settlement within 20 ms"},
		SettlementAccepted{Action: "1/c1", Attempt: 2, Outcome: OutcomeExplain, Content: json.RawMessage(`{"error":"card declined"}`), Message: "card declined",
			Summary: "bank said no", Late: true},
		SettlementRefused{Action: "1/c1", Reason: "not_awaited", Summary: "wire w-1 sent"},
		Reconciled{Action: "1/c1", Kind: ReconciledUnconfirmed, Content: json.RawMessage(`{"unconfirmed":"ask the bank"}`), By: "carol", Stored: true,
			Reason: "the bank said so", Identity: Identity{Verified: true, Key: "UCAROL"},
			Proof: &CommandProof{Key: "UCAROL", Command: "reconcile_stored", Run: "r-1", Action: "1/c1", Content: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				Reason: "the bank said so", Expires: later, Signature: "c2lnbmVk"}},
		ActionsNotStarted{Actions: []string{"1/c2", "1/c3"}, Reason: NotStartedCancelled},
		CancelRequested{By: "dave", Reason: "customer left", Identity: Identity{Verified: true, Key: "UDAVE"},
			Proof: &CommandProof{Key: "UDAVE", Command: "cancel", Run: "r-1", Reason: "customer left", Expires: later, Signature: "c2ln"}},
		RunHandedOff{Runner: "runner-a", Incarnation: 1, Uncalled: 3},
		RunRecovered{Runner: "runner-b", Incarnation: 2, Previous: "runner-a", Cause: RecoveredHandedOff},
		RunFinished{Outcome: Outcome{Kind: OutcomeBudgetExhausted, Reason: ReasonTokenLimit, Answer: json.RawMessage(`{"total":7}`), Raw: "{total:7",
			Partial: "The refund", Limit: 10, Used: 12, Turn: 3, Action: "1/c1", Setting: "max_result_bytes"}},
		ChildStarted{Action: "1/c1", Child: "c-0a1b", Agent: AgentRef{Name: "researcher", Version: "1"}, Input: "find the invoice", Depth: 1, FamilyTurns: 6, MaxDepth: 2},
		ChildSettled{Action: "1/c1", Child: "c-0a1b", Outcome: Outcome{Kind: OutcomeCompleted, Answer: json.RawMessage(`"found"`)}, Turns: 2,
			Content: json.RawMessage(`"found"`), Bytes: 7, Detached: true},
		Resolved{Action: "1/c1", Kind: ReconciledOutput, Content: json.RawMessage(`{"id":"w-1","status":"sent"}`), By: "erin", Reason: "wire found",
			Identity: Identity{Verified: true, Key: "UERIN"}, Proof: &CommandProof{Key: "UERIN", Command: "resolve", Run: "r-1", Action: "1/c1", Content: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Expires: later, Signature: "c2ln"}},
		HeadSigned{Version: 41, Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", Key: "UCKNE3MXR6UAONAOVKMSVHBHN5IS6JLVOVQ6JXN2OJBBMNR3VALSCZIV", Signer: "runner-a", Signature: "c2ln", End: true},
		// The optional fields, for their encoding: a close records the
		// claim it found or the mark, not both.
		AttemptClosed{Action: "1/c1", Attempt: 2, Incarnation: 2, By: "runner-a", Why: ClosedRunnerLost, Claimed: true,
			ClaimWorker: "w-1", ClaimToken: "tok-1", NotStarted: &ClosedNotStarted{Worker: "w-1", Why: "ended"}},
		RunPaused{By: "dave", Reason: "checking the vendor", Identity: Identity{Verified: true, Key: "UDAVE"},
			Proof: &CommandProof{Key: "UDAVE", Command: "pause", Run: "r-1", Reason: "checking the vendor", Expires: later, Signature: "c2ln"}},
		RunResumed{By: "erin", Reason: "vendor confirmed", Identity: Identity{Verified: true, Key: "UERIN"},
			Proof: &CommandProof{Key: "UERIN", Command: "resume", Run: "r-1", Reason: "vendor confirmed", Expires: later, Signature: "c2ln"}},
		RunForked{From: ForkedFrom{Run: "r-1", Version: 14, Turn: 3}, Transcript: []Message{
			{Role: "assistant", Text: "paying", Calls: []ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"amount":80}`)}}, ProviderData: json.RawMessage(`{"id":"resp-1"}`)},
			{Role: "tool", Results: []ToolResult{{CallID: "c1", Name: "pay", Content: json.RawMessage(`{"id":"p-1"}`)}}},
		}},
		AttemptNotStarted{Action: "1/c1", Attempt: 1, Incarnation: 1, Worker: "w-1", Why: "ended", By: "runner-a", Ended: true},
	}
}

// extraEncodingSamples are the cases of an event's encoding beside its
// one in encodingSamples, each pinned by a golden file of its own
// (TestEncodingExtraCases): the fields added to an event since its golden
// file was written, whose old encoding stays that file.
func extraEncodingSamples() []Event {
	return []Event{forkedWithHash(), forkedBy()}
}

// forkedBy is a fork that records who restarted it, verified by a signed
// restart proof (docs/security.md, "Who did it").
func forkedBy() RunForked {
	f := forkedWithHash()
	f.By, f.Reason, f.Identity = "dave", "retry with the fixed tool", Identity{Verified: true, Key: "UDAVE"}
	f.Proof = &CommandProof{Key: "UDAVE", Command: "restart", Run: "r-1", Content: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Reason: "retry with the fixed tool", Expires: time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC), Signature: "c2ln"}
	return f
}

// forkedWithHash is a fork that records the parent's chain hash at the
// version it read (ForkedFrom.Hash; testdata/encoding/cases).
func forkedWithHash() RunForked {
	return RunForked{From: ForkedFrom{Run: "r-1", Version: 14, Turn: 3, Hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}, Transcript: []Message{
		{Role: "assistant", Text: "paying"},
	}}
}

// TestEncodingExtraCases pins the encoding of extraEncodingSamples as
// TestEncodingGolden pins encodingSamples' (docs/semantics.md §10; §14 for
// the fork's parent hash): each encodes byte for byte to its file in
// testdata/encoding/cases, which decodes to the same event; -update
// rewrites them.
func TestEncodingExtraCases(t *testing.T) {
	for i, e := range extraEncodingSamples() {
		env, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("testdata", "encoding", "cases", string(env.Type)+"."+itoa(int64(i+1))+".v"+itoa(int64(env.Schema))+".json")
		got := append(slices.Clone([]byte(env.Payload)), '\n')
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		golden, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run with -update to create it)", env.Type, err)
		}
		if !bytes.Equal(got, golden) {
			t.Errorf("%s encoding changed:\n got %s\nwant %s", path, got, golden)
		}
		back, err := Decode(env.Type, env.Schema, bytes.TrimSuffix(golden, []byte("\n")))
		if err != nil || !reflect.DeepEqual(back, e) {
			t.Errorf("%s decodes to %+v (%v), want %+v", path, back, err, e)
		}
	}
}

// goldenFile is where the encoding of an event at a schema version is
// pinned: one file per name and version, so a new version adds a file and
// the old one stays as a log the build must still read.
func goldenFile(name Name, schema int) string {
	return filepath.Join("testdata", "encoding", string(name)+".v"+itoa(int64(schema))+".json")
}

// TestEncodingGolden pins the stored JSON of every event (docs/semantics.md
// §10: the log is the record a run is refolded from): the
// payload Encode writes for each of encodingSamples is byte for byte its
// golden file, and every golden file, of any schema version, decodes to an
// event that encodes to the same bytes. A change of a field, a tag, a type
// the events hold or the order of fields fails here; accept it deliberately
// with `go test ./events -run TestEncodingGolden -update` and a new schema
// version when old readers cannot ignore it.
func TestEncodingGolden(t *testing.T) {
	ss := encodingSamples()
	if len(ss) != len(Names()) {
		t.Fatalf("%d encoding samples for %d names", len(ss), len(Names()))
	}
	want := map[string]bool{}
	for i, e := range ss {
		if e.EventName() != Names()[i] {
			t.Errorf("encoding sample %d is %s, Names has %s", i, e.EventName(), Names()[i])
		}
		env, err := Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		path := goldenFile(env.Type, env.Schema)
		want[filepath.Base(path)] = true
		got := append(slices.Clone([]byte(env.Payload)), '\n')
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		golden, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run with -update to create it)", env.Type, err)
			continue
		}
		if !bytes.Equal(got, golden) {
			t.Errorf("%s v%d encoding changed (-update to accept, and bump the schema version if old readers cannot ignore it):\n got %s\nwant %s", env.Type, env.Schema, got, golden)
		}
	}
	files, err := filepath.Glob(filepath.Join("testdata", "encoding", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		base := strings.TrimSuffix(filepath.Base(path), ".json")
		dot := strings.LastIndex(base, ".v")
		if dot < 0 {
			t.Errorf("%s: not <name>.v<schema>.json", path)
			continue
		}
		name, schema := Name(base[:dot]), 0
		if err := json.Unmarshal([]byte(base[dot+2:]), &schema); err != nil {
			t.Errorf("%s: schema: %v", path, err)
			continue
		}
		golden, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		e, err := Decode(name, schema, bytes.TrimSuffix(golden, []byte("\n")))
		if err != nil {
			t.Errorf("%s no longer decodes: %v", path, err)
			continue
		}
		if !want[filepath.Base(path)] {
			continue // an older schema version: it must decode, not re-encode the same
		}
		again, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(again, '\n'), golden) {
			t.Errorf("%s decodes to an event that encodes differently:\n got %s\nwant %s", path, again, golden)
		}
	}
	if len(files) < len(Names()) && !*update {
		t.Errorf("%d golden files for %d events", len(files), len(Names()))
	}
}

// TestEncodingSamplesSetEveryField keeps TestEncodingGolden honest: every
// exported field of every struct type an event reaches is set in at least
// one encoding sample, so no JSON key (and no omitempty field) escapes the
// golden files. A field added to an event without a sample value fails
// here.
func TestEncodingSamplesSetEveryField(t *testing.T) {
	seen := map[string]bool{}
	all := map[string]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i))
			}
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				return
			}
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				if !f.IsExported() {
					continue
				}
				key := v.Type().Name() + "." + f.Name
				all[key] = true
				if !v.Field(i).IsZero() {
					seen[key] = true
				}
				walk(v.Field(i))
			}
		}
	}
	for _, e := range append(encodingSamples(), extraEncodingSamples()...) {
		walk(reflect.ValueOf(e))
	}
	var missing []string
	for k := range all {
		if !seen[k] {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("no encoding sample sets %s", strings.Join(missing, ", "))
	}
}

// TestEncodingBeforeNarrow proves an approval answer written before an
// approve could narrow the call (docs/semantics.md §4, "Approving narrower
// arguments"; events/testdata/encoding/before-narrow) still decodes as an
// answer to the call as asked — no approved arguments, a proof without an
// approved hash — and encodes to the same bytes.
func TestEncodingBeforeNarrow(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "encoding", "before-narrow", "approval_answered.v1.json"))
	if err != nil {
		t.Fatal(err)
	}
	b = bytes.TrimSpace(b)
	e, err := Decode(NameApprovalAnswered, 1, b)
	if err != nil {
		t.Fatal(err)
	}
	ans, ok := e.(ApprovalAnswered)
	if !ok {
		t.Fatalf("decoded %T", e)
	}
	if ans.Arguments != nil || ans.Proof == nil || ans.Proof.Approved != "" {
		t.Errorf("an answer from before narrowing decoded with arguments %s, proof %+v", ans.Arguments, ans.Proof)
	}
	env, err := Encode(ans)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal([]byte(env.Payload), b) {
		t.Errorf("re-encoded\n got %s\nwant %s", env.Payload, b)
	}
}
