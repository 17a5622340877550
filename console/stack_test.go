package console_test

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/internal/consolestack"
)

// One `weft dev` stack (demo.Run: embedded NATS, runner, worker, projector,
// catalog and console) serves every test of this package
// (internal/consolestack). The console's browser tests drive the same
// stacks in headless Chromium from a module of their own, e2e/ui
// (docs/adr/0038).
var (
	stackOnce sync.Once
	stackErr  error
	shared    *stack
)

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
	for _, s := range []*stack{shared, secure, narrow} {
		if s != nil {
			s.Stop()
		}
	}
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
	stackOnce.Do(func() { shared, stackErr = startDev(false) })
	if stackErr != nil {
		t.Fatalf("dev stack: %v", stackErr)
	}
	return shared
}

// The secure stack: `weft dev --secure --require-identity`
// (consolestack.Dev). The console and the tests connect as the operator.
var (
	secureOnce sync.Once
	secureErr  error
	secure     *stack
)

// secureStack starts the secure stack once.
func secureStack(t *testing.T) *stack {
	t.Helper()
	secureOnce.Do(func() { secure, secureErr = startDev(true) })
	if secureErr != nil {
		t.Fatalf("secure dev stack: %v", secureErr)
	}
	return secure
}

// startDev runs demo.Run (weft dev), with roles when secure, and connects
// to it (as the operator when secure).
func startDev(secured bool) (*stack, error) {
	s, err := consolestack.Dev(secured)
	if err != nil {
		return nil, err
	}
	return &stack{s}, nil
}

// hostedStack serves agents with host.Run on an embedded NATS server of
// their own, and a console of its own that talks to it.
func hostedStack(name string, agents ...*agent.Agent) (*stack, error) {
	s, err := consolestack.Hosted(name, agents...)
	if err != nil {
		return nil, err
	}
	return &stack{s}, nil
}
