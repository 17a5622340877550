package mcptools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/tools"
)

// sdkServer is an MCP server written with the official Go SDK, reached over
// in-memory pipes. It records what every tools/call carried.
type sdkServer struct {
	server *mcp.Server

	mu       sync.Mutex
	calls    []recorded
	sessions []*mcp.ServerSession
	pipes    map[*mcp.ServerSession]net.Conn
	refuse   bool // the next sessions cannot be opened
}

type recorded struct {
	name string
	args string
	key  any
}

func (s *sdkServer) record(req *mcp.CallToolRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, recorded{name: req.Params.Name, args: string(req.Params.Arguments), key: req.Params.Meta[mcptools.MetaIdempotencyKey]})
}

func (s *sdkServer) recorded() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.calls...)
}

const objectSchema = `{"type":"object","properties":{"message":{"type":"string"}},"required":["message"],"additionalProperties":false}`

func newSDKServer(t *testing.T) (*sdkServer, *mcptools.Client) {
	t.Helper()
	s := &sdkServer{server: mcp.NewServer(&mcp.Implementation{Name: "sdk-test-server", Version: "1"}, nil)}
	yes := true
	add := func(name string, ann *mcp.ToolAnnotations, h func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error)) {
		s.server.AddTool(&mcp.Tool{Name: name, Description: "the " + name + " tool", InputSchema: json.RawMessage(objectSchema), Annotations: ann},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				s.record(req)
				return h(ctx, req)
			})
	}
	echo := func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var in struct{ Message string }
		_ = json.Unmarshal(req.Params.Arguments, &in)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Message}}, StructuredContent: map[string]any{"echoed": in.Message}}, nil
	}
	add("echo", &mcp.ToolAnnotations{ReadOnlyHint: true}, echo)
	add("upsert", &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes}, echo)
	add("pay", nil, echo)
	add("fail", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "card declined"}}}, nil
	})
	add("crash", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("database went away mid-write")
	})
	add("hang", nil, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	add("drop", nil, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The server goes away while handling the call, as a crashed
		// process does: its end of the connection just closes.
		s.mu.Lock()
		_ = s.pipes[req.Session].Close()
		s.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	})
	add("bad.name", nil, echo)
	add("charge", nil, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The body acted (the call is recorded), then answered a JSON-RPC
		// invalid params error: the Go SDK passes a handler's *jsonrpc.Error
		// through as it is, and the TypeScript SDK (1.17 and others) answers
		// -32602 when a tool's result fails its output schema, after the
		// tool ran.
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "structured content does not match the output schema"}
	})
	client := mcptools.New(mcptools.Transport("in-memory sdk server", func() (mcp.Transport, error) {
		s.mu.Lock()
		refuse := s.refuse
		s.mu.Unlock()
		if refuse {
			return nil, errors.New("the server is down")
		}
		serverEnd, clientEnd := net.Pipe()
		ss, err := s.server.Connect(context.Background(), &mcp.IOTransport{Reader: serverEnd, Writer: serverEnd}, nil)
		if err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.sessions = append(s.sessions, ss)
		if s.pipes == nil {
			s.pipes = map[*mcp.ServerSession]net.Conn{}
		}
		s.pipes[ss] = serverEnd
		s.mu.Unlock()
		return &mcp.IOTransport{Reader: clientEnd, Writer: clientEnd}, nil
	}))
	t.Cleanup(func() { _ = client.Close() })
	return s, client
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func byName(t *testing.T, list []tools.Tool, name string) tools.Tool {
	t.Helper()
	for _, tl := range list {
		if tl.Name() == name {
			return tl
		}
	}
	t.Fatalf("no tool %q", name)
	return nil
}

