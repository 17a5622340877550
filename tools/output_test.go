package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/weftrun/weft/tools"
)

// TestValidateOutput (docs/semantics.md §10: reconciliation content is the
// tool's
// encoded output): ValidateOutput checks content against the bound tool's
// output schema — also through WithReplay/WithTimeout — and names the path
// and reason of a refusal.
func TestValidateOutput(t *testing.T) {
	tool := tools.Bind(lookupDef, func(context.Context, tools.Call, lookup) (invoice, error) { return invoice{}, nil }, nil)
	for _, tl := range []tools.Tool{tool, tools.WithReplay(tool, 3), tools.WithTimeout(tool, tools.Infinity())} {
		if err := tools.ValidateOutput(tl, json.RawMessage(`{"id":"INV-1","amount":5}`)); err != nil {
			t.Fatalf("valid output refused: %v", err)
		}
		err := tools.ValidateOutput(tl, json.RawMessage(`{"id":"INV-1","amount":"five"}`))
		var ve *tools.ValidationError
		if !errors.As(err, &ve) || ve.Path != "/amount" {
			t.Fatalf("output with a string amount: %v, want a ValidationError at /amount", err)
		}
		if err := tools.ValidateOutput(tl, json.RawMessage(`{"foo":1}`)); !errors.As(err, &ve) {
			t.Fatalf(`output {"foo":1}: %v, want a ValidationError`, err)
		}
	}
}
