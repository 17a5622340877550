package tools_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/weftrun/weft/tools"
)

type currency string

func (currency) EnumValues() []string { return []string{"EUR", "USD"} }

type address struct {
	Street string `json:"street"`
	City   string `json:"city" jsonschema:"the city, in English"`
}

type item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

type order struct {
	ID       string    `json:"id" jsonschema:"the order id"`
	Ship     address   `json:"ship"`
	Items    []item    `json:"items"`
	Currency currency  `json:"currency"`
	Priority string    `json:"priority" enum:"low,high"`
	Rush     *bool     `json:"rush"`
	Note     string    `json:"note,omitempty"`
	Tags     []string  `json:"tags,omitempty" enum:"gift,fragile"`
	Backup   *currency `json:"backup,omitempty"`
	Weight   float64   `json:"weight,omitempty"`
	Level    int       `json:"level,omitempty" enum:"1,2,3"`
	//lint:ignore U1000 an unexported field is left out of the schema.
	internal string
}

// schemaOf decodes a codec's schema into a generic tree for assertions.
func schemaOf(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("schema is not a JSON object: %v\n%s", err, raw)
	}
	return m
}

func at(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = obj[p]
	}
	return cur
}

func TestSchemaGeneration(t *testing.T) {
	c := tools.CodecFor[order]()
	if err := c.Err(); err != nil {
		t.Fatal(err)
	}
	s := schemaOf(t, c.Schema())
	tests := []struct {
		name string
		path []string
		want string // JSON of the expected value
	}{
		{"object type", []string{"type"}, `"object"`},
		{"closed object", []string{"additionalProperties"}, `false`},
		{"required: plain fields only, in field order", []string{"required"}, `["id","ship","items","currency","priority"]`},
		{"description from jsonschema tag", []string{"properties", "id", "description"}, `"the order id"`},
		{"nested struct", []string{"properties", "ship", "type"}, `"object"`},
		{"nested struct required", []string{"properties", "ship", "required"}, `["street","city"]`},
		{"nested description", []string{"properties", "ship", "properties", "city", "description"}, `"the city, in English"`},
		{"nested closed", []string{"properties", "ship", "additionalProperties"}, `false`},
		{"slice of structs", []string{"properties", "items", "type"}, `["null","array"]`},
		{"slice items", []string{"properties", "items", "items", "properties", "quantity", "type"}, `"integer"`},
		{"Enumerated type", []string{"properties", "currency", "enum"}, `["EUR","USD"]`},
		{"enum tag", []string{"properties", "priority", "enum"}, `["low","high"]`},
		{"enum tag on slice items", []string{"properties", "tags", "items", "enum"}, `["gift","fragile"]`},
		{"numeric enum tag", []string{"properties", "level", "enum"}, `[1,2,3]`},
		{"optional pointer is nullable", []string{"properties", "rush", "type"}, `["null","boolean"]`},
		{"nullable Enumerated allows null", []string{"properties", "backup", "enum"}, `["EUR","USD",null]`},
		{"number", []string{"properties", "weight", "type"}, `"number"`},
		{"unexported field left out", []string{"properties", "internal"}, `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := json.Marshal(at(s, tt.path...))
			if string(got) != tt.want {
				t.Errorf("%v = %s, want %s", tt.path, got, tt.want)
			}
		})
	}
}

func TestSchemaUnavailable(t *testing.T) {
	type withChan struct {
		C chan int `json:"c"`
	}
	type withFunc struct {
		F func() `json:"f"`
	}
	type intKeys struct {
		M map[int]string `json:"m"`
	}
	errs := map[string]error{
		"chan":     tools.CodecFor[withChan]().Err(),
		"func":     tools.CodecFor[withFunc]().Err(),
		"int keys": tools.CodecFor[intKeys]().Err(),
	}
	for name, err := range errs {
		if err == nil {
			t.Errorf("%s: Err() = nil, want an error", name)
		}
	}
	if tools.CodecFor[withChan]().Schema() != nil {
		t.Error("a codec without a schema returned a schema")
	}
	type badEnum struct {
		B bool `json:"b" enum:"yes"`
	}
	if tools.CodecFor[badEnum]().Err() == nil {
		t.Error("enum tag on a bool field was accepted")
	}
}

func TestValidationDetails(t *testing.T) {
	c := tools.CodecFor[order]()
	const valid = `{"id":"o-1","ship":{"street":"Main 1","city":"Oslo"},"items":[{"sku":"a","quantity":2}],"currency":"EUR","priority":"low","rush":null}`
	tests := []struct {
		name       string
		args       string
		wantPath   string
		wantReason string
	}{
		{"missing required at root", `{}`, "", `required: missing properties: ["id" "ship" "items" "currency" "priority"]`},
		{"missing required nested", `{"id":"o","ship":{"street":"s"},"items":[],"currency":"EUR","priority":"low"}`, "/ship", `required: missing properties: ["city"]`},
		{"wrong type", `{"id":7,"ship":{"street":"s","city":"c"},"items":[],"currency":"EUR","priority":"low"}`, "/id", `type: 7 has type "integer", want "string"`},
		{"fraction for integer in slice", `{"id":"o","ship":{"street":"s","city":"c"},"items":[{"sku":"a","quantity":1.5}],"currency":"EUR","priority":"low"}`, "/items/0/quantity", `type: 1.5 has type "number", want "integer"`},
		{"unknown property nested", `{"id":"o","ship":{"street":"s","city":"c","zip":"1"},"items":[],"currency":"EUR","priority":"low"}`, "/ship", `unexpected additional properties ["zip"]`},
		{"enum", `{"id":"o","ship":{"street":"s","city":"c"},"items":[],"currency":"GBP","priority":"low"}`, "/currency", `enum: GBP does not equal any of: [EUR USD]`},
		{"enum in slice", `{"id":"o","ship":{"street":"s","city":"c"},"items":[],"currency":"EUR","priority":"low","tags":["gift","x"]}`, "/tags/1", `enum: x does not equal any of: [gift fragile]`},
		{"numeric enum", `{"id":"o","ship":{"street":"s","city":"c"},"items":[],"currency":"EUR","priority":"low","level":4}`, "/level", `enum: 4 does not equal any of: [1 2 3]`},
		{"not an object", `[1]`, "", `type: [1] has type "array", want "object"`},
		{"not JSON", `{"id":`, "", `not valid JSON: unexpected end of JSON input`},
		{"two values", `{} {}`, "", `not valid JSON: invalid character '{' after top-level value`},
		{"property name with slash is escaped", `{"id":"o","ship":{"street":"s","city":"c","a/b":{"x":1}},"items":[],"currency":"EUR","priority":"low"}`, "/ship", `unexpected additional properties ["a/b"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Decode(json.RawMessage(tt.args))
			var ve *tools.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Decode(%s) error = %v, want *ValidationError", tt.args, err)
			}
			if ve.Path != tt.wantPath || ve.Reason != tt.wantReason {
				t.Errorf("Decode(%s) = (path %q, reason %q), want (%q, %q)", tt.args, ve.Path, ve.Reason, tt.wantPath, tt.wantReason)
			}
		})
	}
	t.Run("valid decodes and normalizes", func(t *testing.T) {
		v, norm, err := c.Normalize(json.RawMessage("  " + valid + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if v.Ship.City != "Oslo" || v.Items[0].Quantity != 2 || v.Rush != nil {
			t.Errorf("decoded %+v", v)
		}
		if string(norm) != valid {
			t.Errorf("normalized = %s, want %s", norm, valid)
		}
	})
	t.Run("integral number fits the schema but not an int", func(t *testing.T) {
		// 2.0 is an integer to JSON Schema, but encoding/json refuses it
		// for an int: the detail says so and names the field.
		args := `{"id":"o","ship":{"street":"s","city":"c"},"items":[{"sku":"a","quantity":2.0}],"currency":"EUR","priority":"low"}`
		_, err := c.Decode(json.RawMessage(args))
		var ve *tools.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("error %v is not a *ValidationError", err)
		}
		if ve.Path != "/items/quantity" || ve.Reason != "cannot decode number 2.0 into int" {
			t.Errorf("got (path %q, reason %q)", ve.Path, ve.Reason)
		}
	})
	t.Run("error text", func(t *testing.T) {
		err := &tools.ValidationError{Path: "/a/0", Reason: "bad"}
		if err.Error() != "/a/0: bad" {
			t.Errorf("Error() = %q", err.Error())
		}
		if (&tools.ValidationError{Reason: "bad"}).Error() != "/: bad" {
			t.Errorf("root Error() = %q", (&tools.ValidationError{Reason: "bad"}).Error())
		}
	})
}

func TestEmptyArgumentsAreTheEmptyObject(t *testing.T) {
	type none struct{}
	c := tools.CodecFor[none]()
	if got := string(c.Schema()); got != `{"type":"object","properties":{},"additionalProperties":false}` {
		t.Errorf("schema of an empty struct = %s", got)
	}
	for _, in := range []string{"", " ", "null", "{}"} {
		_, norm, err := c.Normalize(json.RawMessage(in))
		if err != nil || string(norm) != "{}" {
			t.Errorf("Normalize(%q) = %s, %v; want {}, nil", in, norm, err)
		}
	}
}

const benchArgs = `{"id":"o-1","ship":{"street":"Main 1","city":"Oslo"},"items":[{"sku":"a","quantity":2},{"sku":"b","quantity":1}],"currency":"EUR","priority":"low","rush":null,"tags":["gift"]}`

// BenchmarkCodecFor measures schema generation, done once per Define.
func BenchmarkCodecFor(b *testing.B) {
	for b.Loop() {
		if tools.CodecFor[order]().Err() != nil {
			b.Fatal("no schema")
		}
	}
}

// BenchmarkNormalize measures checking and decoding one call's arguments
// (docs/adr/0003).
func BenchmarkNormalize(b *testing.B) {
	c := tools.CodecFor[order]()
	for b.Loop() {
		if _, _, err := c.Normalize(json.RawMessage(benchArgs)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnmarshalOnly is the floor BenchmarkNormalize is compared with.
func BenchmarkUnmarshalOnly(b *testing.B) {
	for b.Loop() {
		var o order
		if err := json.Unmarshal([]byte(benchArgs), &o); err != nil {
			b.Fatal(err)
		}
	}
}
