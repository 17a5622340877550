package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/tools"
)

// MetaIdempotencyKey is the _meta key under which every tools/call request
// carries the action's idempotency key (tools.IdempotencyKey): the same for
// every attempt, replay and recovery of one logical action.
const MetaIdempotencyKey = "run.weft/idempotency-key"

// Source says how to reach one MCP server. Open is called for every new
// session: the first use, and again after a session broke.
type Source struct {
	describe string
	open     func() (mcp.Transport, error)
	http     bool // requests go through trackingTransport
}

// String returns what the source reaches, for errors and evidence, such as
// "command npx server" or "url http://127.0.0.1:3001/mcp".
func (s Source) String() string { return s.describe }

// Command returns the Source of a server run as a process: name with args,
// speaking MCP over its stdin and stdout. Each new session starts a new
// process; its stderr goes to this process's stderr.
func Command(name string, args ...string) Source {
	return Source{
		describe: "command " + strings.Join(append([]string{name}, args...), " "),
		open: func() (mcp.Transport, error) {
			return &mcp.CommandTransport{Command: exec.Command(name, args...)}, nil
		},
	}
}

// CommandFunc is Command with the process made by cmd (to set its
// environment or directory); cmd is called once per session and must
// return a new, unstarted *exec.Cmd each time.
func CommandFunc(describe string, cmd func() *exec.Cmd) Source {
	return Source{describe: "command " + describe, open: func() (mcp.Transport, error) {
		return &mcp.CommandTransport{Command: cmd()}, nil
	}}
}

// URL returns the Source of a server reached with the streamable HTTP
// transport at endpoint.
func URL(endpoint string) Source {
	client := &http.Client{Transport: trackingTransport{base: http.DefaultTransport}}
	return Source{describe: "url " + endpoint, http: true, open: func() (mcp.Transport, error) {
		return &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: client, MaxRetries: -1}, nil
	}}
}

// sendKey is the context key of a tools/call's sendTrack.
type sendKey struct{}

// sendTrack records whether the HTTP request carrying one tools/call left
// this process: posted once a POST with the call's context was handed to
// the HTTP transport, dialFailed when that POST could not even connect.
//
// Only the first POST with the call's context counts: it is the one that
// carries the tools/call (the SDK writes the request before anything else
// with that context). The SDK sends more with that context later — the
// notifications/cancelled of a call its context stopped, the follow-up
// requests of a multi round trip — and those failing to connect say nothing
// about the call's own request.
type sendTrack struct {
	posted, dialFailed atomic.Bool
}

// trackingTransport marks the sendTrack of the context of the first POST it
// carries with that context.
type trackingTransport struct{ base http.RoundTripper }

func (t trackingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr, _ := req.Context().Value(sendKey{}).(*sendTrack)
	first := tr != nil && req.Method == http.MethodPost && tr.posted.CompareAndSwap(false, true)
	res, err := t.base.RoundTrip(req)
	var op *net.OpError
	if first && err != nil && errors.As(err, &op) && op.Op == "dial" {
		tr.dialFailed.Store(true)
	}
	return res, err
}

// Transport returns a Source whose sessions run over the transports open
// returns, described as describe: any transport of the MCP Go SDK, such as
// one of mcp.NewInMemoryTransports.
func Transport(describe string, open func() (mcp.Transport, error)) Source {
	return Source{describe: describe, open: open}
}

// Client is a connection to one MCP server: it opens a session on first use
// and a new one after a session broke, and turns the server's tools into
// Weft tools (Tools). It is safe for concurrent use; calls share the
// session.
type Client struct {
	source Source
	impl   *mcp.Implementation

	mu      sync.Mutex
	session *mcp.ClientSession
	closed  bool
	// closing counts the dropped sessions being closed in the background
	// (drop); Close waits for them.
	closing sync.WaitGroup
}

// ClientOption configures New.
type ClientOption func(*Client)

// WithImplementation sets the client name and version sent to the server
// at initialization (default "weft", "1").
func WithImplementation(name, version string) ClientOption {
	return func(c *Client) { c.impl = &mcp.Implementation{Name: name, Version: version} }
}

