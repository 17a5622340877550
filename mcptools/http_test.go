package mcptools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/tools"
)

// httpServer is an MCP server written with the Go SDK, served over
// streamable HTTP on a loopback port.
type httpServer struct {
	url string
	hs  *http.Server
	l   net.Listener
}

func serveHTTP(t *testing.T, srv *mcp.Server) *httpServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &httpServer{url: "http://" + l.Addr().String() + "/mcp", l: l,
		hs: &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)}}
	done := make(chan struct{})
	go func() { _ = h.hs.Serve(l); close(done) }()
	t.Cleanup(func() { _ = h.hs.Close(); <-done })
	return h
}

// stopAccepting makes the server take no new connection (as a server
// shutting down gracefully does): the listener closes and idle connections
// are closed; requests in progress go on.
func (h *httpServer) stopAccepting() {
	_ = h.l.Close()
	h.hs.SetKeepAlivesEnabled(false)
}

const blockingCancelNotify = "blockingcancelnotify=1"

// TestTimeoutWhileTheServerStopsAcceptingIsUncertain (docs/semantics.md §3: a
// timeout
// after a request was sent must never look like a clean failure): the
// server got the tools/call and is acting on it, then stops accepting
// connections (a graceful shutdown); the call's timeout fires. The SDK then
// sends notifications/cancelled with a context derived from the call's, on
// a new connection that is refused. That refusal is not the call's: the
// action is uncertain. Before, it made the call "not sent" (Explain, the
// model told the tool was not called): always when the SDK sends the
// notification before the call returns (MCPGODEBUG=blockingcancelnotify=1,
// the SDK's documented compatibility setting, run in a child process since
// the SDK reads it at start), and whenever the background notification won
// the race otherwise.
func TestTimeoutWhileTheServerStopsAcceptingIsUncertain(t *testing.T) {
	t.Run("notification in the background", timeoutWhileStopping)
	t.Run("notification before the call returns", func(t *testing.T) {
		if os.Getenv("MCPGODEBUG") == blockingCancelNotify {
			timeoutWhileStopping(t)
			return
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestTimeoutWhileTheServerStopsAcceptingIsUncertain$/^notification_before_the_call_returns$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "MCPGODEBUG="+blockingCancelNotify)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("with MCPGODEBUG=%s: %v\n%s", blockingCancelNotify, err, out)
		}
		if !strings.Contains(string(out), "--- PASS: TestTimeoutWhileTheServerStopsAcceptingIsUncertain/notification_before_the_call_returns") {
			t.Fatalf("the child process did not run the scenario:\n%s", out)
		}
	})
}

func timeoutWhileStopping(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "stopping", Version: "1"}, nil)
	var h *httpServer
	var calls atomic.Int32
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	srv.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(objectSchema)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		h.stopAccepting()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("stopped")
	})
	h = serveHTTP(t, srv)
	client := mcptools.New(mcptools.URL(h.url))
	t.Cleanup(func() { once.Do(func() { close(release) }); _ = client.Close() })
	ctx := ctxT(t)
	list, err := client.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	r := list[0].Invoke(tctx, tools.Call{Run: "r", Action: "1/c", Attempt: 1}, json.RawMessage(`{"message":"EUR 5"}`), tools.Settlement{})
	if n := calls.Load(); n != 1 {
		t.Fatalf("the server got %d calls, want 1", n)
	}
	if r.Outcome != events.OutcomeUncertain || !strings.Contains(r.Evidence, "timed out after the request was sent") {
		t.Fatalf("timeout after sending, then refused connections: %s %q %q, want uncertain", r.Outcome, r.Message, r.Evidence)
	}
}

