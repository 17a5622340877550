package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/tools"
)

// everythingStdio is the reference server @modelcontextprotocol/server-everything
// (installed from npm, nobody at Weft wrote it), started over stdio.
func everythingStdio(t *testing.T) *mcptools.Client {
	t.Helper()
	node, entry := mcptest.Node(t), mcptest.Everything(t)
	c := mcptools.New(mcptools.Command(node, entry, "stdio"))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestEverythingThroughAWeftAgent: a Weft agent calls the tools of
// server-everything end to end, through a real runner, worker and
// projector. The policy sees the MCP names and the exact arguments; echo
// and get-sum succeed; get-resource-reference with an invalid id answers
// isError, which the model sees as a definite failure (Explain); the
// long-running operation outlives its 500 ms tool timeout, which makes its
// action uncertain (never a clean failure), until a person reconciles it.
func TestEverythingThroughAWeftAgent(t *testing.T) {
	client := everythingStdio(t)
	ctx := ctxT(t)
	list, err := client.Tools(ctx,
		mcptools.Only("echo", "get-sum", "get-resource-reference", "trigger-long-running-operation"),
		mcptools.Rename("trigger-long-running-operation", "long_operation"),
		mcptools.Timeout("trigger-long-running-operation", tools.After(500*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range list {
		if tl.MaxAttempts() != 1 {
			t.Fatalf("%s is replayable by default (%d attempts), want 1: readOnlyHint alone must not make it so", tl.Name(), tl.MaxAttempts())
		}
	}
	calls := []model.ToolCall{
		model.Call("echo", `{"message":"hello from weft"}`),
		model.Call("get-sum", `{"a":2,"b":3}`),
		model.Call("get-resource-reference", `{"resourceType":"Text","resourceId":-1}`),
		model.Call("long_operation", `{"duration":30,"steps":1}`),
	}
	m := model.NewScripted("mcp-everything", model.CallTools(calls...), func(ctx context.Context, req model.Request) (model.Reply, error) {
		var parts []string
		for _, r := range model.Results(req) {
			parts = append(parts, r.Name+"="+string(r.Content))
		}
		return model.Answer(strings.Join(parts, "\n"))(ctx, req)
	})
	var mu sync.Mutex
	seen := map[string]string{}
	pol := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		mu.Lock()
		seen[a.Tool] = string(a.Arguments)
		mu.Unlock()
		return policy.Allow(), nil
	})
	ag, err := agent.New("everything-desk", m, list, pol).Build()
	if err != nil {
		t.Fatal(err)
	}
	st := mcptest.StartStack(t, ag)
	if _, err := st.API.Start(ctx, api.StartRequest{Run: "mcp-1", Agent: "everything-desk", Input: "exercise the tools"}); err != nil {
		t.Fatal(err)
	}
	v := st.Wait(t, "mcp-1", func(v projections.RunView) bool { return v.Status == projections.StatusSuspended })
	states := map[string]projections.ActionView{}
	for _, a := range v.Actions {
		states[a.Tool] = a
	}
	expect := func(tool, state string, words ...string) {
		t.Helper()
		a := states[tool]
		if a.State != state {
			t.Fatalf("%s: state %s (%s%s), want %s", tool, a.State, a.Result, a.Evidence, state)
		}
		for _, w := range words {
			if !strings.Contains(a.Result+a.Evidence, w) {
				t.Fatalf("%s: %q lacks %q", tool, a.Result+a.Evidence, w)
			}
		}
	}
	expect("echo", projections.StateSucceeded, "Echo: hello from weft")
	expect("get-sum", projections.StateSucceeded, "The sum of 2 and 3 is 5.")
	expect("get-resource-reference", projections.StateToolFailed, "Invalid resourceId: -1")
	expect("long_operation", projections.StateUncertain, "timed out after 500 ms")
	if len(v.Uncertain) != 1 || len(v.Approvals) != 0 {
		t.Fatalf("uncertain %v approvals %v, want one uncertain", v.Uncertain, v.Approvals)
	}
	mu.Lock()
	for _, c := range calls {
		if seen[c.Name] != string(c.Arguments) {
			t.Errorf("the policy saw %s(%s), want the exact arguments %s", c.Name, seen[c.Name], c.Arguments)
		}
	}
	mu.Unlock()

	if _, err := st.API.Reconcile(ctx, api.ReconcileRequest{CommandID: "rec-1", Run: "mcp-1", Action: states["long_operation"].ID,
		Content: tools.Unconfirmed("the operation's outcome is unknown"), By: "operator"}); err != nil {
		t.Fatal(err)
	}
	v = st.Wait(t, "mcp-1", func(v projections.RunView) bool { return v.Status == projections.StatusFinished })
	if v.Outcome == nil || v.Outcome.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v, want completed", v.Outcome)
	}
	var answer string
	_ = json.Unmarshal(v.Outcome.Answer, &answer)
	for _, w := range []string{`get-resource-reference={"error":"`, `long_operation={"unconfirmed":`, `"text":"The sum of 2 and 3 is 5."`} {
		if !strings.Contains(answer, w) {
			t.Fatalf("the model's second turn lacks %s:\n%s", w, answer)
		}
	}
}

// TestEverythingOverStreamableHTTP reaches server-everything over the
// streamable HTTP transport: a call succeeds, isError is Explain, and once
// the server is gone a call fails before anything is sent (Explain).
func TestEverythingOverStreamableHTTP(t *testing.T) {
	node, entry := mcptest.Node(t), mcptest.Everything(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(node, entry, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			if !once && strings.Contains(sc.Text(), "listening on port") {
				once = true
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-time.After(60 * time.Second):
		t.Fatal("server-everything did not start listening")
	}
	client := mcptools.New(mcptools.URL(fmt.Sprintf("http://127.0.0.1:%d/mcp", port)))
	t.Cleanup(func() { _ = client.Close() })
	ctx := ctxT(t)
	list, err := client.Tools(ctx, mcptools.Only("echo", "get-resource-reference"))
	if err != nil {
		t.Fatal(err)
	}
	call := tools.Call{Run: "http-1", Action: "1/c1", Attempt: 1}
	r := list[0].Invoke(ctx, call, json.RawMessage(`{"message":"over http"}`), tools.Settlement{})
	if r.Outcome != events.OutcomeOutput || !strings.Contains(string(r.Content), "Echo: over http") {
		t.Fatalf("echo over HTTP: %+v", r)
	}
	r = list[1].Invoke(ctx, call, json.RawMessage(`{"resourceId":-1}`), tools.Settlement{})
	if r.Outcome != events.OutcomeExplain || !strings.Contains(r.Message, "Invalid resourceId") {
		t.Fatalf("isError over HTTP: %+v", r)
	}
	_ = cmd.Process.Kill()
	<-exited
	// Let the client's event stream notice first, so that the session is
	// already broken when the call comes (the call must not be sent on it):
	// a POST on a pooled connection the server had closed may have been
	// written, which is Uncertain.
	mcptools.WaitSessionEnded(client)
	r = list[0].Invoke(ctx, call, json.RawMessage(`{"message":"nobody listens"}`), tools.Settlement{})
	if r.Outcome != events.OutcomeExplain || !strings.Contains(r.Message, "was not called") {
		t.Fatalf("a call to a server that is gone: %+v, want Explain (nothing was sent)", r)
	}
	t.Logf("a call to a server that is gone: %s", r.Message)
}