// New returns a Client for the server source reaches. It connects nothing
// until first used.
func New(source Source, opts ...ClientOption) *Client {
	c := &Client{source: source, impl: &mcp.Implementation{Name: "weft", Version: "1"}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Source returns the source the client reaches.
func (c *Client) Source() Source { return c.source }

// Close ends the current session (and the server process of a Command
// source), waiting for the calls in flight on it, and for the sessions
// dropped after a failure to close. Calls after Close fail before anything
// is sent.
func (c *Client) Close() error {
	c.mu.Lock()
	s := c.session
	c.session, c.closed = nil, true
	c.mu.Unlock()
	var err error
	if s != nil {
		err = s.Close()
	}
	c.closing.Wait()
	return err
}

// errNotSent marks a failure that happened before the tools/call request
// was written: the server cannot have acted on it.
type errNotSent struct{ err error }

func (e *errNotSent) Error() string { return e.err.Error() }
func (e *errNotSent) Unwrap() error { return e.err }

// sessionFor returns the current session, opening one when there is none.
// A failure is errNotSent.
func (c *Client) sessionFor(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, &errNotSent{errors.New("the client is closed")}
	}
	if c.session != nil {
		return c.session, nil
	}
	t, err := c.source.open()
	if err != nil {
		return nil, &errNotSent{fmt.Errorf("open %s: %w", c.source, err)}
	}
	s, err := mcp.NewClient(c.impl, nil).Connect(ctx, t, nil)
	if err != nil {
		return nil, &errNotSent{fmt.Errorf("connect to %s: %w", c.source, err)}
	}
	c.session = s
	return s, nil
}

// drop forgets s when it is still the current session, so that the next
// use opens a new one, and closes it in the background: closing a session
// waits for every call still in flight on it, and the failed call that
// drops it must not wait for the others.
func (c *Client) drop(s *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == s {
		c.session = nil
	}
	closed := c.closed
	if !closed {
		c.closing.Add(1)
	}
	c.mu.Unlock()
	if closed {
		_ = s.Close()
		return
	}
	go func() {
		defer c.closing.Done()
		_ = s.Close()
	}()
}

// call sends one tools/call. When the session turns out to be closed before
// the request was written, it opens a new session and tries once more (the
// first request was never sent).
func (c *Client) call(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	for try := 0; ; try++ {
		s, err := c.sessionFor(ctx)
		if err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, &errNotSent{err}
		}
		tr := &sendTrack{}
		res, err := s.CallTool(context.WithValue(ctx, sendKey{}, tr), params)
		if err == nil {
			return res, nil
		}
		if c.notSent(ctx, err, tr) {
			c.drop(s)
			if try == 0 {
				continue
			}
			return nil, &errNotSent{err}
		}
		if ctx.Err() == nil {
			// The session is broken or the server answered an error: a
			// later call starts on a fresh session if it must.
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) {
				c.drop(s)
			}
		}
		return nil, err
	}
}

