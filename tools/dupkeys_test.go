package tools_test

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/weftrun/weft/tools"
)

type transfer struct {
	Amount int64             `json:"amount"`
	To     string            `json:"to"`
	Lines  []line            `json:"lines,omitempty"`
	Meta   map[string]string `json:"meta,omitempty"`
}

type line struct {
	Amount int64 `json:"amount"`
}

// TestArgumentsWithADuplicatePropertyAreInvalid proves docs/semantics.md §4
// (the
// policy and the person approving judge the arguments the body gets): a
// JSON object that names a property twice means two things to two
// readers (encoding/json keeps the last, many parsers, consoles and
// policy engines in other languages the first), so that
// {"amount":1,"amount":1000000} could be approved as 1 and paid as a
// million. Such arguments are invalid_arguments, naming the duplicate,
// at every depth, for a Go type's schema and for an MCP server's.
func TestArgumentsWithADuplicatePropertyAreInvalid(t *testing.T) {
	c := tools.CodecFor[transfer]()
	for _, tt := range []struct{ args, want string }{
		{`{"amount":1,"to":"acct-1","amount":1000000}`, `/amount: duplicate property "amount"`},
		{`{"to":"acct-1","amount":5,"lines":[{"amount":1},{"amount":2,"amount":3}]}`, `/lines/1/amount: duplicate property "amount"`},
		{`{"to":"a","amount":5,"meta":{"a/b":"x","a/b":"y"}}`, `/meta/a~1b: duplicate property "a/b"`},
		{`{"to":"a","amount":5,"t\u006f":"b"}`, `/to: duplicate property "to"`},
	} {
		if got := refusal(t, c, tt.args); got != tt.want {
			t.Errorf("Decode(%s) = %q, want %q", tt.args, got, tt.want)
		}
	}
	// The same names in different objects, and equal values in an array,
	// are no duplicates.
	ok := `{"amount":5,"to":"a","lines":[{"amount":1},{"amount":1}],"meta":{"amount":"1","to":"x"}}`
	if _, err := c.Decode(json.RawMessage(ok)); err != nil {
		t.Errorf("Decode(%s) = %v, want no error", ok, err)
	}

	s := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"q": {Type: "string"}}}
	v, err := tools.NewSchemaValidator(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Validate(json.RawMessage(`{"q":"a","q":"b"}`)); err == nil || err.Error() != `/q: duplicate property "q"` {
		t.Errorf("SchemaValidator.Validate of a duplicate = %v, want /q: duplicate property \"q\"", err)
	}
}
