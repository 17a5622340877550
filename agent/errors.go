package agent

import (
	"fmt"
	"strings"
)

// BuildError is every problem Build found in a definition, in a stable
// order (the order of Build's documentation). Each problem is one of the
// typed errors of this package; errors.As finds any of them through
// BuildError's Unwrap.
type BuildError struct {
	// Agent is the name of the agent whose definition was built.
	Agent string
	// Problems are the problems, in order.
	Problems []error
}

// Error lists the problems, one per line after a summary line.
func (e *BuildError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent %q: %d problem(s):", e.Agent, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *BuildError) Unwrap() []error { return e.Problems }

// InvalidIdentity is an agent name or version outside its grammar.
type InvalidIdentity struct {
	// Field is "name" or "version".
	Field string
	// Value is the refused value.
	Value string
	// Rule is the grammar it breaks.
	Rule string
}

// Error returns "agent <field> <value>: must be <rule>".
func (e *InvalidIdentity) Error() string {
	return fmt.Sprintf("agent %s %q: must be %s", e.Field, e.Value, e.Rule)
}

// MissingPart is a nil model or policy: every agent needs both; there is no
// implicit allow.
type MissingPart struct {
	// Part is "model" or "policy".
	Part string
}

// Error returns "<part> is missing".
func (e *MissingPart) Error() string {
	return fmt.Sprintf("%s is missing: every agent needs one", e.Part)
}

// InvalidLimit is an agent limit outside its allowed range.
type InvalidLimit struct {
	// Option is the option that set it, such as "WithMaxTurns".
	Option string
	// Value is the refused value as written, such as "0" or "-1ms".
	Value string
	// Range is the allowed range, such as "1..9007199254740991".
	Range string
}

// Error returns "<option>(<value>): out of range <range>".
func (e *InvalidLimit) Error() string {
	return fmt.Sprintf("%s(%s): out of range %s", e.Option, e.Value, e.Range)
}

// InvalidToolLimit is a tool setting outside its allowed range.
type InvalidToolLimit struct {
	// Tool is the tool's name.
	Tool string
	// Option is the setting, such as "tools.WithReplay".
	Option string
	// Value is the refused value as written.
	Value string
	// Range is the allowed range, such as "1..100".
	Range string
}

// Error returns "tool <name>: <option>(<value>): out of range <range>".
func (e *InvalidToolLimit) Error() string {
	return fmt.Sprintf("tool %q: %s(%s): out of range %s", e.Tool, e.Option, e.Value, e.Range)
}

// InvalidToolName is a tool whose name breaks the providers' grammar (see
// tools.ValidName).
type InvalidToolName struct {
	// Index is the tool's position in the agent's tool list.
	Index int
	// Name is the refused name.
	Name string
}

// Error names the tool and the grammar.
func (e *InvalidToolName) Error() string {
	return fmt.Sprintf("tool #%d name %q: must be 1-64 ASCII letters, digits, '_' or '-'", e.Index, e.Name)
}

// DuplicateToolName is a tool name used by more than one tool of an agent.
type DuplicateToolName struct {
	// Name is the shared name.
	Name string
	// First and Second are the positions of the first tool with the name
	// and of this later one.
	First, Second int
}

// Error names the tool and both positions.
func (e *DuplicateToolName) Error() string {
	return fmt.Sprintf("tool %q: tools #%d and #%d share the name", e.Name, e.First, e.Second)
}

// NilTool is a nil entry in the agent's tool list.
type NilTool struct {
	// Index is the nil entry's position.
	Index int
}

// Error names the position.
func (e *NilTool) Error() string { return fmt.Sprintf("tool #%d is nil", e.Index) }

// ToolSchemaUnavailable is a tool whose input or output type has no JSON
// Schema (a channel, a function, a map with non-string keys, a cycle).
type ToolSchemaUnavailable struct {
	// Tool is the tool's name.
	Tool string
	// Err is why the schema could not be generated.
	Err error
}

// Error names the tool and the cause.
func (e *ToolSchemaUnavailable) Error() string {
	return fmt.Sprintf("tool %q: no JSON Schema: %v", e.Tool, e.Err)
}

// Unwrap returns Err.
func (e *ToolSchemaUnavailable) Unwrap() error { return e.Err }

// AnswerSchemaUnavailable is a typed final answer (WithTypedAnswer) whose
// type has no JSON Schema.
type AnswerSchemaUnavailable struct {
	// Err is why the schema could not be generated.
	Err error
}

// Error names the cause.
func (e *AnswerSchemaUnavailable) Error() string {
	return fmt.Sprintf("WithTypedAnswer: no JSON Schema: %v", e.Err)
}

// Unwrap returns Err.
func (e *AnswerSchemaUnavailable) Unwrap() error { return e.Err }

// InvalidApprover is a nil approver, an approver without a name, or two
// approvers with the same name in WithApprovers.
type InvalidApprover struct {
	// Index is the approver's position in WithApprovers.
	Index int
	// Name is its name ("" when nil or unnamed).
	Name string
	// Problem is "nil", "unnamed" or "duplicate".
	Problem string
}

// Error names the approver and the problem.
func (e *InvalidApprover) Error() string {
	return fmt.Sprintf("WithApprovers: approver #%d %q: %s", e.Index, e.Name, e.Problem)
}
