// Package inflight counts work in flight and tells when none is.
package inflight

import "sync"

// Tracker counts work in flight; Quiet's channel is closed while none is.
// Unlike a sync.WaitGroup it may gain work while someone waits for it to
// be idle. The zero value is ready to use.
type Tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

// Add counts one more piece of work in flight.
func (t *Tracker) Add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
}

// Done counts one piece of work as finished.
func (t *Tracker) Done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
}

// Quiet returns a channel closed once no work is in flight.
func (t *Tracker) Quiet() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return t.idle
}
