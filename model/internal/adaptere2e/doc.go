// Package adaptere2e holds the end-to-end test of the model adapters
// (docs/adr/0005-model-adapters-replay-and-typed-answers.md): a full agent
// run (two tool calls, one of them needing approval) driven by a real
// runner over a real in-process NATS server, with the model reached
// through each provider adapter (model/openai, model/anthropic) and the
// official SDK, against a fake server that speaks the provider's wire
// format. The package has no code of its own.
package adaptere2e
