package mcpserve_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
)

// TestReaderToolCallNamesTheRole (docs/security.md, the roles;
// docs/mcp.md): weft mcp serve on weft dev --secure whose connection has
// the reader's credentials answers a tool call — a start — with a tool
// error carrying permission_denied that names the subject and the role
// whose credentials may (operator), at once: the server's wait is two
// minutes and the test's context one, so a server that waited for an
// answer instead would leave CallTool failing with the context's error
// when that minute ends. Before, it named the subject only.
func TestReaderToolCallNamesTheRole(t *testing.T) {
	s, err := consolestack.Dev(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reader, err := natsnode.Start(ctx, natsnode.WithURL(s.NATSURL), natsnode.WithCredsFile(filepath.Join(s.Roles, roles.CredsFile(roles.Reader, api.Queue{}))),
		natsnode.WithNATSOptions(nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(context.Background())
	srv, err := mcpserve.New(reader.Conn(), mcpserve.Config{Agents: []mcpserve.Agent{{Name: demo.AgentName, Tool: "desk"}}, Wait: 2 * time.Minute, NoRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "desk", Arguments: map[string]any{"input": "pay invoice INV-7", "key": "reader-1"}})
	if err != nil {
		t.Fatalf("the call: %v, want a tool error (permission_denied)", err)
	}
	b, _ := json.Marshal(res.StructuredContent)
	var ans mcpserve.Answer
	if err := json.Unmarshal(b, &ans); err != nil {
		t.Fatal(err)
	}
	const want = "publish to weft.api.start; the credentials of role operator may"
	if !res.IsError || ans.Status != mcpserve.StatusRefused || ans.Error == nil || ans.Error.Code != weft.CodePermissionDenied ||
		!strings.Contains(ans.Error.Message, want) || !strings.Contains(text(res), want) {
		t.Fatalf("the reader's call answered %s (isError %v, text %q), want refused permission_denied naming weft.api.start and role operator", b, res.IsError, text(res))
	}
}
