package anthropic_test

import (
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic/anthropictest"
	"github.com/weftrun/weft/model/internal/adaptertest"
)

// BenchmarkCompleteToolTurn measures one tool-request turn with a thinking
// block against the loopback fake: request building, the SDK, HTTP and
// reply decoding. It reports the provider data kept per turn.
func BenchmarkCompleteToolTurn(b *testing.B) {
	srv := anthropictest.NewFakeServer(b)
	u := anthropictest.Usage()
	reply := anthropictest.Message{Usage: &u, Content: []anthropictest.Block{
		anthropictest.ThinkingBlock("The user wants a refund.", "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"),
		anthropictest.ToolUseBlock(model.ToolCall{ID: "toolu_A", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)}),
		anthropictest.ToolUseBlock(model.ToolCall{ID: "toolu_B", Name: "refund", Arguments: json.RawMessage(`{"id":"p-1","cents":500}`)}),
	}}.Response()
	adaptertest.BenchComplete(b, srv.Model("claude-test"), srv.Server, reply)
}
