package demo_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/demo"
)

// writes records each Write its caller made, apart.
type writes struct {
	mu sync.Mutex
	w  []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.w = append(w.w, string(p))
	return len(p), nil
}

// TestStartupStepsAreOneWrite (README's demo: every step it prints works
// verbatim): the line "Weft dev is running" and the steps after it reach
// the output in one Write, in plain and in secure mode, so that whoever
// waits for that line (a person, a test that then reads the steps, as
// cmd/weft's TestDevSecurePrintedStepsWorkVerbatim does) never reads the
// line without its steps. CI once read it between the role credentials'
// list and "Try it", and found no steps.
func TestStartupStepsAreOneWrite(t *testing.T) {
	for _, secure := range []bool{false, true} {
		name := "plain"
		if secure {
			name = "secure"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rctx, stop := context.WithCancel(ctx)
			out := &writes{}
			ready := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() {
				done <- demo.Run(rctx, demo.Options{DataDir: t.TempDir(), Listen: "0", Secure: secure, Stdout: out, Weft: "weft",
					Ready: func(string) { ready <- struct{}{} }})
			}()
			select {
			case <-ready:
			case err := <-done:
				t.Fatalf("demo.Run: %v", err)
			}
			stop()
			if err := <-done; err != nil {
				t.Fatalf("demo.Run: %v", err)
			}
			out.mu.Lock()
			defer out.mu.Unlock()
			for _, w := range out.w {
				if !strings.Contains(w, "Weft dev is running") {
					continue
				}
				if !strings.Contains(w, "Try it (another terminal") || !strings.Contains(w, "audit verify --file") {
					t.Fatalf("the write with \"Weft dev is running\" lacks the steps after it:\n%s", w)
				}
				return
			}
			t.Fatalf("no write says \"Weft dev is running\": %q", out.w)
		})
	}
}