// TestInvalidNameIsABuildErrorUnlessRenamed: a tool name outside the shared
// grammar (docs/semantics.md §3) is refused with *InvalidToolName, never
// changed
// silently; Rename maps it explicitly, and the server is still called by its
// own name.
func TestInvalidNameIsABuildErrorUnlessRenamed(t *testing.T) {
	srv, client := newSDKServer(t)
	ctx := ctxT(t)
	_, err := client.Tools(ctx)
	var be *mcptools.BuildError
	var bad *mcptools.InvalidToolName
	if !errors.As(err, &be) || !errors.As(err, &bad) || bad.Tool != "bad.name" || len(be.Problems) != 1 {
		t.Fatalf("Tools = %v, want one InvalidToolName for bad.name", err)
	}
	if !strings.Contains(err.Error(), `mcptools.Rename("bad.name"`) {
		t.Fatalf("the error does not name the mapping option: %v", err)
	}

	_, err = client.Tools(ctx, mcptools.Rename("bad.name", "also bad"), mcptools.Timeout("nope", tools.Infinity()), mcptools.Rename("echo", "pay"))
	var unknown *mcptools.UnknownTool
	var dup *mcptools.DuplicateToolName
	if !errors.As(err, &unknown) || unknown.Name != "nope" || !errors.As(err, &bad) || bad.Name != "also bad" || !errors.As(err, &dup) || dup.Name != "pay" {
		t.Fatalf("Tools = %v, want UnknownTool nope, InvalidToolName 'also bad', DuplicateToolName pay", err)
	}

	list, err := client.Tools(ctx, mcptools.Rename("bad.name", "bad_name"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list {
		names = append(names, tl.Name())
	}
	// The SDK server lists its tools by name.
	if got := strings.Join(names, ","); got != "bad_name,charge,crash,drop,echo,fail,hang,pay,upsert" {
		t.Fatalf("tools %s, want the server's order with bad_name", got)
	}
	r := byName(t, list, "bad_name").Invoke(ctx, tools.Call{Run: "r", Action: "1/c"}, json.RawMessage(`{"message":"x"}`), tools.Settlement{})
	if r.Outcome != events.OutcomeOutput {
		t.Fatalf("renamed tool: %+v", r)
	}
	if calls := srv.recorded(); calls[len(calls)-1].name != "bad.name" {
		t.Fatalf("the server was called as %q, want its own name bad.name", calls[len(calls)-1].name)
	}

	only, err := client.Tools(ctx, mcptools.Only("fail", "echo"))
	if err != nil || len(only) != 2 || only[0].Name() != "echo" || only[1].Name() != "fail" { // the server's order
		t.Fatalf("Only: %v %v", only, err)
	}
}

// TestSchemaAndExactArguments: the model is shown the server's schema; the
// arguments are checked against it before policy, and the server gets
// exactly the normalized arguments the policy saw, with the action's
// idempotency key in _meta.
func TestSchemaAndExactArguments(t *testing.T) {
	srv, client := newSDKServer(t)
	ctx := ctxT(t)
	list, err := client.Tools(ctx, mcptools.Only("echo"))
	if err != nil {
		t.Fatal(err)
	}
	echo := list[0]
	spec := echo.Spec()
	if spec.Description != "the echo tool" || !strings.Contains(string(spec.InputSchema), `"required":["message"]`) {
		t.Fatalf("spec %s %s", spec.Description, spec.InputSchema)
	}
	for _, bad := range []string{`{"message":7}`, `{}`, `{"message":"x","extra":1}`, `[1]`, `{`} {
		if _, err := echo.Validate(json.RawMessage(bad)); err == nil {
			t.Errorf("Validate(%s) accepted", bad)
		} else if ve := (*tools.ValidationError)(nil); !errors.As(err, &ve) {
			t.Errorf("Validate(%s) = %T, want *tools.ValidationError", bad, err)
		}
	}
	// The detail is recorded in the log: the same arguments always give
	// the same one, although they have several problems (docs/adr/0022).
	const several = `{"message":"x","zeta":1,"alpha":2,"mid":3}`
	_, first := echo.Validate(json.RawMessage(several))
	for range 100 {
		if _, err := echo.Validate(json.RawMessage(several)); first == nil || err == nil || err.Error() != first.Error() {
			t.Fatalf("Validate(%s) = %v, then %v", several, first, err)
		}
	}
	if first.Error() != `/: unexpected additional properties ["alpha"]` {
		t.Errorf("detail %q", first.Error())
	}
	args, err := echo.Validate(json.RawMessage(" { \"message\" : \"héllo\" } "))
	if err != nil || string(args.JSON) != `{"message":"héllo"}` {
		t.Fatalf("Validate = %s, %v", args.JSON, err)
	}
	call := tools.Call{Run: "run-1", Action: "2/call_2_1", Attempt: 1, Correlation: "corr"}
	r := echo.Invoke(ctx, call, args.JSON, tools.Settlement{})
	if r.Outcome != events.OutcomeOutput {
		t.Fatalf("Invoke: %+v", r)
	}
	if want := `{"content":[{"type":"text","text":"echo: héllo"}],"structuredContent":{"echoed":"héllo"}}`; string(r.Content) != want {
		t.Fatalf("content %s, want the server's result %s", r.Content, want)
	}
	got := srv.recorded()
	if len(got) != 1 || got[0].args != string(args.JSON) || got[0].key != call.IdempotencyKey() {
		t.Fatalf("the server got %+v, want arguments %s and key %s", got, args.JSON, call.IdempotencyKey())
	}
	// A replay (attempt 2) and a new correlation carry the same key.
	echo.Invoke(ctx, tools.Call{Run: "run-1", Action: "2/call_2_1", Attempt: 2, Correlation: "other"}, args.JSON, tools.Settlement{})
	if got := srv.recorded(); got[1].key != got[0].key {
		t.Fatalf("keys differ across attempts: %v %v", got[0].key, got[1].key)
	}
}

// TestClassification is the table of docs/mcp.md, each row against the real
// SDK server: isError → Explain; a failure before the request was sent →
// Explain; a timeout, a broken connection or an error answer after it was
// sent (invalid params included) → Uncertain.
func TestClassification(t *testing.T) {
	srv, client := newSDKServer(t)
	ctx := ctxT(t)
	list, err := client.Tools(ctx, mcptools.Rename("bad.name", "bad_name"))
	if err != nil {
		t.Fatal(err)
	}
	call := tools.Call{Run: "r", Action: "1/c", Attempt: 1}
	args := json.RawMessage(`{"message":"m"}`)
	invoke := func(ctx context.Context, name string) tools.Result {
		return byName(t, list, name).Invoke(ctx, call, args, tools.Settlement{})
	}
	expect := func(what string, r tools.Result, outcome string, words ...string) {
		t.Helper()
		text := r.Message + r.Evidence
		if r.Outcome != outcome {
			t.Fatalf("%s: outcome %s (%s), want %s", what, r.Outcome, text, outcome)
		}
		for _, w := range words {
			if !strings.Contains(text, w) {
				t.Fatalf("%s: %q lacks %q", what, text, w)
			}
		}
	}

	r := invoke(ctx, "fail")
	expect("isError", r, events.OutcomeExplain, "card declined")
	if string(r.Content) != `{"error":"card declined"}` {
		t.Fatalf("isError content %s", r.Content)
	}

	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	expect("timeout after sending", invoke(tctx, "hang"), events.OutcomeUncertain, "timed out after the request was sent")
	cancel()

	cctx, cancel := context.WithCancel(ctx)
	go func() {
		for len(srv.recorded()) < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	expect("cancelled after sending", invoke(cctx, "hang"), events.OutcomeUncertain, "was cancelled after the request was sent")

	expect("connection broken after sending", invoke(ctx, "drop"), events.OutcomeUncertain, "after the call of drop was sent")
	expect("another error answer", invoke(ctx, "crash"), events.OutcomeUncertain, "database went away mid-write", "may have acted")

	// The server no longer has the tool: the SDKs answer invalid params,
	// the code they also answer after a body ran (TestInvalidParamsAfterActingIsUncertain).
	srv.server.RemoveTools("pay")
	expect("JSON-RPC invalid params", invoke(ctx, "pay"), events.OutcomeUncertain, "-32602", "may have acted")

	// The session was closed under the client: a new one is opened and the
	// call goes through (the first request was never sent).
	srv.mu.Lock()
	last := srv.sessions[len(srv.sessions)-1]
	srv.mu.Unlock()
	_ = last.Close()
	mcptools.WaitSessionEnded(client)
	expect("after the session closed", invoke(ctx, "echo"), events.OutcomeOutput)

	// The server cannot be reached at all: nothing was sent.
	srv.mu.Lock()
	srv.refuse = true
	for _, s := range srv.sessions {
		_ = s.Close()
	}
	srv.mu.Unlock()
	mcptools.WaitSessionEnded(client)
	expect("unreachable server", invoke(ctx, "echo"), events.OutcomeExplain, "could not be reached", "was not called")
	before := len(srv.recorded())
	expect("closed client", func() tools.Result { _ = client.Close(); return invoke(ctx, "echo") }(), events.OutcomeExplain, "the client is closed")
	if len(srv.recorded()) != before {
		t.Fatal("a call that was not sent reached the server")
	}
	// Already stopped before anything was sent.
	dctx, cancel := context.WithCancel(ctx)
	cancel()
	expect("context done before sending", invoke(dctx, "echo"), events.OutcomeExplain)
}

// TestInvalidParamsAfterActingIsUncertain (docs/semantics.md §3: an error after
// the
// request was sent must not look like a clean failure): JSON-RPC invalid
// params (-32602) is no proof that no tool body ran. The official SDKs answer
// it before a body runs (unknown tool, arguments that fail the input schema)
// and after (the Go SDK passes a handler's *jsonrpc.Error through; the
// TypeScript SDK 1.17 answers it when a result fails the tool's output
// schema). The tool here acted, then answered -32602: the action is
// uncertain, never a failure the model could retry.
func TestInvalidParamsAfterActingIsUncertain(t *testing.T) {
	srv, client := newSDKServer(t)
	ctx := ctxT(t)
	list, err := client.Tools(ctx, mcptools.Only("charge"))
	if err != nil {
		t.Fatal(err)
	}
	r := list[0].Invoke(ctx, tools.Call{Run: "r", Action: "1/c", Attempt: 1}, json.RawMessage(`{"message":"EUR 5"}`), tools.Settlement{})
	if n := len(srv.recorded()); n != 1 {
		t.Fatalf("the body ran %d times, want 1", n)
	}
	if r.Outcome != events.OutcomeUncertain || !strings.Contains(r.Evidence, "-32602") || !strings.Contains(r.Evidence, "may have acted") {
		t.Fatalf("invalid params after the body acted: %s %q %q, want uncertain with the code as evidence", r.Outcome, r.Message, r.Evidence)
	}
}

// TestReplayOnlyByOption: no MCP tool is replayable by default;
// ReplayReadOnly makes the readOnlyHint tools replayable, ReplayIdempotent
// also the idempotentHint ones; unannotated tools never are.
func TestReplayOnlyByOption(t *testing.T) {
	_, client := newSDKServer(t)
	ctx := ctxT(t)
	attempts := func(opts ...mcptools.ToolOption) string {
		list, err := client.Tools(ctx, append(opts, mcptools.Only("echo", "upsert", "pay"))...)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, tl := range list {
			b.WriteString(tl.Name() + "=" + string(rune('0'+tl.MaxAttempts())) + " ")
		}
		return strings.TrimSpace(b.String())
	}
	for _, c := range []struct {
		name string
		opts []mcptools.ToolOption
		want string
	}{
		{"default", nil, "echo=1 pay=1 upsert=1"},
		{"read-only", []mcptools.ToolOption{mcptools.ReplayReadOnly(3)}, "echo=3 pay=1 upsert=1"},
		{"idempotent", []mcptools.ToolOption{mcptools.ReplayIdempotent(2)}, "echo=2 pay=1 upsert=2"},
		{"both", []mcptools.ToolOption{mcptools.ReplayReadOnly(3), mcptools.ReplayIdempotent(2)}, "echo=3 pay=1 upsert=2"},
	} {
		if got := attempts(c.opts...); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
	list, err := client.Tools(ctx, mcptools.Only("pay"), mcptools.Timeout("pay", tools.After(time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := list[0].Timeout().Duration(); !ok || d != time.Second {
		t.Fatalf("Timeout option: %v", list[0].Timeout())
	}
}
