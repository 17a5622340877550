package mcptools

import (
	"fmt"
	"strings"
)

// BuildError is every problem Client.Tools found, in a stable order: the
// names given to options that the server does not list, then each tool in
// the server's order. errors.As finds each problem through Unwrap.
type BuildError struct {
	// Source is the server the tools came from.
	Source string
	// Problems are the problems, in order.
	Problems []error
}

// Error lists the problems, one per line after a summary line.
func (e *BuildError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mcptools: the tools of %s: %d problem(s):", e.Source, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *BuildError) Unwrap() []error { return e.Problems }

// InvalidToolName is an MCP tool whose Weft name breaks the model
// providers' shared grammar (tools.ValidName: 1-64 ASCII letters, digits,
// '_' or '-'). The name is never changed silently: map it with Rename.
type InvalidToolName struct {
	// Tool is the MCP name; Name the Weft name it would get (the same
	// unless renamed).
	Tool, Name string
}

// Error names the tool, the grammar and the option that maps it.
func (e *InvalidToolName) Error() string {
	if e.Tool != e.Name {
		return fmt.Sprintf("MCP tool %q renamed %q: must be 1-64 ASCII letters, digits, '_' or '-'", e.Tool, e.Name)
	}
	return fmt.Sprintf("MCP tool %q: the name must be 1-64 ASCII letters, digits, '_' or '-'; map it with mcptools.Rename(%q, \"new_name\")", e.Tool, e.Tool)
}

// DuplicateToolName is a Weft name two MCP tools of one server would share
// (through Rename).
type DuplicateToolName struct {
	// Name is the shared Weft name; First and Second the MCP names.
	Name, First, Second string
}

// Error names both tools.
func (e *DuplicateToolName) Error() string {
	return fmt.Sprintf("MCP tools %q and %q would both be called %q", e.First, e.Second, e.Name)
}

// UnknownTool is a name given to Only, Rename or Timeout that the server
// does not list.
type UnknownTool struct {
	// Option is "Only", "Rename" or "Timeout"; Name the MCP name given.
	Option, Name string
}

// Error names the option and the tool.
func (e *UnknownTool) Error() string {
	return fmt.Sprintf("mcptools.%s(%q): the server has no such tool", e.Option, e.Name)
}

// UnusableSchema is an MCP tool whose input schema is not a JSON Schema
// object this package can check arguments against.
type UnusableSchema struct {
	// Tool is the MCP name.
	Tool string
	// Err is why.
	Err error
}

// Error names the tool and the cause.
func (e *UnusableSchema) Error() string {
	return fmt.Sprintf("MCP tool %q: unusable input schema: %v", e.Tool, e.Err)
}

// Unwrap returns Err.
func (e *UnusableSchema) Unwrap() error { return e.Err }
