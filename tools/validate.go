package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// validator is the one validator of a Codec's values (a tool's arguments, a
// typed answer, a reconciliation's content): github.com/google/jsonschema-go
// over the schema resolved once, when the Codec is made (docs/adr/0022). The
// library alone decides whether a value fits.
//
// When it refuses a value, explain chooses which of the library's refusals
// the detail names, and where. The detail is recorded in the log and read
// by the model, so the same value must always give the same text; the
// library walks an object's properties in Go map order, so on its own it
// names a different problem on different calls when a value has several.
type validator struct {
	root *jsonschema.Schema
	// parts is the resolved form of the root and of every schema under its
	// properties, items and additionalProperties: explain asks the library
	// about one part of a refused value at a time.
	parts map[*jsonschema.Schema]*jsonschema.Resolved
}

// maxReason bounds a refusal's reason (bytes): the library quotes the
// refused value, which a model can make as large as its arguments.
const maxReason = 512

func newValidator(s *jsonschema.Schema) (*validator, error) {
	root, err := s.Resolve(nil)
	if err != nil {
		return nil, err
	}
	v := &validator{root: s, parts: map[*jsonschema.Schema]*jsonschema.Resolved{s: root}}
	var add func(*jsonschema.Schema)
	add = func(s *jsonschema.Schema) {
		subs := []*jsonschema.Schema{s.Items}
		if !closed(s.AdditionalProperties) {
			subs = append(subs, s.AdditionalProperties)
		}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			subs = append(subs, s.Properties[name])
		}
		for _, sub := range subs {
			if sub == nil || v.parts[sub] != nil {
				continue
			}
			// A part that does not resolve on its own (a reference into
			// the root) is not looked into: its refusal is its parent's.
			if r, err := sub.Resolve(nil); err == nil {
				v.parts[sub] = r
				add(sub)
			}
		}
	}
	add(s)
	return v, nil
}

// validate returns nil when the library accepts value (a JSON value as
// encoding/json decodes it into an any), else why not.
func (v *validator) validate(value any) *ValidationError {
	if v.parts[v.root].Validate(value) == nil {
		return nil
	}
	return v.explain(value, v.root, "")
}

// explain returns the refusal of value by s (which the library refuses) in
// a fixed order: an object's properties by name, an array's items by
// index, the first part the library refuses is explained in its turn; a
// value whose parts all fit is refused for itself, with the library's
// reason at its own path. An unknown property of a closed object is
// reported alone, the first by name.
func (v *validator) explain(value any, s *jsonschema.Schema, path string) *ValidationError {
	switch x := value.(type) {
	case map[string]any:
		names := slices.Sorted(maps.Keys(x))
		var unknown []string
		for _, name := range names {
			sub, known := s.Properties[name]
			if !known {
				if closed(s.AdditionalProperties) {
					unknown = append(unknown, name)
					continue
				}
				sub = s.AdditionalProperties
			}
			if r := v.parts[sub]; r != nil && r.Validate(x[name]) != nil {
				return v.explain(x[name], sub, pointer(path, name))
			}
		}
		if len(unknown) > 1 {
			// The library lists every unknown property, in map order:
			// ask it about the first one alone.
			only := make(map[string]any, len(x))
			for name, val := range x {
				if _, known := s.Properties[name]; known || name == unknown[0] {
					only[name] = val
				}
			}
			value = only
		}
	case []any:
		if r := v.parts[s.Items]; r != nil {
			for i, item := range x {
				if r.Validate(item) != nil {
					return v.explain(item, s.Items, pointer(path, strconv.Itoa(i)))
				}
			}
		}
	}
	r := v.parts[s]
	if r == nil {
		return &ValidationError{Path: path, Reason: "does not fit the schema"}
	}
	return &ValidationError{Path: path, Reason: reason(r.Validate(value))}
}

