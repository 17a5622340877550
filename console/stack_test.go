package console_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/weftrun/weft/internal/consolestack"
)

// One `weft dev` stack (demo.Run: embedded NATS, runner, worker, projector,
// catalog and console) serves every test of this package
// (internal/consolestack). The console's browser tests drive the same
// stacks in headless Chromium from a module of their own, e2e/ui
// (docs/adr/0038). Each stack starts once, when a test first asks for it.
var stacks consolestack.Shared

// stack is a running stack; the tests of this package add their own
// readers and commands to it.
type stack struct{ *consolestack.Stack }

var (
	action     = consolestack.Action
	cardKey    = consolestack.CardKey
	weftBinary = consolestack.WeftBinary
)

func TestMain(m *testing.M) {
	code := m.Run()
	stacks.Stop()
	// No goroutine of the console outlives its tests
	// once the shared stacks are stopped.
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// devStack starts the shared stack once.
func devStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "dev", func() (*consolestack.Stack, error) { return consolestack.Dev(false) })}
}

// secureStack starts the secure stack once: `weft dev --secure
// --require-identity` (consolestack.Dev). The console and the tests
// connect as the operator.
func secureStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "secure dev", func() (*consolestack.Stack, error) { return consolestack.Dev(true) })}
}
