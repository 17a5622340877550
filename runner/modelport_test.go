package runner

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
)

// constsOf returns the values of the constants of type typ declared in the
// non-test files of package dir, parsed from source so that a constant
// added on either side of the model port is seen without a list to keep.
func constsOf(t *testing.T, dir, typ string) []string {
	t.Helper()
	pkgs, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range pkgs {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok {
						t.Fatalf("%s: a %s constant that is not a literal", name, typ)
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, s)
				}
			}
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatalf("no %s constants in %s", typ, dir)
	}
	return out
}

// TestModelPortConversions: the log's own model-turn types (docs/adr/0018),
// which the core speaks (docs/adr/0037), and the model port's agree kind
// for kind and role for role. Every reply and failure kind and every
// message role the model package defines has an event value of the same
// stored string, and the conversions map each to it (both ways for roles);
// the log defines no kind the port cannot report; a failure is retryable
// in the log exactly when the port says the runtime retries it
// (docs/semantics.md §2); calls, usage and messages convert both ways
// unchanged and encode alike. Adding or revaluing a kind on one side only
// fails here, so the log format changes only when events does.
func TestModelPortConversions(t *testing.T) {
	modelReplies, eventReplies := constsOf(t, "../model", "ReplyKind"), constsOf(t, "../events", "ReplyKind")
	if !slices.Equal(modelReplies, eventReplies) {
		t.Errorf("reply kinds: model %v, events %v", modelReplies, eventReplies)
	}
	for _, k := range modelReplies {
		if got := replyKind(model.ReplyKind(k)); string(got) != k {
			t.Errorf("replyKind(%s) = %s", k, got)
		}
	}
	modelFailures, eventFailures := constsOf(t, "../model", "ErrorKind"), constsOf(t, "../events", "FailureKind")
	if !slices.Equal(modelFailures, eventFailures) {
		t.Errorf("failure kinds: model %v, events %v", modelFailures, eventFailures)
	}
	for _, k := range modelFailures {
		got := failureKind(model.ErrorKind(k))
		if string(got) != k {
			t.Errorf("failureKind(%s) = %s", k, got)
		}
		if got.Retryable() != model.ErrorKind(k).Retryable() {
			t.Errorf("%s: retryable %v in the log, %v at the port", k, got.Retryable(), model.ErrorKind(k).Retryable())
		}
	}
	modelRoles, eventRoles := constsOf(t, "../model", "Role"), constsOf(t, "../events", "Role")
	if !slices.Equal(modelRoles, eventRoles) {
		t.Errorf("roles: model %v, events %v", modelRoles, eventRoles)
	}
	for _, r := range modelRoles {
		if got := eventRole(model.Role(r)); string(got) != r {
			t.Errorf("eventRole(%s) = %s", r, got)
		}
		if got := modelRole(events.Role(r)); string(got) != r {
			t.Errorf("modelRole(%s) = %s", r, got)
		}
	}
	calls := []model.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"invoice":42}`)}, {ID: "c2", Name: "read", Arguments: json.RawMessage(`{}`)}}
	if back := modelCalls(eventCalls(calls)); !reflect.DeepEqual(back, calls) {
		t.Errorf("calls do not convert back: %#v", back)
	}
	if modelCalls(eventCalls(nil)) != nil {
		t.Error("nil calls became non-nil")
	}
	if u := eventUsage(&model.Usage{InputTokens: 3, OutputTokens: 4}); u == nil || *u != (events.Usage{InputTokens: 3, OutputTokens: 4}) || u.Total() != 7 {
		t.Errorf("usage: %+v", u)
	}
	if eventUsage(nil) != nil {
		t.Error("unreported usage became reported")
	}
	msgs := []model.Message{{Role: model.RoleUser, Text: "pay"},
		{Role: model.RoleAssistant, Text: "paying", Calls: calls, ProviderData: json.RawMessage(`{"id":"resp-1"}`)},
		{Role: model.RoleTool, Results: []model.ToolResult{{CallID: "c1", Name: "pay", Content: json.RawMessage(`{"id":"p-1"}`)}}}}
	for _, m := range msgs {
		if back := modelMessages([]events.Message{eventMessage(m)}); !reflect.DeepEqual(back[0], m) {
			t.Errorf("message does not convert back: %#v", back[0])
		}
	}
	r := model.Reply{Kind: model.ReplyToolRequest, Turn: msgs[1], Reason: "why", Usage: &model.Usage{InputTokens: 1, OutputTokens: 2}}
	c := ReplyCommand(4, r)
	if c.Turn != 4 || c.Reply.Kind != events.ReplyToolRequest || c.Reply.Reason != "why" || c.Reply.Usage.Total() != 3 ||
		!reflect.DeepEqual(modelMessages([]events.Message{c.Reply.Turn})[0], msgs[1]) {
		t.Errorf("reply command %#v", c)
	}
	// Two JSON encodings, one shape: a message of the log and of the port
	// encode alike, so the snapshot's transcript kept its bytes when the
	// core moved to the log's types (docs/adr/0037).
	for _, m := range msgs {
		a, _ := json.Marshal(m)
		b, _ := json.Marshal(eventMessage(m))
		if string(a) != string(b) {
			t.Errorf("the port encodes %s, the log %s", a, b)
		}
	}
}

// TestScenario3_ModelRequestFromTheFoldedRun: the request the runner sends
// for the next turn is rebuilt from the run's state (docs/semantics.md §12
// scenario 3): it names the run, the state's turn and the start's
// correlation, holds the whole transcript in the port's types, and lists a
// turn's results in call order although the reports arrived in reverse.
func TestScenario3_ModelRequestFromTheFoldedRun(t *testing.T) {
	var s aggregate.State
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(c aggregate.Command) {
		t.Helper()
		evs, err := aggregate.Decide(s, c, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			s = aggregate.Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: now, Event: e})
		}
	}
	limits := events.Limits{MaxTurns: 8, MaxConcurrency: 4, ModelTimeout: 600000, ModelRetryDelay: 200, ToolTimeout: 60000,
		MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000, ApprovalExpiry: events.Infinite, AnswerAttempts: 2}
	run(aggregate.Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "pay both", Correlation: "c", Limits: limits, Runner: "r"})
	calls := []model.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"n":1}`)}, {ID: "c2", Name: "pay", Arguments: json.RawMessage(`{"n":2}`)}}
	run(ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Text: "paying", Calls: calls}}))
	allow := aggregate.PolicyResult{Decision: events.PolicyAllow}
	run(aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "c1", Validation: events.CallValid, Policy: allow}, {CallID: "c2", Validation: events.CallValid, Policy: allow}}})
	run(aggregate.Report{Action: aggregate.ActionID(1, "c2"), Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"paid":2}`)})
	run(aggregate.Report{Action: aggregate.ActionID(1, "c1"), Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"paid":1}`)})

	req := modelRequest(s)
	if req.Run != "r1" || int64(req.Turn) != s.Turn() || req.Turn != 2 || req.Correlation != "c" {
		t.Fatalf("request run %q turn %d (state's %d) correlation %q", req.Run, req.Turn, s.Turn(), req.Correlation)
	}
	if len(req.Transcript) != len(aggregate.Transcript(s)) {
		t.Fatalf("request has %d messages, the state's transcript %d", len(req.Transcript), len(aggregate.Transcript(s)))
	}
	want := []model.Message{{Role: model.RoleUser, Text: "pay both"},
		{Role: model.RoleAssistant, Text: "paying", Calls: calls},
		{Role: model.RoleTool, Results: []model.ToolResult{{CallID: "c1", Name: "pay", Content: json.RawMessage(`{"paid":1}`)}, {CallID: "c2", Name: "pay", Content: json.RawMessage(`{"paid":2}`)}}}}
	if !reflect.DeepEqual(req.Transcript, want) {
		t.Fatalf("transcript %+v, want %+v", req.Transcript, want)
	}
}
