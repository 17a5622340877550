package tools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/weftrun/weft/internal/fuzzseed"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// fuzzIn is a tool input with the shapes models get wrong: a required
// string, an enum, a number, an optional nested list.
type fuzzIn struct {
	Invoice  string     `json:"invoice"`
	Currency string     `json:"currency" enum:"EUR,USD"`
	Amount   int64      `json:"amount"`
	Lines    []fuzzLine `json:"lines,omitempty"`
}

type fuzzLine struct {
	Text  string  `json:"text"`
	Price float64 `json:"price"`
}

type fuzzOut struct {
	ID string `json:"id"`
}

func fuzzTool() tools.Tool {
	def := tools.Define[fuzzIn, fuzzOut]("pay", "Pay an invoice.")
	return tools.Bind(def, func(context.Context, tools.Call, fuzzIn) (fuzzOut, error) { return fuzzOut{ID: "x"}, nil },
		func(err error) tools.Failure { return tools.Explain(err.Error()) })
}

// FuzzToolArguments fuzzes the decoding of a model's tool arguments
// (docs/semantics.md §4: arguments are decoded before policy; undecodable →
// invalid_arguments): Validate never panics, refuses with a
// *tools.ValidationError, and what it accepts is normalized — validating
// the normalized arguments again gives the same bytes — and decodes in the
// body (Invoke never sees arguments it cannot read).
func FuzzToolArguments(f *testing.F) {
	tool := fuzzTool()
	f.Fuzz(func(t *testing.T, args []byte) {
		valid, err := tool.Validate(args)
		norm := valid.JSON
		if err != nil {
			var ve *tools.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate(%q): %v is no *ValidationError", args, err)
			}
			return
		}
		again, err := tool.Validate(norm)
		if err != nil || !bytes.Equal(again.JSON, norm) {
			t.Fatalf("Validate(%q) = %s, but validating that again gives %s, %v", args, norm, again.JSON, err)
		}
		var in fuzzIn
		if err := json.Unmarshal(norm, &in); err != nil {
			t.Fatalf("normalized arguments %s do not decode: %v", norm, err)
		}
		if v, ok := policy.DecodedAs[fuzzIn](valid.Decoded); !ok || !reflect.DeepEqual(v, in) {
			t.Fatalf("Validate(%q) decoded %#v, but the normalized arguments decode as %#v", args, v, in)
		}
		if r := tool.Invoke(context.Background(), tools.Call{}, norm, tools.Settlement{}); r.Outcome != "output" {
			t.Fatalf("Invoke(%s) = %+v, want the body's output", norm, r)
		}
	})
}

// TestToolArgumentSeedsAreMeaningful: FuzzToolArguments' seeds named
// valid-* validate, every other seed is refused.
func TestToolArgumentSeedsAreMeaningful(t *testing.T) {
	seeds, err := fuzzseed.Read(".", "FuzzToolArguments")
	if err != nil {
		t.Fatal(err)
	}
	tool := fuzzTool()
	for _, s := range seeds {
		if _, err := tool.Validate(json.RawMessage(s.Values[0])); s.Valid() != (err == nil) {
			t.Errorf("%s: Validate: %v", s.Name, err)
		}
	}
}