// notSent reports whether the failed call's request never left this
// process. Over HTTP the call's own POST says (sendTrack): none was made, or
// it could not connect. Over other transports: the session was closed or
// broken before the request was written (ErrConnectionClosed), the
// server's end of a pipe was already closed (EPIPE: a process that is gone
// reads nothing), or the server refused the connection — unless the call
// ended because its context did: then the SDK has sent (or tried to send)
// notifications/cancelled, whose failure is joined to the error and says
// nothing about the request, which may well have been written.
func (c *Client) notSent(ctx context.Context, err error, tr *sendTrack) bool {
	if c.source.http {
		// Whatever the error (the SDK wraps a POST that could not connect
		// in its own JSON-RPC error value), no POST, or one that could not
		// connect, sent nothing.
		return !tr.posted.Load() || tr.dialFailed.Load()
	}
	if ctx.Err() != nil {
		return false
	}
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// ToolOption configures Client.Tools.
type ToolOption func(*toolConfig)

type toolConfig struct {
	only       []string
	rename     map[string]string
	readOnly   int
	idempotent int
	timeouts   map[string]tools.Timeout
}

// Only keeps the named MCP tools (by their MCP names), in the server's
// order; a name the server does not list is an *UnknownTool.
func Only(names ...string) ToolOption {
	return func(c *toolConfig) { c.only = append(c.only, names...) }
}

// Rename makes the model call the MCP tool mcpName by weftName. It is the
// explicit mapping for a name outside the shared grammar (tools.ValidName)
// and for two servers with a tool of the same name. The policy sees
// weftName; the server is called with mcpName.
func Rename(mcpName, weftName string) ToolOption {
	return func(c *toolConfig) {
		if c.rename == nil {
			c.rename = map[string]string{}
		}
		c.rename[mcpName] = weftName
	}
}

// ReplayReadOnly makes every tool the server annotates readOnlyHint
// replayable, with maxAttempts starts in all (tools.WithReplay; agent.Build
// checks 1..100). Tools without the hint stay unreplayable. The hint is the
// server's word: use this only for a server you trust.
func ReplayReadOnly(maxAttempts int) ToolOption {
	return func(c *toolConfig) { c.readOnly = maxAttempts }
}

// ReplayIdempotent makes every tool the server annotates idempotentHint
// (or readOnlyHint) replayable, with maxAttempts starts in all. An
// idempotent write repeated with the same arguments has no further effect,
// says the server; use this only for a server you trust.
func ReplayIdempotent(maxAttempts int) ToolOption {
	return func(c *toolConfig) { c.idempotent = maxAttempts }
}

// Timeout bounds the body of the MCP tool mcpName by t instead of the
// agent's tool timeout (tools.WithTimeout). A call still running at its
// timeout is stopped and its action becomes uncertain unless replayable.
func Timeout(mcpName string, t tools.Timeout) ToolOption {
	return func(c *toolConfig) {
		if c.timeouts == nil {
			c.timeouts = map[string]tools.Timeout{}
		}
		c.timeouts[mcpName] = t
	}
}

// Tools lists the server's tools and returns them as Weft tools, in the
// server's order (see the package documentation). Every problem is
// reported at once in a *BuildError: a name outside the grammar
// (*InvalidToolName), a name given to Only, Rename or Timeout that the
// server does not list (*UnknownTool), two tools with one Weft name
// (*DuplicateToolName), an input schema that is not a usable JSON Schema
// object (*UnusableSchema). A failure to reach the server or list its tools
// is returned as it is.
func (c *Client) Tools(ctx context.Context, opts ...ToolOption) ([]tools.Tool, error) {
	var cfg toolConfig
	for _, o := range opts {
		o(&cfg)
	}
	s, err := c.sessionFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("mcptools: %w", err)
	}
	var listed []*mcp.Tool
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("mcptools: list the tools of %s: %w", c.source, err)
		}
		listed = append(listed, t)
	}
	byName := map[string]bool{}
	for _, t := range listed {
		byName[t.Name] = true
	}
	var problems []error
	for _, group := range []struct {
		option string
		names  []string
	}{{"Only", cfg.only}, {"Rename", keys(cfg.rename)}, {"Timeout", keys(cfg.timeouts)}} {
		for _, n := range group.names {
			if !byName[n] {
				problems = append(problems, &UnknownTool{Option: group.option, Name: n})
			}
		}
	}
	keep := map[string]bool{}
	for _, n := range cfg.only {
		keep[n] = true
	}
	var out []tools.Tool
	first := map[string]string{}
	for _, t := range listed {
		if len(cfg.only) > 0 && !keep[t.Name] {
			continue
		}
		name := t.Name
		if r, ok := cfg.rename[t.Name]; ok {
			name = r
		}
		if !tools.ValidName(name) {
			problems = append(problems, &InvalidToolName{Tool: t.Name, Name: name})
			continue
		}
		if prev, dup := first[name]; dup {
			problems = append(problems, &DuplicateToolName{Name: name, First: prev, Second: t.Name})
			continue
		}
		first[name] = t.Name
		mt, err := newTool(c, name, t)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		var tool tools.Tool = mt
		if n := replayBudget(t.Annotations, cfg); n != 0 {
			tool = tools.WithReplay(tool, n)
		}
		if to, ok := cfg.timeouts[t.Name]; ok {
			tool = tools.WithTimeout(tool, to)
		}
		out = append(out, tool)
	}
	if len(problems) > 0 {
		return nil, &BuildError{Source: c.source.String(), Problems: problems}
	}
	return out, nil
}

