package console

import (
	"net/url"
	"strings"
	"testing"
)

// The output form follows the schema's properties in order, with one input
// kind per type, and builds the output JSON with typed values.
func TestOutputFormFromSchema(t *testing.T) {
	schema := `{"type":"object","properties":{"id":{"type":"string"},"amount":{"type":"integer","description":"cents"},"rate":{"type":"number"},"ok":{"type":"boolean"},"currency":{"type":"string","enum":["EUR","USD"]},"memo":{"type":["null","string"]},"tags":{"type":["null","array"],"items":{"type":"string"}}},"required":["id","amount","rate","ok","currency","tags"],"additionalProperties":false}`
	f := formFromSchema([]byte(schema))
	var got []string
	for _, ff := range f.Fields {
		got = append(got, ff.Name+":"+ff.Kind)
	}
	if want := "id:text amount:integer rate:number ok:boolean currency:enum memo:text tags:json"; strings.Join(got, " ") != want {
		t.Fatalf("fields %v, want %s", got, want)
	}
	v := url.Values{"out.id": {"PAY-1"}, "out.amount": {"1200"}, "out.rate": {"0.5"}, "out.ok": {"true"}, "out.currency": {`"EUR"`}, "out.memo": {""}, "out.tags": {` ["a", "b"] `}}
	out, err := outputContent(f, v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"PAY-1","amount":1200,"rate":0.5,"ok":true,"currency":"EUR","tags":["a","b"]}`; string(out) != want {
		t.Fatalf("output %s, want %s", out, want)
	}
	for _, bad := range []struct{ field, value, want string }{
		{"out.amount", "12.5", "amount: want a whole number"},
		{"out.rate", "abc", "rate: want a number"},
		{"out.currency", `"GBP"`, "not one of the choices"},
		{"out.id", "", "id is required"},
		{"out.tags", "[1,", "tags: not valid JSON"},
	} {
		w := url.Values{}
		for k, vs := range v {
			w[k] = vs
		}
		w.Set(bad.field, bad.value)
		if _, err := outputContent(f, w); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s=%q: %v, want %q", bad.field, bad.value, err, bad.want)
		}
	}
	// A nullable required field left empty is null.
	f2 := formFromSchema([]byte(`{"type":"object","properties":{"note":{"type":["null","string"]}},"required":["note"]}`))
	if out, err := outputContent(f2, url.Values{}); err != nil || string(out) != `{"note":null}` {
		t.Fatalf("nullable: %s, %v", out, err)
	}
}

// A schema that is not an object with properties, or none, gives the JSON
// text area.
func TestOutputFormRaw(t *testing.T) {
	for _, s := range []string{`{"type":"string"}`, `{"type":"object","additionalProperties":{"type":"integer"}}`, `not json`} {
		if f := formFromSchema([]byte(s)); !f.Raw {
			t.Errorf("%s: generated fields %v, want the JSON text area", s, f.Fields)
		}
	}
	f := rawOutputForm("no schema")
	if out, err := outputContent(f, url.Values{"out_json": {` {"id":"x"} `}}); err != nil || string(out) != `{"id":"x"}` {
		t.Fatalf("raw: %s, %v", out, err)
	}
	if _, err := outputContent(f, url.Values{"out_json": {`{`}}); err == nil {
		t.Fatal("invalid JSON accepted")
	}
}

// Fields keep the order of the object and render nested values as JSON.
func TestFieldsInOrder(t *testing.T) {
	got := fields([]byte(`{"b":"two","a":1,"c":{"x":[1,2]},"d":null}`))
	var names []string
	for _, f := range got {
		names = append(names, f.Name)
	}
	if strings.Join(names, ",") != "b,a,c,d" || got[0].Text != "two" || got[1].Text != "1" || !strings.Contains(got[2].JSON, "\"x\"") || got[3].Text != "null" {
		t.Fatalf("fields %+v", got)
	}
	if got := fields([]byte(`"plain"`)); len(got) != 1 || got[0].Text != "plain" {
		t.Fatalf("scalar %+v", got)
	}
}

// A message from the command API never carries the credential typed.
func TestRedact(t *testing.T) {
	if got := redact(`approver says token "abc123" is unknown`, "abc123"); strings.Contains(got, "abc123") {
		t.Fatal(got)
	}
}
