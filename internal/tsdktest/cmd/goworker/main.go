// Command goworker is the Go worker (package worker) as a process:
// tsdktest.GoWorker, the twin of the TypeScript worker's
// sdk/typescript/test/support/hanging-worker.js in the worker conformance
// suite (tsdktest.RunWorkerSuite, which runs it from its own test binary).
//
// Usage: goworker <nats url> [drain grace ms] [version].
package main

import (
	"fmt"
	"os"

	"github.com/weftrun/weft/internal/tsdktest"
)

func main() {
	if err := tsdktest.GoWorker(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(1)
	}
}
