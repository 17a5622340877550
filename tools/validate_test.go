package tools_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// refusal decodes args with c and returns the *ValidationError's text.
func refusal[T any](t *testing.T, c *tools.Codec[T], args string) string {
	t.Helper()
	_, err := c.Decode(json.RawMessage(args))
	var ve *tools.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Decode(%s) error = %v, want *ValidationError", args, err)
	}
	return ve.Error()
}

// TestInvalidArgumentsDetailIsDeterministic proves the rule of
// docs/semantics.md §4
// that the invalid_arguments detail the log records is a function of the
// arguments: a value with several problems always gets the same detail,
// naming the first problem in a fixed order (properties by name, items by
// index, an object's unknown properties one at a time), although
// jsonschema-go, the one validator, walks properties in map order.
func TestInvalidArgumentsDetailIsDeterministic(t *testing.T) {
	c := tools.CodecFor[order]()
	tests := []struct {
		name, args, want string
	}{
		{"two wrong properties", `{"id":7,"ship":{"street":"s","city":"c"},"items":[],"currency":"GBP","priority":"none"}`,
			`/currency: enum: GBP does not equal any of: [EUR USD]`},
		{"several unknown properties", `{"id":"o","ship":{"street":"s","city":"c","zip":"1","country":"no","a":1},"items":[],"currency":"EUR","priority":"low"}`,
			`/ship: unexpected additional properties ["a"]`},
		{"bad items", `{"id":"o","ship":{"street":"s","city":"c"},"items":[{"sku":"a","quantity":"2"},{"sku":1,"quantity":1.5}],"currency":"EUR","priority":"low"}`,
			`/items/0/quantity: type: 2 has type "string", want "integer"`},
		{"missing and wrong", `{"ship":{"street":1},"items":null,"currency":"EUR"}`,
			`/ship/street: type: 1 has type "integer", want "string"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 200 {
				if got := refusal(t, c, tt.args); got != tt.want {
					t.Fatalf("detail %q, want %q", got, tt.want)
				}
			}
		})
	}
}

type limited struct {
	Count  int              `json:"count"`
	Small  uint8            `json:"small,omitempty"`
	Scores map[string]int   `json:"scores,omitempty"`
	Items  []string         `json:"items,omitempty"`
	Nested *struct{ A int } `json:"nested,omitempty"`
}

// TestRulesTheHandWrittenCheckerHadAreKept proves that what the walk of
// tools/codec.go refused before docs/adr/0022 is still refused with one
// validator: integer against number (a fraction by the schema; an
// integral fraction, a tiny or a huge number by the decode into the Go
// type), the range of a sized integer, unknown properties of a closed
// object (also nested), and values of a map checked one by one with
// their path escaped (RFC 6901).
func TestRulesTheHandWrittenCheckerHadAreKept(t *testing.T) {
	c := tools.CodecFor[limited]()
	if c.Err() != nil {
		t.Fatal(c.Err())
	}
	tests := []struct {
		name, args, want string
	}{
		{"fraction for integer", `{"count":1.5}`, `/count: type: 1.5 has type "number", want "integer"`},
		{"integral fraction for an int", `{"count":2.0}`, `/count: cannot decode number 2.0 into int`},
		{"tiny fraction for an int", `{"count":1e-400}`, `/count: cannot decode number 1e-400 into int`},
		{"huge number", `{"count":1e400}`, `/: cannot decode number 1e400 into float64`},
		{"over an int's range", `{"count":1e30}`, `/count: cannot decode number 1e30 into int`},
		{"over a uint8's range", `{"count":1,"small":300}`, `/small: maximum: 300/1 is greater than 255.000000`},
		{"negative uint8", `{"count":1,"small":-1}`, `/small: minimum: -1/1 is less than 0.000000`},
		{"unknown property", `{"count":1,"other":true}`, `/: unexpected additional properties ["other"]`},
		{"unknown nested property", `{"count":1,"nested":{"A":1,"B":2}}`, `/nested: unexpected additional properties ["B"]`},
		{"map value, path escaped", `{"count":1,"scores":{"a/b~c":"x"}}`, `/scores/a~1b~0c: type: x has type "string", want "integer"`},
		{"item type", `{"count":1,"items":["a",2]}`, `/items/1: type: 2 has type "integer", want "string"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusal(t, c, tt.args); got != tt.want {
				t.Errorf("Decode(%s): detail %q, want %q", tt.args, got, tt.want)
			}
		})
	}
	if _, err := c.Decode(json.RawMessage(`{"count":3,"small":255,"scores":{"a":1},"items":["x"],"nested":{"A":2}}`)); err != nil {
		t.Errorf("valid arguments refused: %v", err)
	}
}

