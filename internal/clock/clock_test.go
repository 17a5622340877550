package clock_test

import (
	"testing"
	"time"

	"github.com/weftrun/weft/internal/clock"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(c <-chan time.Time) (time.Time, bool) {
	select {
	case t := <-c:
		return t, true
	default:
		return time.Time{}, false
	}
}

// A Fake's ticker fires on the Advance that reaches its period, once per
// Advance however many periods passed, and never after Stop.
func TestFakeTickerFiresOnAdvance(t *testing.T) {
	f := clock.NewFake(start)
	tk := f.NewTicker(time.Second)
	f.Advance(999 * time.Millisecond)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("fired before its period")
	}
	f.Advance(time.Millisecond)
	if at, ok := fired(tk.C()); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("fired %v at %v, want at %v", ok, at, start.Add(time.Second))
	}
	f.Advance(3 * time.Second)
	if _, ok := fired(tk.C()); !ok {
		t.Fatal("did not fire after three periods")
	}
	if _, ok := fired(tk.C()); ok {
		t.Fatal("fired twice for one Advance")
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := fired(tk.C()); ok {
		t.Fatal("fired after Stop")
	}
	if !f.Now().Equal(start.Add(time.Hour+4*time.Second)) || f.Since(start) != time.Hour+4*time.Second {
		t.Fatalf("now %v", f.Now())
	}
}

// A Fake's timer fires once, on the Advance that reaches it.
func TestFakeAfterFiresOnce(t *testing.T) {
	f := clock.NewFake(start)
	c := f.After(time.Second)
	if n, _ := f.Waiters(); n != 1 {
		t.Fatalf("%d waiters, want 1", n)
	}
	f.Advance(time.Second)
	if _, ok := fired(c); !ok {
		t.Fatal("did not fire")
	}
	f.Advance(time.Second)
	if _, ok := fired(c); ok {
		t.Fatal("fired twice")
	}
	if n, _ := f.Waiters(); n != 0 {
		t.Fatalf("%d waiters, want 0", n)
	}
}
