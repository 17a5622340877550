// Package protocoltest tests Weft's wire protocol from outside: its only
// client is the official nats CLI (github.com/nats-io/natscli v0.5.0), run
// against a `weft dev` built by TestMain, following docs/protocol.md step by
// step as a non-Go user would. It has no code besides its tests.
package protocoltest
