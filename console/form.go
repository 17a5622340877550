package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// outputForm is the part of the reconciliation form that records a tool's
// output: one input per property of the tool's output schema, or one JSON
// text area (Raw) when the schema is unknown or not a flat object.
type outputForm struct {
	Fields []formField
	Raw    bool
	// Note says why the form is a text area.
	Note string
	// Schema is the output schema, indented, for reading.
	Schema string
}

// formField is one input generated from a schema property.
type formField struct {
	// Name is the property; the input is named "out.<Name>".
	Name string
	// Kind is the input: text, integer, number, boolean, enum or json.
	Kind        string
	Description string
	Required    bool
	Nullable    bool
	// Options are an enum's values (their JSON text) and labels.
	Options []option
}

type option struct{ Value, Label string }

// schema is the subset of JSON Schema the tool schemas use
// (docs/protocol/30-tools.md, "Tool specs").
type schema struct {
	Type        json.RawMessage   `json:"type"`
	Description string            `json:"description"`
	Enum        []json.RawMessage `json:"enum"`
	Properties  json.RawMessage   `json:"properties"`
	Required    []string          `json:"required"`
}

func (s schema) types() []string {
	var one string
	if json.Unmarshal(s.Type, &one) == nil {
		return []string{one}
	}
	var many []string
	_ = json.Unmarshal(s.Type, &many)
	return many
}

func rawOutputForm(note string) outputForm { return outputForm{Raw: true, Note: note} }

// formFromSchema builds the output form of an output schema: an object with
// properties gets one input per property (nested objects and arrays a JSON
// text area each); anything else one JSON text area.
func formFromSchema(raw json.RawMessage) outputForm {
	f := outputForm{Schema: pretty(raw)}
	var root schema
	if err := json.Unmarshal(raw, &root); err != nil {
		f.Raw, f.Note = true, "The tool's output schema could not be read: type the output as JSON."
		return f
	}
	props, ok := objectMembers(root.Properties)
	if !contains(root.types(), "object") || !ok || len(props) == 0 {
		f.Raw = true
		return f
	}
	for _, p := range props {
		var ps schema
		_ = json.Unmarshal(p.value, &ps)
		ff := formField{Name: p.name, Description: ps.Description, Required: contains(root.Required, p.name)}
		types := ps.types()
		ff.Nullable = contains(types, "null")
		nonNull := without(types, "null")
		switch {
		case len(ps.Enum) > 0:
			ff.Kind = "enum"
			for _, e := range ps.Enum {
				if string(e) == "null" {
					continue
				}
				ff.Options = append(ff.Options, option{Value: string(e), Label: rawText(e)})
			}
		case len(nonNull) == 1 && nonNull[0] == "string":
			ff.Kind = "text"
		case len(nonNull) == 1 && nonNull[0] == "integer":
			ff.Kind = "integer"
		case len(nonNull) == 1 && nonNull[0] == "number":
			ff.Kind = "number"
		case len(nonNull) == 1 && nonNull[0] == "boolean":
			ff.Kind = "boolean"
		default:
			ff.Kind = "json"
		}
		f.Fields = append(f.Fields, ff)
	}
	return f
}

func without(list []string, s string) []string {
	var out []string
	for _, x := range list {
		if x != s {
			out = append(out, x)
		}
	}
	return out
}

// outputContent builds the output content from the form values the output
// form f produced. The runtime checks it against the tool's schema again
// (invalid_content); this only turns typed text into JSON.
func outputContent(f outputForm, v url.Values) (json.RawMessage, error) {
	if f.Raw {
		text := strings.TrimSpace(v.Get("out_json"))
		if text == "" {
			return nil, fmt.Errorf("type the tool's output as JSON")
		}
		if !json.Valid([]byte(text)) {
			return nil, fmt.Errorf("the output is not valid JSON")
		}
		return json.RawMessage(text), nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	n := 0
	for _, ff := range f.Fields {
		text := v.Get("out." + ff.Name)
		if ff.Kind != "text" {
			text = strings.TrimSpace(text)
		}
		var val string
		switch {
		case text == "" && ff.Kind == "text" && ff.Required && !ff.Nullable:
			return nil, fmt.Errorf("%s is required", ff.Name)
		case text == "" && !ff.Required:
			continue
		case text == "" && ff.Nullable:
			val = "null"
		case text == "":
			return nil, fmt.Errorf("%s is required", ff.Name)
		}
		if val == "" {
			switch ff.Kind {
			case "text":
				q, _ := json.Marshal(text)
				val = string(q)
			case "integer":
				if _, err := strconv.ParseInt(text, 10, 64); err != nil {
					return nil, fmt.Errorf("%s: want a whole number, got %q", ff.Name, text)
				}
				val = text
			case "number":
				if _, err := strconv.ParseFloat(text, 64); err != nil || !json.Valid([]byte(text)) {
					return nil, fmt.Errorf("%s: want a number, got %q", ff.Name, text)
				}
				val = text
			case "boolean":
				if text != "true" && text != "false" {
					return nil, fmt.Errorf("%s: want true or false, got %q", ff.Name, text)
				}
				val = text
			case "enum":
				ok := false
				for _, o := range ff.Options {
					ok = ok || o.Value == text
				}
				if !ok {
					return nil, fmt.Errorf("%s: %q is not one of the choices", ff.Name, text)
				}
				val = text
			default:
				if !json.Valid([]byte(text)) {
					return nil, fmt.Errorf("%s: not valid JSON", ff.Name)
				}
				var c bytes.Buffer
				_ = json.Compact(&c, []byte(text))
				val = c.String()
			}
		}
		if n > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(ff.Name)
		b.Write(name)
		b.WriteByte(':')
		b.WriteString(val)
		n++
	}
	b.WriteByte('}')
	return json.RawMessage(b.Bytes()), nil
}
