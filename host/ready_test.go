package host_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
)

// STYLE.md principle 9 (goroutine lifetimes owned by one errgroup;
// everything stops on shutdown): host.Run owns its
// readiness check and the WithReady callback it calls. A callback still
// running when ctx ends is waited for: Run never returns with a goroutine
// of its own left running.
func TestRunWaitsForItsReadinessCallback(t *testing.T) {
	s := natstest.Start(t)
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	called := make(chan struct{})
	unblock := make(chan struct{})
	returned := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(ctx, s.Conn, s.JS, []*agent.Agent{desk}, host.WithReady(func() {
			defer close(returned)
			close(called)
			<-unblock
		}))
	}()
	select {
	case <-called:
	case err := <-done:
		t.Fatalf("host.Run: %v", err)
	}
	cancel()
	// The callback is released once Run waits for its group, the event
	// this test awaits (no channel says it: the stacks do); an old Run
	// that does not wait returns first.
	released := false
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("host.Run: %v", err)
			}
			select {
			case <-returned:
			default:
				close(unblock)
				t.Fatal("host.Run returned while its readiness callback was still running")
			}
			return
		default:
		}
		if !released && runWaitsForItsGroup() {
			close(unblock)
			released = true
		}
		time.Sleep(time.Millisecond)
	}
}

// runWaitsForItsGroup reports whether a goroutine is in host.Run, waiting
// for its errgroup.
func runWaitsForItsGroup() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "errgroup.(*Group).Wait") && strings.Contains(g, "weft/host.Run(") {
			return true
		}
	}
	return false
}
