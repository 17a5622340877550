package openai_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/openai/openaitest"
)

// BenchmarkCompleteToolTurn measures one tool-request turn against the
// loopback fake: request building, the SDK, HTTP and reply decoding. It
// reports the provider data kept per turn.
func BenchmarkCompleteToolTurn(b *testing.B) {
	srv := openaitest.NewFakeServer(b)
	reply := openaitest.ToolCalls(
		model.ToolCall{ID: "call_A", Name: "lookup", Arguments: json.RawMessage(`{"id":"p-1"}`)},
		model.ToolCall{ID: "call_B", Name: "refund", Arguments: json.RawMessage(`{"id":"p-1","cents":500}`)},
	)
	srv.Respond(func(openaitest.Request) openaitest.Response { return reply })
	m := srv.Model("gpt-test")
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
