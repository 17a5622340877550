package mcpops_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/mcpops"
)

// TestOperatorMCP_ReconcileAsTheToolDescriptionSays (docs/mcp.md,
// "Operate"; docs/protocol.md, weft.api.reconcile: content is the tool's
// output itself, {"error": …} or {"unconfirmed": …}): the model reads
// weft_reconcile's and weft_resolve's descriptions and the content
// field's schema text, and follows them. They say the content is the
// tool's output itself, not wrapped, and a reconcile made so (weft dev's
// send_payment output, {"status":"sent","id":…}) is accepted and recorded
// as an output. The wrapped form they used to show, {"output": {…}}, is
// refused invalid_content (an unexpected property of the output schema)
// and nothing is recorded, so no description may show it. Before, both
// descriptions and the schema text said content {"output": …}.
func TestOperatorMCP_ReconcileAsTheToolDescriptionSays(t *testing.T) {
	s, err := consolestack.Dev(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	cs := sessionOn(t, s.NC, mcpops.Config{Answers: true, NoRetry: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tool := range tools.Tools {
		if tool.Name != mcpops.ToolReconcile && tool.Name != mcpops.ToolResolve {
			continue
		}
		seen++
		var schema struct {
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		b, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		for what, text := range map[string]string{"description": tool.Description, "content's schema text": schema.Properties["content"].Description} {
			if !strings.Contains(text, "the tool's output itself") || strings.Contains(text, `{"output"`) {
				t.Errorf("%s's %s %q: want the content to be the tool's output itself, never {\"output\": …}", tool.Name, what, text)
			}
		}
	}
	if seen != 2 {
		t.Fatalf("found %d of weft_reconcile and weft_resolve", seen)
	}

	s.Start(t, "mcp-out", "pay invoice INV-13", "suspended")
	var reply api.Reply
	in := map[string]any{"run": "mcp-out", "action": "2/call_2_1", "by": "alice", "reason": "bank statement",
		"content": map[string]any{"output": map[string]any{"status": "sent", "id": "pay-13"}}, "command_id": "mcp-out-1"}
	if err := call(ctx, cs, mcpops.ToolReconcile, in, &reply); err == nil || !strings.HasPrefix(err.Error(), "invalid_content") {
		t.Fatalf("content wrapped in {\"output\": …}: %v, want invalid_content", err)
	}
	if n := len(s.History(t, "mcp-out", events.NameReconciled)); n != 0 {
		t.Fatalf("%d reconciliations recorded, want none", n)
	}
	in["content"], in["command_id"] = json.RawMessage(`{"status":"sent","id":"pay-13"}`), "mcp-out-2"
	if err := call(ctx, cs, mcpops.ToolReconcile, in, &reply); err != nil {
		t.Fatalf("content as the description says (the tool's output): %v", err)
	}
	s.WaitStatus(t, "mcp-out", "finished")
	rec := s.History(t, "mcp-out", events.NameReconciled)
	if len(rec) != 1 {
		t.Fatalf("%d reconciliations recorded, want one", len(rec))
	}
	e, err := rec[0].Event()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := e.(events.Reconciled); !ok || r.Kind != events.OutcomeOutput || r.By != "alice" || r.Verified {
		t.Fatalf("recorded %+v, want an output reconciliation by alice, unverified", e)
	}
}
