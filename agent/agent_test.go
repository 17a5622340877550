package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

type echoIn struct {
	Text string `json:"text"`
}

type echoOut struct {
	Text string `json:"text"`
}

func classify(err error) tools.Failure { return tools.Explain(err.Error()) }

func echoTool(name string, started *int) tools.Tool {
	def := tools.Define[echoIn, echoOut](name, "Echo the text.")
	return tools.Bind(def, func(_ context.Context, _ tools.Call, in echoIn) (echoOut, error) {
		*started++
		return echoOut(in), nil
	}, classify)
}

func settlingTool(name string, within time.Duration) tools.Tool {
	def := tools.Define[echoIn, echoOut](name, "Echo the text, settling.")
	return tools.BindSettling(def, func(_ context.Context, _ tools.Call, in echoIn, _ *tools.Settler[echoOut]) (echoOut, error) {
		return echoOut(in), nil
	}, classify, within)
}

// problems returns the BuildError's problems as their messages.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var be *agent.BuildError
	if !errors.As(err, &be) {
		t.Fatalf("Build error = %v, want *agent.BuildError", err)
	}
	out := make([]string, len(be.Problems))
	for i, p := range be.Problems {
		out[i] = p.Error()
	}
	return out
}

func TestScenario01_AllLimitProblemsAtOnceInOrder(t *testing.T) {
	m := model.NewScripted("s", model.Answer("never"))
	started := 0
	def := agent.New("desk", m, []tools.Tool{echoTool("echo", &started)}, policy.AlwaysAllow(),
		// Given in another order than Build reports them: the order is Build's.
		agent.WithApprovalExpiry(tools.After(0)),
		agent.WithCommandTimeout(0),
		agent.WithModelRetryDelay(-time.Millisecond),
		agent.WithPolicyTimeout(0),
		agent.WithMaxDepth(17),
		agent.WithMaxChildren(1000),
		agent.WithTokenBudget(0),
		agent.WithMaxConcurrency(0),
		agent.WithMaxTurns(0),
	)
	a, err := def.Build()
	if a != nil {
		t.Fatal("Build returned an agent despite problems")
	}
	want := []string{
		"WithMaxTurns(0): out of range 1..9007199254740991",
		"WithMaxConcurrency(0): out of range 1..2147483647",
		"WithTokenBudget(0): out of range 1..9007199254740991",
		"WithMaxChildren(1000): out of range 0..999",
		"WithMaxDepth(17): out of range 0..16",
		"WithPolicyTimeout(0s): out of range 1ms..4294967295ms",
		"WithModelRetryDelay(-1ms): out of range 0ms..67108863ms",
		"WithCommandTimeout(0s): out of range 1ms..4294967295ms",
		"WithApprovalExpiry(0s): out of range 1ms..9007199254740991ms or infinity",
	}
	if got := problems(t, err); !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Each problem is typed and names option, value and range.
	var be *agent.BuildError
	errors.As(err, &be)
	for _, p := range be.Problems {
		var il *agent.InvalidLimit
		if !errors.As(p, &il) || il.Option == "" || il.Value == "" || il.Range == "" {
			t.Errorf("problem %v is not a complete *InvalidLimit", p)
		}
	}
	var first *agent.InvalidLimit
	if !errors.As(err, &first) || first.Option != "WithMaxTurns" || first.Value != "0" {
		t.Errorf("errors.As through BuildError found %+v", first)
	}
	// Nothing started: the model was never called, no tool ran.
	if len(m.Requests()) != 0 || started != 0 {
		t.Errorf("Build started something: %d model requests, %d tool starts", len(m.Requests()), started)
	}
	// Building the same definition again gives the same problems in the same order.
	_, again := def.Build()
	if !reflect.DeepEqual(problems(t, again), want) {
		t.Error("problem order is not stable")
	}
}

