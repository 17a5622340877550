package openai_test

import (
	"encoding/json"
	"testing"

	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/internal/adaptertest"
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
	adaptertest.BenchComplete(b, srv.Model("gpt-test"), srv.Server, reply)
}