// keys returns m's keys sorted, so that problems come in a stable order.
func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// replayBudget is the replay budget the options give a tool with these
// annotations: 0 when it stays unreplayable.
func replayBudget(a *mcp.ToolAnnotations, cfg toolConfig) int {
	if a == nil {
		return 0
	}
	switch {
	case a.ReadOnlyHint && cfg.readOnly != 0:
		return cfg.readOnly
	case (a.ReadOnlyHint || a.IdempotentHint) && cfg.idempotent != 0:
		return cfg.idempotent
	}
	return 0
}

// Tool is an MCP tool as a Weft tool. Client.Tools returns them (possibly
// wrapped by tools.WithReplay or tools.WithTimeout).
type Tool struct {
	client      *Client
	name        string
	remote      string
	description string
	schema      json.RawMessage
	valid       *tools.SchemaValidator
	annotations mcp.ToolAnnotations
}

func newTool(c *Client, name string, t *mcp.Tool) (*Tool, error) {
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, &UnusableSchema{Tool: t.Name, Err: err}
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, &UnusableSchema{Tool: t.Name, Err: err}
	}
	if s.Type != "object" {
		return nil, &UnusableSchema{Tool: t.Name, Err: fmt.Errorf("the input schema's type is %q, want \"object\"", s.Type)}
	}
	valid, err := tools.NewSchemaValidator(&s)
	if err != nil {
		return nil, &UnusableSchema{Tool: t.Name, Err: err}
	}
	mt := &Tool{client: c, name: name, remote: t.Name, description: t.Description, schema: raw, valid: valid}
	if t.Annotations != nil {
		mt.annotations = *t.Annotations
	}
	return mt, nil
}

// Name returns the name the model calls the tool by.
func (t *Tool) Name() string { return t.name }

// MCPName returns the tool's name on the MCP server.
func (t *Tool) MCPName() string { return t.remote }

// Annotations returns the hints the server gave about the tool.
func (t *Tool) Annotations() mcp.ToolAnnotations { return t.annotations }

// Spec returns the server's description and input schema under the Weft
// name.
func (t *Tool) Spec() model.ToolSpec {
	return model.ToolSpec{Name: t.name, Description: t.description, InputSchema: t.schema}
}

// SchemaErr returns nil: Client.Tools refused every tool without a usable
// schema.
func (t *Tool) SchemaErr() error { return nil }

// MaxAttempts returns 1: an MCP tool is replayable only through
// ReplayReadOnly, ReplayIdempotent or tools.WithReplay.
func (t *Tool) MaxAttempts() int { return 1 }

// Timeout returns the zero Timeout: the agent's tool timeout applies unless
// the Timeout option or tools.WithTimeout set one.
func (t *Tool) Timeout() tools.Timeout { return tools.Timeout{} }

// Settling returns false.
func (t *Tool) Settling() bool { return false }

// SettleWithin returns 0.
func (t *Tool) SettleWithin() time.Duration { return 0 }

// Validate checks args against the server's input schema
// (tools.SchemaValidator: the one validator, its detail deterministic)
// and returns them compacted (an empty or null value as {}): exactly what
// the policy sees and what is sent to the server. A value that does not
// fit is a *tools.ValidationError. An MCP tool has no Go input type: the
// Arguments hold no decoded value.
func (t *Tool) Validate(args json.RawMessage) (tools.Arguments, error) {
	norm, err := t.valid.Validate(args)
	if err != nil {
		return tools.Arguments{}, err
	}
	return tools.Arguments{JSON: norm}, nil
}