func TestScenario02_ToolLimits(t *testing.T) {
	m := model.NewScripted("s")
	started := 0
	build := func(ts ...tools.Tool) error {
		_, err := agent.New("desk", m, ts, policy.AlwaysAllow()).Build()
		return err
	}
	for _, n := range []int{0, 101} {
		err := build(tools.WithReplay(echoTool("lookup", &started), n))
		var tl *agent.InvalidToolLimit
		if !errors.As(err, &tl) {
			t.Fatalf("replay %d: error %v, want *InvalidToolLimit", n, err)
		}
		if tl.Tool != "lookup" || tl.Option != "tools.WithReplay" || tl.Range != "1..100" || tl.Value != itoa(n) {
			t.Errorf("replay %d: %+v", n, tl)
		}
		if !strings.Contains(err.Error(), `tool "lookup": tools.WithReplay(`+itoa(n)+`): out of range 1..100`) {
			t.Errorf("replay %d: message %q", n, err)
		}
	}
	for _, n := range []int{1, 100} {
		if err := build(tools.WithReplay(echoTool("lookup", &started), n)); err != nil {
			t.Errorf("replay %d: %v", n, err)
		}
	}
	bad := []struct {
		tool   tools.Tool
		option string
		value  string
	}{
		{settlingTool("settle0", 0), "tools.BindSettling", "0s"},
		{settlingTool("settle_sub_ms", 999*time.Microsecond), "tools.BindSettling", "999µs"},
		{settlingTool("settle_long", agent.MaxTimer+time.Millisecond), "tools.BindSettling", (agent.MaxTimer + time.Millisecond).String()},
		{tools.WithTimeout(echoTool("t0", &started), tools.After(0)), "tools.WithTimeout", "0s"},
		{tools.WithTimeout(echoTool("t_neg", &started), tools.After(-time.Second)), "tools.WithTimeout", "-1s"},
		{tools.WithTimeout(echoTool("t_long", &started), tools.After(agent.MaxTimer+time.Millisecond)), "tools.WithTimeout", (agent.MaxTimer + time.Millisecond).String()},
	}
	for _, b := range bad {
		err := build(b.tool)
		var tl *agent.InvalidToolLimit
		if !errors.As(err, &tl) || tl.Tool != b.tool.Name() || tl.Option != b.option || tl.Value != b.value || tl.Range != "1ms..4294967295ms" && tl.Range != "1ms..4294967295ms or infinity" {
			t.Errorf("%s: error %v (%+v)", b.tool.Name(), err, tl)
		}
	}
	good := []tools.Tool{
		settlingTool("settle_min", time.Millisecond),
		settlingTool("settle_max", agent.MaxTimer),
		tools.WithTimeout(echoTool("t_min", &started), tools.After(time.Millisecond)),
		tools.WithTimeout(echoTool("t_max", &started), tools.After(agent.MaxTimer)),
		tools.WithTimeout(echoTool("t_inf", &started), tools.Infinity()),
	}
	for _, g := range good {
		if err := build(g); err != nil {
			t.Errorf("%s: %v", g.Name(), err)
		}
	}
	if started != 0 || len(m.Requests()) != 0 {
		t.Error("Build started something")
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestBuildStructuralProblems(t *testing.T) {
	started := 0
	type cyclic struct {
		C chan int `json:"c"`
	}
	noSchema := tools.Bind(tools.Define[cyclic, echoOut]("no_schema", "x"),
		func(context.Context, tools.Call, cyclic) (echoOut, error) { return echoOut{}, nil }, classify)
	_, err := agent.New("bad name", nil, []tools.Tool{
		echoTool("echo", &started),
		nil,
		echoTool("bad.name", &started),
		echoTool("echo", &started),
		noSchema,
	}, nil,
		agent.WithVersion(""),
		agent.WithApprovers(approvers.Trusting("finance"), nil, approvers.Trusting("finance")),
		agent.WithTypedAnswer[func()](),
	).Build()
	got := problems(t, err)
	want := []string{
		`agent name "bad name": must be 1-64 ASCII letters, digits, '_' or '-'`,
		`agent version "": must be 1-64 ASCII letters, digits, '.', '_' or '-'`,
		"model is missing: every agent needs one",
		"policy is missing: every agent needs one",
		"WithTypedAnswer: no JSON Schema: ",
		`WithApprovers: approver #1 "": nil`,
		`WithApprovers: approver #2 "finance": duplicate`,
		"tool #1 is nil",
		`tool #2 name "bad.name": must be 1-64 ASCII letters, digits, '_' or '-'`,
		`tool "echo": tools #0 and #3 share the name`,
		`tool "no_schema": no JSON Schema: `,
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s", strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
	for _, target := range []any{new(*agent.InvalidIdentity), new(*agent.MissingPart), new(*agent.AnswerSchemaUnavailable),
		new(*agent.InvalidApprover), new(*agent.NilTool), new(*agent.InvalidToolName), new(*agent.DuplicateToolName), new(*agent.ToolSchemaUnavailable)} {
		if !errors.As(err, target) {
			t.Errorf("errors.As(%T) failed", target)
		}
	}
}

func TestDefaultsAndLimits(t *testing.T) {
	m := model.NewScripted("s")
	started := 0
	echo := echoTool("echo", &started)
	a, err := agent.New("desk", m, []tools.Tool{echo}, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	want := events.Limits{
		MaxTurns: 8, MaxConcurrency: 4, TokenBudget: 0,
		ModelTimeout: 600000, ModelRetryDelay: 200, ToolTimeout: 60000,
		MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000,
		ApprovalExpiry: 7 * 24 * 3600 * 1000, AnswerAttempts: 2, MaxChildren: 4, MaxDepth: 1,
	}
	if a.Limits() != want {
		t.Errorf("default limits %+v, want %+v", a.Limits(), want)
	}
	if a.Name() != "desk" || a.Version() != "1" || a.Ref() != (events.AgentRef{Name: "desk", Version: "1"}) || a.Model() != m || a.System() != "" || a.Typed() || a.AnswerSchema() != nil {
		t.Errorf("accessors: %s %s %v", a.Name(), a.Version(), a.Typed())
	}
	if got, ok := a.Tool("echo"); !ok || got != echo {
		t.Error("Tool(echo) not found")
	}
	if _, ok := a.Tool("nope"); ok {
		t.Error("Tool(nope) found")
	}
	if specs := a.Specs(); len(specs) != 1 || specs[0].Name != "echo" {
		t.Errorf("specs %+v", specs)
	}

	a, err = agent.New("desk", m, nil, policy.AlwaysAllow(),
		agent.WithVersion("2.1"), agent.WithSystem("You pay invoices."),
		agent.WithMaxTurns(agent.MaxSafeInteger), agent.WithMaxConcurrency(1), agent.WithTokenBudget(1),
		agent.WithModelTimeout(tools.Infinity()), agent.WithModelRetryDelay(0), agent.WithToolTimeout(tools.After(time.Millisecond)),
		agent.WithMaxResultBytes(1), agent.WithPolicyTimeout(agent.MaxTimer), agent.WithCommandTimeout(time.Millisecond),
		agent.WithApprovalExpiry(tools.Infinity()), agent.WithAnswerAttempts(100), agent.WithMaxChildren(0), agent.WithMaxDepth(16),
		agent.WithApprovers(approvers.Trusting("finance")),
	).Build()
	if err != nil {
		t.Fatal(err)
	}
	want = events.Limits{
		MaxTurns: agent.MaxSafeInteger, MaxConcurrency: 1, TokenBudget: 1,
		ModelTimeout: events.Infinite, ModelRetryDelay: 0, ToolTimeout: 1,
		MaxResultBytes: 1, PolicyTimeout: 4294967295, CommandTimeout: 1,
		ApprovalExpiry: events.Infinite, AnswerAttempts: 100, MaxChildren: 0, MaxDepth: 16,
	}
	if a.Limits() != want {
		t.Errorf("edge limits %+v, want %+v", a.Limits(), want)
	}
	if a.Version() != "2.1" || a.System() != "You pay invoices." || len(a.Approvers()) != 1 || a.Approvers()[0].Name() != "finance" {
		t.Error("options not applied")
	}
	// The limits travel in RunStarted: they survive a JSON round trip.
	b, _ := json.Marshal(events.RunStarted{Limits: a.Limits()})
	var back events.RunStarted
	if err := json.Unmarshal(b, &back); err != nil || back.Limits != want {
		t.Errorf("round trip: %+v, %v", back.Limits, err)
	}
}

type verdict struct {
	Paid   bool   `json:"paid"`
	Amount int64  `json:"amount"`
	Note   string `json:"note,omitempty"`
}

func TestTypedAnswer(t *testing.T) {
	a, err := agent.New("desk", model.NewScripted("s"), nil, policy.AlwaysAllow(), agent.WithTypedAnswer[verdict]()).Build()
	if err != nil {
		t.Fatal(err)
	}
	if !a.Typed() || !strings.Contains(string(a.AnswerSchema()), `"required":["paid","amount"]`) {
		t.Errorf("schema %s", a.AnswerSchema())
	}
	tests := []struct {
		text    string
		want    string
		wantErr string
	}{
		{`{"paid": true, "amount": 5}`, `{"paid":true,"amount":5}`, ""},
		{"```json\n{\"paid\":false,\"amount\":0}\n```", `{"paid":false,"amount":0}`, ""},
		{`I paid it.`, "", "/: not valid JSON: invalid character 'I' looking for beginning of value"},
		{`{"paid": "yes", "amount": 5}`, "", `/paid: type: yes has type "string", want "boolean"`},
		{``, "", "/: the answer is empty, want a JSON value"},
	}
	for _, tt := range tests {
		got, err := a.DecodeAnswer(tt.text)
		if tt.wantErr != "" {
			var ve *tools.ValidationError
			if !errors.As(err, &ve) || err.Error() != tt.wantErr {
				t.Errorf("DecodeAnswer(%q) error %v, want %q", tt.text, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("DecodeAnswer(%q) = %s, %v; want %s", tt.text, got, err, tt.want)
		}
	}
	free, _ := agent.New("desk", model.NewScripted("s"), nil, policy.AlwaysAllow()).Build()
	if got, err := free.DecodeAnswer(`Paid "INV-7".`); err != nil || string(got) != `"Paid \"INV-7\"."` {
		t.Errorf("free-text answer %s, %v", got, err)
	}
}

func TestToolConfig(t *testing.T) {
	started := 0
	a, err := agent.New("desk", model.NewScripted("s"), []tools.Tool{
		echoTool("plain", &started),
		tools.WithReplay(tools.WithTimeout(echoTool("own", &started), tools.After(1500*time.Millisecond)), 3),
		tools.WithTimeout(echoTool("forever", &started), tools.Infinity()),
		settlingTool("settles", 20*time.Millisecond),
	}, policy.AlwaysAllow(), agent.WithToolTimeout(tools.After(2*time.Second))).Build()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]events.ToolConfig{
		"plain":   {Timeout: 2000, MaxAttempts: 1},
		"own":     {Timeout: 1500, MaxAttempts: 3},
		"forever": {Timeout: events.Infinite, MaxAttempts: 1},
		"settles": {Timeout: 2000, MaxAttempts: 1, SettleWithin: 20},
	}
	for _, name := range []string{"plain", "own", "forever", "settles"} {
		got, ok := a.ToolConfig(name)
		if !ok || got != want[name] {
			t.Errorf("ToolConfig(%s) = %+v, %v; want %+v", name, got, ok, want[name])
		}
	}
	if _, ok := a.ToolConfig("nope"); ok {
		t.Error("ToolConfig(nope) found")
	}
}

func TestValidateCall(t *testing.T) {
	started := 0
	a, err := agent.New("desk", model.NewScripted("s"), []tools.Tool{echoTool("echo", &started)}, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, args              string
		outcome, detail, normal string
	}{
		{"echo", `{ "text": "hi" }`, events.CallValid, "", `{"text":"hi"}`},
		{"echo", `{"text": 1}`, events.CallInvalidArguments, `/text: type: 1 has type "integer", want "string"`, ""},
		{"echo", ``, events.CallInvalidArguments, `/: required: missing properties: ["text"]`, ""},
		{"nope", `{}`, events.CallUnknownTool, "unknown_tool", ""},
	}
	for _, tt := range tests {
		outcome, detail, norm := a.ValidateCall(tt.name, json.RawMessage(tt.args))
		if outcome != tt.outcome || detail != tt.detail || string(norm.JSON) != tt.normal {
			t.Errorf("ValidateCall(%s, %s) = %s, %q, %s", tt.name, tt.args, outcome, detail, norm.JSON)
		}
	}
	if started != 0 {
		t.Error("validation ran a body")
	}
}

func TestRequest(t *testing.T) {
	started := 0
	a, err := agent.New("desk", model.NewScripted("s"), []tools.Tool{echoTool("echo", &started)}, policy.AlwaysAllow(),
		agent.WithSystem("Be brief."), agent.WithTypedAnswer[verdict]()).Build()
	if err != nil {
		t.Fatal(err)
	}
	base := model.Request{Run: "r", Turn: 2, Transcript: []model.Message{{Role: model.RoleUser, Text: "hi"}}}
	r := a.Request(base)
	if r.Run != "r" || r.Turn != 2 || len(r.Transcript) != 1 || r.System != "Be brief." || len(r.Tools) != 1 || r.Tools[0].Name != "echo" ||
		string(r.AnswerSchema) != string(a.AnswerSchema()) || r.AnswerSchema == nil {
		t.Errorf("Request = %+v", r)
	}
}

func TestToolInputMustBeAnObject(t *testing.T) {
	def := tools.Define[string, echoOut]("shout", "x")
	tool := tools.Bind(def, func(context.Context, tools.Call, string) (echoOut, error) { return echoOut{}, nil }, classify)
	_, err := agent.New("desk", model.NewScripted("s"), []tools.Tool{tool}, policy.AlwaysAllow()).Build()
	var su *agent.ToolSchemaUnavailable
	if !errors.As(err, &su) || su.Tool != "shout" || !strings.Contains(su.Error(), "not a struct or a map") {
		t.Errorf("error %v", err)
	}
	mdef := tools.Define[map[string]int, echoOut]("counts", "x")
	mtool := tools.Bind(mdef, func(context.Context, tools.Call, map[string]int) (echoOut, error) { return echoOut{}, nil }, classify)
	if _, err := agent.New("desk", model.NewScripted("s"), []tools.Tool{mtool}, policy.AlwaysAllow()).Build(); err != nil {
		t.Errorf("map input: %v", err)
	}
}