// TestRefusalReasonIsBounded proves the detail stays small when the
// library quotes a large refused value: the reason is cut at 512 bytes on
// a character boundary.
func TestRefusalReasonIsBounded(t *testing.T) {
	c := tools.CodecFor[limited]()
	big := strings.Repeat("é", 10000)
	got := refusal(t, c, `{"count":"`+big+`"}`)
	if len(got) > len("/count: ")+512+len("...") || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "/count: type: éé") {
		t.Errorf("detail of %d bytes: %.80q...", len(got), got)
	}
	if !json.Valid([]byte(`"` + got + `"`)) {
		t.Error("the cut detail is not valid UTF-8")
	}
}

// TestInputUsesTheDecodedValue proves the arguments are parsed once in the
// runner (docs/adr/0022): the policy's typed match returns the value the
// validation decoded, carried on the action, without decoding the JSON
// again; a value of another type is not used.
func TestInputUsesTheDecodedValue(t *testing.T) {
	valid, err := tools.Bind(lookupDef, nil, nil).Validate(json.RawMessage(`{"id":"INV-7"}`))
	if err != nil {
		t.Fatal(err)
	}
	action := policy.Action{Tool: "lookup_invoice", ActionID: "1/a", Arguments: json.RawMessage(`{"id":"not what was decoded"}`), Decoded: valid.Decoded}
	if in, matched, err := tools.Input(lookupDef, action); !matched || err != nil || in.ID != "INV-7" {
		t.Errorf("Input = %+v, %v, %v; want the decoded value INV-7", in, matched, err)
	}
	action.Decoded = policy.DecodedOf(struct{ ID string }{"other type"})
	if in, matched, err := tools.Input(lookupDef, action); !matched || err != nil || in.ID != "not what was decoded" {
		t.Errorf("Input with a value of another type = %+v, %v, %v; want the JSON decoded", in, matched, err)
	}
}

// TestSchemaValidator: a schema not generated from a Go type (an MCP
// server's) is checked by the same validator, with the same detail; a part
// reached through "$ref" is reported at its parent, in the library's words.
func TestSchemaValidator(t *testing.T) {
	var s jsonschema.Schema
	raw := `{"type":"object","properties":{"n":{"type":"integer"},"r":{"$ref":"#/$defs/x"}},"$defs":{"x":{"type":"string"}},"additionalProperties":false}`
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatal(err)
	}
	v, err := tools.NewSchemaValidator(&s)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ args, want string }{
		{`{"n":1.5,"b":1,"a":2}`, `/n: type: 1.5 has type "number", want "integer"`},
		{`{"n":1,"b":1,"a":2}`, `/: unexpected additional properties ["a"]`},
		{`{"r":5}`, `/: type: 5 has type "integer", want "string"`},
		{`[1`, `/: not valid JSON: unexpected end of JSON input`},
	}
	for _, tt := range tests {
		if _, err := v.Validate(json.RawMessage(tt.args)); err == nil || err.Error() != tt.want {
			t.Errorf("Validate(%s) = %v, want %s", tt.args, err, tt.want)
		}
	}
	if norm, err := v.Validate(json.RawMessage(` { "n" : 2 , "r" : "x" } `)); err != nil || string(norm) != `{"n":2,"r":"x"}` {
		t.Errorf("Validate = %s, %v", norm, err)
	}
	if norm, err := v.Validate(nil); err != nil || string(norm) != `{}` {
		t.Errorf("Validate(empty) = %s, %v", norm, err)
	}
}
