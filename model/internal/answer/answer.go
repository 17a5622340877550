// Package answer adapts a typed final answer's JSON Schema to the providers'
// structured-output features, which accept only an object at the root.
//
// Wrap turns a non-object schema S into {"type":"object","properties":
// {"answer": S},"required":["answer"],"additionalProperties":false}, hoisting
// S's "$defs" and "definitions" to the new root so local references still
// resolve; Unwrap takes the answer back out of the model's {"answer": …}.
// Both adapters use it, so a typed answer means the same on either provider.
package answer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Key is the property that holds a wrapped answer.
const Key = "answer"

// Schema is an answer schema prepared for a provider.
type Schema struct {
	// Object is the schema as a JSON object, ready to send.
	Object map[string]any
	// Wrapped reports whether the original schema was wrapped under Key.
	Wrapped bool
}

// Wrap prepares schema for a provider. A schema whose "type" is "object" is
// sent as it is; any other schema (including one with no "type", such as a
// bare "anyOf") is wrapped under Key.
func Wrap(schema json.RawMessage) (Schema, error) {
	var obj map[string]any
	if err := json.Unmarshal(schema, &obj); err != nil {
		return Schema{}, fmt.Errorf("answer schema is not a JSON object: %w", err)
	}
	if obj == nil {
		return Schema{}, fmt.Errorf("answer schema is null")
	}
	if t, ok := obj["type"].(string); ok && t == "object" {
		return Schema{Object: obj}, nil
	}
	root := map[string]any{
		"type":                 "object",
		"properties":           map[string]any{Key: obj},
		"required":             []any{Key},
		"additionalProperties": false,
	}
	for _, k := range []string{"$defs", "definitions"} {
		if defs, ok := obj[k]; ok {
			root[k] = defs
			delete(obj, k)
		}
	}
	if s, ok := obj["$schema"]; ok {
		root["$schema"] = s
		delete(obj, "$schema")
	}
	return Schema{Object: root, Wrapped: true}, nil
}

// Unwrap returns the answer text the runtime decodes. For an unwrapped
// schema it returns text unchanged. For a wrapped one it returns the raw JSON
// of the Key property, exactly as the model wrote it; when text is not an
// object holding Key it returns text unchanged, so the runtime's decoder
// rejects it and asks for a corrected answer.
func Unwrap(text string, wrapped bool) string {
	if !wrapped {
		return text
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(text), &obj); err != nil {
		return text
	}
	v, ok := obj[Key]
	if !ok || len(obj) != 1 {
		return text
	}
	return string(bytes.TrimSpace(v))
}
