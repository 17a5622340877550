package inflight

import "testing"

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestQuietFollowsTheWorkInFlight: Quiet is closed with nothing in
// flight (the zero value too), open while work is, closed once the last
// piece is done; a channel taken while work was in flight is closed then,
// and work added later opens a new one.
func TestQuietFollowsTheWorkInFlight(t *testing.T) {
	var tr Tracker
	if !closed(tr.Quiet()) {
		t.Fatal("zero value: Quiet open with nothing in flight")
	}
	tr.Add()
	tr.Add()
	busy := tr.Quiet()
	if closed(busy) {
		t.Fatal("Quiet closed with two in flight")
	}
	tr.Done()
	if closed(busy) {
		t.Fatal("Quiet closed with one still in flight")
	}
	tr.Done()
	if !closed(busy) || !closed(tr.Quiet()) {
		t.Fatal("Quiet open with nothing in flight")
	}
	tr.Add()
	if closed(tr.Quiet()) {
		t.Fatal("Quiet closed after new work was added")
	}
	tr.Done()
}