// TestAFailedCallDoesNotWaitForTheOthers: calls share the session. When one
// call fails after it was sent in a way that breaks the session (here the
// server answers its POST 200 with a body that is neither JSON nor an event
// stream: Uncertain, the server may have acted), the client opens a new
// session for the next calls — and the failed call returns at once, its
// classification with it, while another call on the old session still
// runs. Before, it closed the old session itself, and closing a session
// waits for every call in flight on it: the failed call returned only when
// the slow one did.
func TestAFailedCallDoesNotWaitForTheOthers(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "busy", Version: "1"}, nil)
	entered, release := make(chan struct{}), make(chan struct{})
	var once, enter sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	srv.AddTool(&mcp.Tool{Name: "slow", InputSchema: json.RawMessage(objectSchema)}, func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		enter.Do(func() { close(entered) })
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "slow done"}}}, nil
	})
	srv.AddTool(&mcp.Tool{Name: "busy", InputSchema: json.RawMessage(objectSchema)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "never"}}}, nil
	})
	h := serveHTTP(t, srv)
	sdk := h.hs.Handler
	h.hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			if strings.Contains(string(body), `"name":"busy"`) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, "busy, try later")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		sdk.ServeHTTP(w, r)
	})
	client := mcptools.New(mcptools.URL(h.url))
	t.Cleanup(func() { once.Do(func() { close(release) }); _ = client.Close() })
	ctx := ctxT(t)
	list, err := client.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"message":"m"}`)
	slow := make(chan tools.Result, 1)
	go func() {
		slow <- byName(t, list, "slow").Invoke(ctx, tools.Call{Run: "r", Action: "1/a", Attempt: 1}, args, tools.Settlement{})
	}()
	<-entered
	busy := make(chan tools.Result, 1)
	go func() {
		busy <- byName(t, list, "busy").Invoke(ctx, tools.Call{Run: "r", Action: "1/b", Attempt: 1}, args, tools.Settlement{})
	}()
	select {
	case r := <-busy:
		if r.Outcome != events.OutcomeUncertain || !strings.Contains(r.Evidence, "text/plain") {
			t.Fatalf("a malformed answer: %s %q %q, want uncertain", r.Outcome, r.Message, r.Evidence)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the failed call did not return while another call ran on its session")
	}
	once.Do(func() { close(release) })
	if r := <-slow; r.Outcome != events.OutcomeOutput {
		t.Fatalf("the slow call: %s %q %q, want its output", r.Outcome, r.Message, r.Evidence)
	}
	// The next call goes through on a new session.
	if r := byName(t, list, "slow").Invoke(ctx, tools.Call{Run: "r", Action: "1/c", Attempt: 1}, args, tools.Settlement{}); r.Outcome != events.OutcomeOutput {
		t.Fatalf("a call after the failure: %s %q %q", r.Outcome, r.Message, r.Evidence)
	}
}

// TestACallThatCannotConnectWasNotSent: the server went away between two
// calls, and the session had no way to notice (the server keeps no event
// stream open): the next call's POST cannot connect. Nothing was sent, so the
// client opens a new session once (which fails too) and the action is
// Explain, the model told the tool was not called. Before, the SDK's
// wrapping of that connect error (its own "rejected by transport" JSON-RPC
// error value) hid it, and the call was Uncertain.
func TestACallThatCannotConnectWasNotSent(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gone", Version: "1"}, nil)
	var calls atomic.Int32
	srv.AddTool(&mcp.Tool{Name: "pay", InputSchema: json.RawMessage(objectSchema)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "paid"}}}, nil
	})
	h := serveHTTP(t, srv)
	sdk := h.hs.Handler
	h.hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// No connection is kept for another request: a request on a
		// connection the server closed meanwhile may have been written
		// (Go's "server closed idle connection"), which is Uncertain.
		w.Header().Set("Connection", "close")
		if r.Method == http.MethodGet {
			w.Header().Set("Allow", "POST, DELETE")
			http.Error(w, "no event stream", http.StatusMethodNotAllowed)
			return
		}
		sdk.ServeHTTP(w, r)
	})
	// mcptools.URL's client uses http.DefaultTransport. With keep-alives
	// on, a connection the transport dialed during the first call can
	// reach its idle pool after the server closed (the kernel accepted it
	// into the listener's backlog), and the second call then goes out on
	// it and reads EOF: a call that was sent, rightly Uncertain, which is
	// not what this test is about. Every request dials here.
	keep := http.DefaultTransport
	http.DefaultTransport = &http.Transport{DisableKeepAlives: true}
	t.Cleanup(func() { http.DefaultTransport = keep })
	client := mcptools.New(mcptools.URL(h.url))
	t.Cleanup(func() { _ = client.Close() })
	ctx := ctxT(t)
	list, err := client.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	call := tools.Call{Run: "r", Action: "1/c", Attempt: 1}
	if r := list[0].Invoke(ctx, call, json.RawMessage(`{"message":"first"}`), tools.Settlement{}); r.Outcome != events.OutcomeOutput {
		t.Fatalf("first call: %s %q %q", r.Outcome, r.Message, r.Evidence)
	}
	_ = h.hs.Close()
	r := list[0].Invoke(ctx, call, json.RawMessage(`{"message":"second"}`), tools.Settlement{})
	if r.Outcome != events.OutcomeExplain || !strings.Contains(r.Message, "was not called") {
		t.Fatalf("a call that could not connect: %s %q %q, want Explain (nothing was sent)", r.Outcome, r.Message, r.Evidence)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the server got %d calls, want 1", n)
	}
}
