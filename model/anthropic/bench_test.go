package anthropic_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/anthropic/anthropictest"
)

// BenchmarkCompleteToolTurn measures one tool-request turn with a thinking
// block against the loopback fake: request building, the SDK, HTTP and
// reply decoding. It reports the provider data kept per turn.
func BenchmarkCompleteToolTurn(b *testing.B) {
	srv := anthropictest.NewFakeServer(b)
	u := anthropictest.Usage
	reply := anthropictest.Message{Usage: &u, Content: []anthropictest.Block{
		anthropictest.ThinkingBlock("The user wants a refund.", "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"),
		anthropictest.ToolUseBlock(model.ToolCall{ID: "toolu_A", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)}),
		anthropictest.ToolUseBlock(model.ToolCall{ID: "toolu_B", Name: "refund", Arguments: json.RawMessage(`{"id":"p-1","cents":500}`)}),
	}}.Response()
	srv.Respond(func(anthropictest.Request) anthropictest.Response { return reply })
	m := srv.Model("claude-test")
	req := baseRequest()
	var pd int
	for b.Loop() {
		r, err := m.Complete(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		pd = len(r.Turn.ProviderData)
	}
	b.ReportMetric(float64(pd), "provider-data-bytes")
}
