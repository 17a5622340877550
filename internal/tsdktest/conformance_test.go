package tsdktest_test

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/weftrun/weft/internal/tsdktest"
)

// envGoWorker makes this test binary run tsdktest.GoWorker instead of the
// tests: the Go worker process of TestWorkerConformance_Go.
const envGoWorker = "TSDKTEST_GOWORKER"

func TestMain(m *testing.M) {
	if os.Getenv(envGoWorker) == "1" {
		if err := tsdktest.GoWorker(os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "goworker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestWorkerConformance_Go runs the worker conformance suite against the
// Go worker (package worker), as a process.
func TestWorkerConformance_Go(t *testing.T) {
	tsdktest.RunWorkerSuite(t, tsdktest.Worker{Command: func(url string, graceMS int, version string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], url, strconv.Itoa(graceMS), version)
		cmd.Env = append(os.Environ(), envGoWorker+"=1")
		return cmd
	}})
}

// TestWorkerConformance_TypeScript runs the same suite against the
// TypeScript worker (sdk/typescript), as a Node process. It needs Node.js
// and the package's dependencies (go tool -modfile=devtools/go.mod task
// sdk-ts-deps): without them it fails, never skips.
func TestWorkerConformance_TypeScript(t *testing.T) {
	tsdktest.RunWorkerSuite(t, tsdktest.TypeScriptWorker(t, "../.."))
}
