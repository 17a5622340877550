package answer

import (
	"encoding/json"
	"testing"
)

func TestWrap(t *testing.T) {
	cases := []struct {
		schema  string
		wrapped bool
		want    string
	}{
		{`{"type":"object","properties":{"a":{"type":"string"}}}`, false, `{"properties":{"a":{"type":"string"}},"type":"object"}`},
		{`{"type":"string"}`, true, `{"additionalProperties":false,"properties":{"answer":{"type":"string"}},"required":["answer"],"type":"object"}`},
		{`{"anyOf":[{"type":"string"},{"type":"object"}]}`, true, `{"additionalProperties":false,"properties":{"answer":{"anyOf":[{"type":"string"},{"type":"object"}]}},"required":["answer"],"type":"object"}`},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"array","items":{"$ref":"#/$defs/x"},"$defs":{"x":{"type":"integer"}}}`, true,
			`{"$defs":{"x":{"type":"integer"}},"$schema":"https://json-schema.org/draft/2020-12/schema","additionalProperties":false,"properties":{"answer":{"items":{"$ref":"#/$defs/x"},"type":"array"}},"required":["answer"],"type":"object"}`},
	}
	for _, c := range cases {
		s, err := Wrap(json.RawMessage(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(s.Object)
		if s.Wrapped != c.wrapped || string(got) != c.want {
			t.Errorf("Wrap(%s) = %v %s, want %v %s", c.schema, s.Wrapped, got, c.wrapped, c.want)
		}
	}
	for _, bad := range []string{`[1]`, `null`, `"x"`, `{`} {
		if _, err := Wrap(json.RawMessage(bad)); err == nil {
			t.Errorf("Wrap(%s) accepted", bad)
		}
	}
}

func TestUnwrap(t *testing.T) {
	cases := []struct {
		text    string
		wrapped bool
		want    string
	}{
		{`{"answer": [1, 2]}`, true, `[1, 2]`},
		{`{"answer":"x"}`, true, `"x"`},
		{`{"answer":1,"extra":2}`, true, `{"answer":1,"extra":2}`},
		{`[1]`, true, `[1]`},
		{`not json`, true, `not json`},
		{`{"answer":1}`, false, `{"answer":1}`},
	}
	for _, c := range cases {
		if got := Unwrap(c.text, c.wrapped); got != c.want {
			t.Errorf("Unwrap(%q, %v) = %q, want %q", c.text, c.wrapped, got, c.want)
		}
	}
}
