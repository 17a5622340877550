package backoff

import (
	"context"
	"testing"
	"time"
)

// The delays double from the first up to the limit, and Reset starts over.
func TestDelaysDoubleUpToTheLimit(t *testing.T) {
	b := New(100*time.Millisecond, time.Second)
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("delay %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 100*time.Millisecond {
		t.Fatalf("after Reset: %v", got)
	}
	if got := New(time.Second, time.Millisecond).Next(); got != time.Second {
		t.Fatalf("limit below first: %v", got)
	}
}

// Wait returns the context's error when it ends first, without waiting
// the delay out.
func TestWaitEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New(time.Hour, time.Hour).Wait(ctx); err != context.Canceled {
		t.Fatalf("Wait: %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep 0: %v", err)
	}
}