// reason is the library's own words for a refusal: the innermost error,
// without the schema locations it wraps it in (the detail names the path
// into the value instead), cut at maxReason bytes.
func reason(err error) string {
	if err == nil {
		// Cannot happen: explain asks only about a refused value.
		return "does not fit the schema"
	}
	for {
		inner := errors.Unwrap(err)
		if inner == nil {
			break
		}
		err = inner
	}
	text := err.Error()
	if len(text) <= maxReason {
		return text
	}
	cut := maxReason
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + "..."
}

// closed reports whether s is the schema that allows nothing, {"not":{}},
// which is how additionalProperties false is held.
func closed(s *jsonschema.Schema) bool {
	return s != nil && s.Not != nil && reflect.ValueOf(*s.Not).IsZero()
}

// parseJSON decodes data, the trimmed arguments, into the generic value the
// validator reads.
func parseJSON(data []byte) (any, *ValidationError) {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, &ValidationError{Reason: "not valid JSON: " + se.Error()}
		}
		// A number encoding/json cannot hold (1e400).
		return nil, decodeError(err)
	}
	if path, name, ok := duplicateProperty(data); ok {
		return nil, &ValidationError{Path: path, Reason: fmt.Sprintf("duplicate property %q", name)}
	}
	return v, nil
}

// duplicateProperty finds the first object in data, valid JSON, that names
// a property twice, and returns the JSON Pointer of the second occurrence
// and the name. encoding/json keeps the last of them, other readers (a
// console, a policy engine in another language) the first: arguments
// that mean two things are refused, so that what a person approves is
// what the body gets (docs/semantics.md §4).
func duplicateProperty(data []byte) (path, name string, found bool) {
	path, name, found, _ = duplicateIn(json.NewDecoder(bytes.NewReader(data)), "")
	return path, name, found
}

// duplicateIn reads one value, at pointer path, from dec: see
// duplicateProperty. (encoding/json refused data nested deeper than it
// can read, so the recursion is bounded.)
func duplicateIn(dec *json.Decoder, path string) (string, string, bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", "", false, err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return "", "", false, err
			}
			k, _ := kt.(string)
			if seen[k] {
				return pointer(path, k), k, true, nil
			}
			seen[k] = true
			if p, n, ok, err := duplicateIn(dec, pointer(path, k)); ok || err != nil {
				return p, n, ok, err
			}
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if p, n, ok, err := duplicateIn(dec, path+"/"+strconv.Itoa(i)); ok || err != nil {
				return p, n, ok, err
			}
		}
	default:
		return "", "", false, nil
	}
	_, err = dec.Token() // the closing delimiter
	return "", "", false, err
}

// SchemaValidator checks JSON values against a JSON Schema that was not
// generated from a Go type, such as an MCP server's tool input schema,
// with the one validator a Codec uses (docs/adr/0022): jsonschema-go's,
// the schema resolved once, and the same deterministic detail on refusal.
// (Parts of a schema that only resolve within it, through "$ref", are
// not looked into: their refusal is reported at their parent, in the
// library's words.)
type SchemaValidator struct{ v *validator }

// NewSchemaValidator resolves s for validation; s must not be modified
// afterwards. It returns the library's error for a schema it cannot
// resolve.
func NewSchemaValidator(s *jsonschema.Schema) (*SchemaValidator, error) {
	v, err := newValidator(s)
	if err != nil {
		return nil, err
	}
	return &SchemaValidator{v: v}, nil
}

// Validate parses data once (empty data or null read as {}), checks it
// against the schema and returns its normalized JSON: the same value
// compacted. A value that does not fit gives a *ValidationError.
func (sv *SchemaValidator) Validate(data json.RawMessage) (json.RawMessage, error) {
	trimmed := trimValue(data)
	generic, verr := parseJSON(trimmed)
	if verr != nil {
		return nil, verr
	}
	if verr := sv.v.validate(generic); verr != nil {
		return nil, verr
	}
	return compact(trimmed)
}
