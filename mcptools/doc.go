// Package mcptools turns the tools of a Model Context Protocol (MCP) server
// into Weft tools: an agent calls them like any tools.Tool, its policy sees
// their names and exact arguments, and every way a call can end is
// classified as docs/semantics.md §3 requires (docs/mcp.md has the table).
//
// # Reaching a server
//
// New(source) returns a Client for one server: Command(name, args...)
// starts a process and speaks MCP over its stdin and stdout; URL(endpoint)
// speaks streamable HTTP; Transport(describe, open) takes any
// github.com/modelcontextprotocol/go-sdk/mcp transport (the SDK's in-memory
// transports in tests). The Client opens its MCP session on first use and
// opens a new one when the last one broke; Close ends it (and the process).
//
// # Tools
//
// Client.Tools lists the server's tools and returns one tools.Tool per MCP
// tool, in the server's order: the name the model calls (the MCP name, or
// the one Rename gives), the server's description and input schema (the
// arguments are checked against it before policy runs, and sent to the
// server exactly as the policy saw them), and the output as the server
// returns it: {"content": [...], "structuredContent": ...}. A name outside
// the providers' shared grammar (tools.ValidName) is refused with an
// *InvalidToolName in a *BuildError, never changed silently: Rename it
// explicitly. Only picks a subset.
//
// # Classification
//
//   - a result with isError → tools.Explain with the result's text: a
//     definite failure the model sees;
//   - a failure before the tools/call request was sent (the server could not
//     be started, reached or initialized, or the session was already
//     closed) → tools.Explain;
//   - a JSON-RPC error answer method not found (-32601: the server has no
//     tools/call) → tools.Explain;
//   - everything after the request was sent — the context ended (the body's
//     timeout, a cancellation), the connection broke, an answer the client
//     cannot read, any other error answer (invalid params -32602 included:
//     the SDKs answer it after a body ran too) → tools.Uncertain with
//     evidence: the server may have acted.
//
// No MCP tool is replayable by default. ReplayReadOnly makes the tools the
// server annotates readOnlyHint replayable, ReplayIdempotent (opt-in as
// well) also those annotated idempotentHint. Annotations are hints from the
// server: use these options only for a server you trust.
//
// Every tools/call carries the action's idempotency key
// (tools.IdempotencyKey, stable across replays and recoveries) in its
// request _meta under MetaIdempotencyKey, so a cooperating server can
// deduplicate; a Weft agent served with package mcpserve does.
package mcptools