// Output is the content a successful call records, as the server returned
// it: the content blocks and the structured content, if any.
type Output struct {
	// Content is the result's content blocks.
	Content []mcp.Content `json:"content"`
	// StructuredContent is the result's structured content, if any.
	StructuredContent any `json:"structuredContent,omitempty"`
}

// Invoke sends one tools/call with args (as validated) and the action's
// idempotency key in _meta, and classifies how it ended (see the package
// documentation). It never panics and never returns an error.
func (t *Tool) Invoke(ctx context.Context, call tools.Call, args json.RawMessage, _ tools.Settlement) tools.Result {
	params := &mcp.CallToolParams{
		Meta:      mcp.Meta{MetaIdempotencyKey: call.IdempotencyKey()},
		Name:      t.remote,
		Arguments: json.RawMessage(args),
	}
	res, err := t.client.call(ctx, params)
	if err != nil {
		return tools.FailureResult(t.classify(ctx, err))
	}
	if res.IsError {
		return tools.FailureResult(tools.Explain(text(res.Content, "the MCP tool "+t.remote+" reported an error")))
	}
	content, err := json.Marshal(Output{Content: nonNil(res.Content), StructuredContent: res.StructuredContent})
	if err != nil {
		return tools.FailureResult(tools.Uncertain(fmt.Sprintf("the MCP tool %s answered, but its result could not be encoded: %v", t.remote, err)))
	}
	return tools.OutputResult(content)
}

// refusedCodes are the JSON-RPC error codes taken as the server's refusal of
// the request as such, before any tool body ran: method not found, the
// server has no tools/call. No other code is: invalid params (-32602) is
// answered after a body ran too (the Go SDK passes a handler's
// *jsonrpc.Error through, the TypeScript SDK 1.17 answers it when a result
// fails the tool's output schema), and the Go SDK reports an answer it
// cannot read (a response without an id, an id of the wrong type) with its
// own parse error (-32700) and invalid request (-32600) values, which
// errors.As cannot tell from a server's. Those are Uncertain like any other
// error after sending.
var refusedCodes = map[int64]bool{
	jsonrpc.CodeMethodNotFound: true,
}

// classify is the Classify of a failed tools/call.
func (t *Tool) classify(ctx context.Context, err error) tools.Failure {
	var ns *errNotSent
	if errors.As(err, &ns) {
		return tools.Explain(fmt.Sprintf("the MCP server (%s) could not be reached, so the tool %s was not called: %v", t.client.source, t.remote, ns.err))
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) && refusedCodes[werr.Code] {
		return tools.Explain(fmt.Sprintf("the MCP server refused the call of %s (JSON-RPC error %d): %s", t.remote, werr.Code, werr.Message))
	}
	if cerr := ctx.Err(); cerr != nil {
		why := "was cancelled"
		if errors.Is(cerr, context.DeadlineExceeded) {
			why = "timed out"
		}
		return tools.Uncertain(fmt.Sprintf("the call of MCP tool %s on %s %s after the request was sent; the server may have acted", t.remote, t.client.source, why))
	}
	if werr != nil {
		// The server's error answer, or one the SDK made (an answer it
		// could not read, a transport's rejection): either way after sending.
		return tools.Uncertain(fmt.Sprintf("the call of MCP tool %s on %s failed after the request was sent: %v (JSON-RPC error %d); the server may have acted", t.remote, t.client.source, err, werr.Code))
	}
	return tools.Uncertain(fmt.Sprintf("the connection to %s failed after the call of %s was sent: %v; the server may have acted", t.client.source, t.remote, err))
}

// text joins the text blocks of content, or returns fallback when there is
// none.
func text(content []mcp.Content, fallback string) string {
	var parts []string
	for _, c := range content {
		if tc, ok := c.(*mcp.TextContent); ok && tc.Text != "" {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) == 0 {
		return fallback
	}
	return strings.Join(parts, "\n")
}

func nonNil(c []mcp.Content) []mcp.Content {
	if c == nil {
		return []mcp.Content{}
	}
	return c
}
