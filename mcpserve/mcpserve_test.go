package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

type noteIn struct {
	Text string `json:"text"`
}

type noteOut struct {
	ID string `json:"id"`
}

// fixture is a Weft stack serving three agents, and an MCP client session
// (the official Go SDK's client) on an mcpserve server over in-memory
// transports.
type fixture struct {
	st      *mcptest.Stack
	session *mcp.ClientSession
	release chan struct{}
	starts  atomic.Int32 // starts of the slow tool's body
	model   *model.Scripted
}

// The agents: "notes" answers at once, or (input "slow ...") calls a tool
// that blocks until released, or (input "pay ...") calls a tool that needs
// approval, or (input "lost ...") calls one whose effect is uncertain, or
// (input "refuse") refuses.
func newFixture(t *testing.T, cfg mcpserve.Config) *fixture {
	t.Helper()
	return newFixtureOn(t, cfg, mcptest.StartStack)
}

// newFixtureOn is newFixture on the stack start starts.
func newFixtureOn(t *testing.T, cfg mcpserve.Config, start func(testing.TB, ...*agent.Agent) *mcptest.Stack) *fixture {
	t.Helper()
	f := &fixture{release: make(chan struct{})}
	note := tools.Define[noteIn, noteOut]("write_note", "Writes a note.")
	slow := tools.Bind(tools.Define[noteIn, noteOut]("slow_note", "Writes a note slowly."), func(ctx context.Context, c tools.Call, in noteIn) (noteOut, error) {
		f.starts.Add(1)
		select {
		case <-f.release:
			return noteOut{ID: "slow-1"}, nil
		case <-ctx.Done():
			return noteOut{}, ctx.Err()
		}
	}, func(error) tools.Failure { return tools.Uncertain("stopped") })
	pay := tools.Bind(tools.Define[noteIn, noteOut]("pay", "Pays."), func(context.Context, tools.Call, noteIn) (noteOut, error) {
		return noteOut{ID: "PAY-1"}, nil
	}, func(error) tools.Failure { return tools.Explain("no") })
	lost := tools.Bind(tools.Define[noteIn, noteOut]("wire", "Wires money."), func(context.Context, tools.Call, noteIn) (noteOut, error) {
		return noteOut{}, errors.New("bank timed out after the request was sent")
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	write := tools.Bind(note, func(context.Context, tools.Call, noteIn) (noteOut, error) { return noteOut{ID: "n-1"}, nil },
		func(error) tools.Failure { return tools.Explain("no") })
	f.model = model.NewRules("notes",
		model.Rule{Name: "report", Match: func(r model.Request) bool { return len(model.Results(r)) > 0 }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			return model.Answer("done: "+string(model.Results(r)[0].Content))(ctx, r)
		}},
		model.Rule{Name: "slow", Match: model.InputContains("slow"), Step: model.CallTools(model.Call("slow_note", `{"text":"x"}`))},
		model.Rule{Name: "pay", Match: model.InputContains("pay"), Step: model.CallTools(model.Call("pay", `{"text":"INV-7"}`))},
		model.Rule{Name: "lost", Match: model.InputContains("lost"), Step: model.CallTools(model.Call("wire", `{"text":"EUR 5"}`))},
		model.Rule{Name: "refuse", Match: model.InputContains("refuse"), Step: model.Refuse("not today")},
		model.Rule{Name: "answer", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			return model.Answer("echo: "+model.Input(r))(ctx, r)
		}},
	)
	pol := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		if a.Tool == "pay" {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		return policy.Allow(), nil
	})
	ag, err := agent.New("notes", f.model, []tools.Tool{write, slow, pay, lost}, pol, agent.WithApprovers(approvers.Trusting("desk"))).Build()
	if err != nil {
		t.Fatal(err)
	}
	other, err := agent.New("other", model.NewScripted("other", model.Answer("other")), nil, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	f.st = start(t, ag, other)
	t.Cleanup(func() {
		select {
		case <-f.release:
		default:
			close(f.release)
		}
	})
	if cfg.Agents == nil {
		cfg.Agents = []mcpserve.Agent{{Name: "notes"}, {Name: "other", Tool: "other_agent"}}
	}
	srv, err := mcpserve.New(f.st.Server.Conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.session = connect(t, srv.MCP())
	return f
}

func connect(t *testing.T, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close(); _ = ss.Close() })
	return cs
}

