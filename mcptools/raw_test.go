package mcptools_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/tools"
)

// rawServer speaks MCP's JSON-RPC by hand, one message a line, over an
// in-memory pipe: enough to initialize and list one tool, pay. It answers
// each tools/call with answer(id), which may be anything a broken or
// hostile server writes.
func rawServer(t *testing.T, answer func(id json.RawMessage) string) (*mcptools.Client, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	client := mcptools.New(mcptools.Transport("raw server", func() (mcp.Transport, error) {
		serverEnd, clientEnd := net.Pipe()
		go func() {
			defer serverEnd.Close()
			sc := bufio.NewScanner(serverEnd)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			reply := func(line string) { _, _ = fmt.Fprintln(serverEnd, line) }
			for sc.Scan() {
				var m struct {
					ID     json.RawMessage `json:"id"`
					Method string          `json:"method"`
				}
				if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
					continue // notifications
				}
				switch m.Method {
				case "initialize":
					reply(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}}`)
				case "tools/list":
					reply(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[{"name":"pay","inputSchema":{"type":"object"}}]}}`)
				case "tools/call":
					calls.Add(1)
					reply(answer(m.ID))
				default:
					reply(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"method not found"}}`)
				}
			}
		}()
		return &mcp.IOTransport{Reader: clientEnd, Writer: clientEnd}, nil
	}))
	t.Cleanup(func() { _ = client.Close() })
	return client, &calls
}

// TestAMalformedAnswerIsUncertain (docs/semantics.md §3): the server got the
// call
// and answered something the client cannot read — a response without an
// id, an id of the wrong type, or no JSON at all. The server may have
// acted: Uncertain. The Go SDK reports the first two with its own JSON-RPC
// error values (invalid request -32600, parse error -32700), the codes a
// server uses to refuse a request as such; read as the server's refusal,
// they made the action Explain before. Only method not found (-32601) is
// taken as the server's refusal: the SDK never makes that one up for a call
// it sent.
func TestAMalformedAnswerIsUncertain(t *testing.T) {
	for _, c := range []struct {
		name, outcome string
		answer        func(id json.RawMessage) string
	}{
		{"no id", events.OutcomeUncertain, func(json.RawMessage) string { return `{"jsonrpc":"2.0","result":{"content":[]}}` }},
		{"an id of the wrong type", events.OutcomeUncertain, func(json.RawMessage) string { return `{"jsonrpc":"2.0","id":{"n":1},"result":{"content":[]}}` }},
		{"not JSON", events.OutcomeUncertain, func(json.RawMessage) string { return `paid, I think` }},
		{"the server's invalid request", events.OutcomeUncertain, func(id json.RawMessage) string {
			return `{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32600,"message":"invalid request"}}`
		}},
		{"the server's method not found", events.OutcomeExplain, func(id json.RawMessage) string {
			return `{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32601,"message":"no tools/call here"}}`
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, calls := rawServer(t, c.answer)
			ctx := ctxT(t)
			list, err := client.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			r := list[0].Invoke(ctx, tools.Call{Run: "r", Action: "1/c", Attempt: 1}, json.RawMessage(`{}`), tools.Settlement{})
			if calls.Load() != 1 {
				t.Fatalf("the server got %d calls, want 1", calls.Load())
			}
			if r.Outcome != c.outcome {
				t.Fatalf("outcome %s (%q %q), want %s", r.Outcome, r.Message, r.Evidence, c.outcome)
			}
			if c.outcome == events.OutcomeUncertain && !strings.Contains(r.Evidence, "may have acted") {
				t.Fatalf("evidence %q does not say the server may have acted", r.Evidence)
			}
		})
	}
}
