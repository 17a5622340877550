// Package tsdktest holds the Go side of the TypeScript SDK's tests
// (sdk/typescript, docs/typescript.md): cmd/tsdkharness starts an embedded
// nats-server and a real runner whose agent's tools are all served by
// workers outside the process, for the Node tests to run their worker
// against.
package tsdktest