// call calls tool with arguments (and _meta) and decodes the answer.
func (f *fixture) call(t *testing.T, tool string, args any, meta mcp.Meta) (mcpserve.Answer, *mcp.CallToolResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	res, err := f.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatalf("CallTool %s: %v", tool, err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var ans mcpserve.Answer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	if ans.Run != "" && res.Meta[mcpserve.MetaRun] != ans.Run {
		t.Fatalf("_meta %s = %v, want the run %s", mcpserve.MetaRun, res.Meta[mcpserve.MetaRun], ans.Run)
	}
	if res.Meta[mcpserve.MetaStatus] != ans.Status {
		t.Fatalf("_meta %s = %v, want %s", mcpserve.MetaStatus, res.Meta[mcpserve.MetaStatus], ans.Status)
	}
	return ans, res
}

// settle makes the call, and makes it again while the answer is still
// working (as a client does after a working answer), so that a loaded
// machine cannot turn a wait into a test failure.
func (f *fixture) settle(t *testing.T, tool string, args any, meta mcp.Meta) (mcpserve.Answer, *mcp.CallToolResult) {
	t.Helper()
	for i := 0; ; i++ {
		ans, res := f.call(t, tool, args, meta)
		if ans.Status != mcpserve.StatusWorking || i == 60 {
			return ans, res
		}
	}
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func mustContain(t *testing.T, what, s string, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(s, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// TestRunIDIsFramedAndStable: the run id of a keyed call is a function of
// (service, principal, key) with framed parts, and its derivation is a
// durable format: the golden value never changes.
func TestRunIDIsFramedAndStable(t *testing.T) {
	if mcpserve.RunID("a-b", "c", "k") == mcpserve.RunID("a", "b-c", "k") || mcpserve.RunID("s", "p", "k1") == mcpserve.RunID("s", "p1", "k") {
		t.Fatal("parts are not framed")
	}
	got := mcpserve.RunID("weft", "local", "order-7")
	if got != goldenRunID {
		t.Fatalf("RunID(weft, local, order-7) = %s, want %s: the derivation of stored run ids changed", got, goldenRunID)
	}
}

// TestKeyedInvocation: a keyed call completes and says so; the same key
// reopens the same run (nothing runs again, even from a new session); the
// same key with another input, or for another agent, answers key_reused;
// calls without a key are fresh runs.
func TestKeyedInvocation(t *testing.T) {
	f := newFixture(t, mcpserve.Config{Service: "desk", DefaultPrincipal: "alice"})
	ans, res := f.settle(t, "notes", map[string]any{"input": "hello", "key": "k-1"}, nil)
	if ans.Status != mcpserve.StatusCompleted || res.IsError || ans.Run != mcpserve.RunID("desk", "alice", "k-1") {
		t.Fatalf("first call: %+v (isError %v)", ans, res.IsError)
	}
	if string(ans.Answer) != `"echo: hello"` {
		t.Fatalf("answer %s", ans.Answer)
	}
	mustContain(t, "text", text(res), "Completed (run "+ans.Run+")", "echo: hello")
	turns := len(f.model.Requests())

	again, _ := f.settle(t, "notes", map[string]any{"input": "hello", "key": "k-1"}, nil)
	if again.Status != mcpserve.StatusCompleted || again.Run != ans.Run {
		t.Fatalf("retry: %+v", again)
	}
	// The key may come in _meta, as mcptools sends it.
	viaMeta, _ := f.call(t, "notes", map[string]any{"input": "hello"}, mcp.Meta{mcptools.MetaIdempotencyKey: "k-1"})
	if viaMeta.Run != ans.Run {
		t.Fatalf("_meta key: run %s, want %s", viaMeta.Run, ans.Run)
	}
	if n := len(f.model.Requests()); n != turns {
		t.Fatalf("the retries made %d more model turns, want none", n-turns)
	}

	reused, res := f.call(t, "notes", map[string]any{"input": "something else", "key": "k-1"}, nil)
	if reused.Status != mcpserve.StatusRefused || !res.IsError || reused.Error == nil || reused.Error.Code != weft.CodeKeyReused || reused.Run != "" {
		t.Fatalf("same key, other input: %+v", reused)
	}
	mustContain(t, "key_reused text", text(res), "key_reused", "Nothing was started")
	if other, _ := f.call(t, "other_agent", map[string]any{"input": "hello", "key": "k-1"}, nil); other.Error == nil || other.Error.Code != weft.CodeKeyReused {
		t.Fatalf("same key, other agent: %+v", other)
	}
	if bad, _ := f.call(t, "notes", map[string]any{"input": "hello", "key": "k-1"}, mcp.Meta{mcptools.MetaIdempotencyKey: "k-2"}); bad.Error == nil || bad.Error.Code != weft.CodeInvalidRequest {
		t.Fatalf("argument and _meta keys differ: %+v", bad)
	}

	one, _ := f.call(t, "notes", map[string]any{"input": "hello"}, nil)
	two, _ := f.call(t, "notes", map[string]any{"input": "hello"}, nil)
	if one.Run == two.Run || one.Run == ans.Run || !strings.HasPrefix(one.Run, "mcp-") {
		t.Fatalf("unkeyed calls: %s and %s, want two fresh runs", one.Run, two.Run)
	}
	for _, r := range []string{one.Run, two.Run} {
		// Asked again by run id (an unkeyed call repeated would be a new run).
		if got, _ := f.settle(t, mcpserve.DefaultStatusTool, map[string]any{"run": r}, nil); got.Status != mcpserve.StatusCompleted || string(got.Answer) != `"echo: hello"` {
			t.Fatalf("unkeyed run %s: %+v", r, got)
		}
	}
}

// TestAnswersSayWhatHappened: waiting for approval (with what to approve),
// uncertain (with the evidence), still working (with the run id to ask
// again), ended (isError) — and the answer after a person acted.
func TestAnswersSayWhatHappened(t *testing.T) {
	f := newFixture(t, mcpserve.Config{Wait: 2 * time.Second})
	ctx := context.Background()

	pay, res := f.settle(t, "notes", map[string]any{"input": "pay INV-7", "key": "pay-7"}, nil)
	if pay.Status != mcpserve.StatusWaitingForApproval || res.IsError || len(pay.Approvals) != 1 {
		t.Fatalf("pay: %+v", pay)
	}
	a := pay.Approvals[0]
	if a.Run != pay.Run || a.Tool != "pay" || string(a.Arguments) != `{"text":"INV-7"}` || a.Requirement.Name != "finance" || a.Revision != 1 {
		t.Fatalf("approval %+v", a)
	}
	mustContain(t, "approval text", text(res), "Waiting for approval", "requirement finance v1", "weft approve "+pay.Run+" "+a.Action+" --revision 1")
	if _, err := f.st.API.Approve(ctx, api.ApproveRequest{CommandID: "ap-1", Run: a.Run, Action: a.Action, Revision: a.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	done, _ := f.settle(t, "notes", map[string]any{"input": "pay INV-7", "key": "pay-7"}, nil)
	if done.Status != mcpserve.StatusCompleted || !strings.Contains(string(done.Answer), "PAY-1") {
		t.Fatalf("after approval: %+v", done)
	}

	lost, res := f.settle(t, "notes", map[string]any{"input": "lost wire", "key": "lost-1"}, nil)
	if lost.Status != mcpserve.StatusUncertain || res.IsError || len(lost.Uncertain) != 1 || lost.Uncertain[0].Evidence != "bank timed out after the request was sent" {
		t.Fatalf("uncertain: %+v", lost)
	}
	mustContain(t, "uncertain text", text(res), "may or may not have happened", "bank timed out after the request was sent", "weft reconcile "+lost.Run)

	slow, res := f.call(t, "notes", map[string]any{"input": "slow note"}, nil)
	if slow.Status != mcpserve.StatusWorking || res.IsError || slow.Run == "" {
		t.Fatalf("slow: %+v", slow)
	}
	mustContain(t, "working text", text(res), "Still working (run "+slow.Run+")", `weft_run_status with {"run": "`+slow.Run+`"}`)
	close(f.release)
	status, _ := f.settle(t, mcpserve.DefaultStatusTool, map[string]any{"run": slow.Run}, nil)
	if status.Status != mcpserve.StatusCompleted || !strings.Contains(string(status.Answer), "slow-1") {
		t.Fatalf("status tool: %+v", status)
	}
	if f.starts.Load() != 1 {
		t.Fatalf("the slow body started %d times, want 1", f.starts.Load())
	}

	refused, res := f.settle(t, "notes", map[string]any{"input": "refuse this", "key": "refuse-1"}, nil)
	if refused.Status != mcpserve.StatusEnded || !res.IsError || refused.Outcome == nil || refused.Outcome.Kind != events.OutcomeRefused {
		t.Fatalf("refused: %+v", refused)
	}
	mustContain(t, "ended text", text(res), "ended refused")

	if unknown, _ := f.call(t, mcpserve.DefaultStatusTool, map[string]any{"run": "no-such-run"}, nil); unknown.Error == nil || unknown.Error.Code != weft.CodeUnknownRun {
		t.Fatalf("status of an unknown run: %+v", unknown)
	}
	if bad, res := f.call(t, "notes", map[string]any{"text": "no input"}, nil); bad.Error == nil || bad.Error.Code != weft.CodeInvalidRequest || !res.IsError {
		t.Fatalf("bad arguments: %+v", bad)
	}
}

// TestWeftCallsWeftOverMCP: a Weft agent's MCP tool (package mcptools) on
// a Weft agent served with this package: the action's idempotency key
// travels in _meta and becomes the served run's key, so a replayed call
// reopens the same run.
func TestWeftCallsWeftOverMCP(t *testing.T) {
	f := newFixture(t, mcpserve.Config{})
	srv, err := mcpserve.New(f.st.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}})
	if err != nil {
		t.Fatal(err)
	}
	client := mcptools.New(mcptools.Transport("weft mcp in memory", func() (mcp.Transport, error) {
		st, ct := mcp.NewInMemoryTransports()
		if _, err := srv.MCP().Connect(context.Background(), st, nil); err != nil {
			return nil, err
		}
		return ct, nil
	}))
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	list, err := client.Tools(ctx, mcptools.Only("notes"))
	if err != nil {
		t.Fatal(err)
	}
	call := tools.Call{Run: "caller-1", Action: "1/call_1_1", Attempt: 1}
	first := list[0].Invoke(ctx, call, json.RawMessage(`{"input":"from another agent"}`), tools.Settlement{})
	call.Attempt = 2
	second := list[0].Invoke(ctx, call, json.RawMessage(`{"input":"from another agent"}`), tools.Settlement{})
	want := mcpserve.RunID("weft", "local", call.IdempotencyKey())
	for _, r := range []tools.Result{first, second} {
		if r.Outcome != events.OutcomeOutput || !strings.Contains(string(r.Content), `"run":"`+want+`"`) || !strings.Contains(string(r.Content), `"status":"completed"`) {
			t.Fatalf("result %+v, want completed in run %s", r, want)
		}
	}
}

// goldenRunID was computed outside Go, from the documented derivation:
// sha256 of the compact JSON ["weft.mcp.run.v1","weft","local","order-7"].
const goldenRunID = "mcp-8494668bfb5c4e21b17e99b85186a057cf27560fd54961d79dca1e7c444daa22"

// TestUnknownStateIsNeverGuessed: without a query service the server
// cannot see the run it started; it answers "not known" (the JSON-RPC error
// CodeOutcomeUnknown, never an isError result) naming the run, with
// unavailable as the reason (ask again to find out), never a guessed
// status. An agent no runner serves is unknown_agent, with no run named.
func TestUnknownStateIsNeverGuessed(t *testing.T) {
	ag, err := agent.New("notes", model.NewScripted("n", model.Answer("hi")), nil, policy.AlwaysAllow()).Build()
	if err != nil {
		t.Fatal(err)
	}
	st := mcptest.StartWithoutProjector(t, ag)
	// The start gets half the wait: enough to be answered on a loaded
	// machine, so that the answer is the query's, the one under test (with
	// 300 ms, a start slowed past 150 ms answered internal in CI instead).
	srv, err := mcpserve.New(st.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans, werr := unknown(t, connect(t, srv.MCP()), "notes", map[string]any{"input": "hello", "key": "k"})
	if ans.Error.Code != weft.CodeUnavailable || ans.Run != mcpserve.RunID("weft", "local", "k") {
		t.Fatalf("no query service: %+v", ans)
	}
	mustContain(t, "text", werr.Message, "could not be read in time", "To find out, repeat this call with the same key")

	bare := mcptest.StartWithoutProjector(t, ag)
	other, err := mcpserve.New(bare.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "missing"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := &fixture{st: bare, session: connect(t, other.MCP())}
	if ans, _ := g.call(t, "missing", map[string]any{"input": "x"}, nil); ans.Error == nil || ans.Error.Code != weft.CodeUnknownAgent || ans.Run != "" {
		t.Fatalf("an agent no runner serves: %+v, want unknown_agent and no run", ans)
	}
}

// TestAnEmptyKeyIsRefused: a key is 1-256 bytes (docs/mcp.md). An empty key
// is refused invalid_request, starting nothing. Before, it counted as no
// key: every retry with it was a fresh run, acting again.
func TestAnEmptyKeyIsRefused(t *testing.T) {
	f := newFixture(t, mcpserve.Config{})
	turns := len(f.model.Requests())
	ans, res := f.call(t, "notes", map[string]any{"input": "hello", "key": ""}, nil)
	if ans.Status != mcpserve.StatusRefused || !res.IsError || ans.Error == nil || ans.Error.Code != weft.CodeInvalidRequest || ans.Run != "" {
		t.Fatalf("an empty key: %+v", ans)
	}
	if n := len(f.model.Requests()); n != turns {
		t.Fatalf("an empty key started a run (%d model turns)", n-turns)
	}
}
