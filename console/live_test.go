package console

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Streams of the same view share one poll; a new subscriber gets the last
// answer at once; the poll stops when the last subscriber leaves; more
// than maxWatches distinct views are refused.
func TestWatchesShareOnePollAndStop(t *testing.T) {
	var ws watches
	var calls atomic.Int64
	probe := func(context.Context) (string, error) { calls.Add(1); return "fp-1", nil }
	a, ok := ws.join("watch=run&run=r1", probe, time.Hour, time.Second)
	if !ok {
		t.Fatal("first join refused")
	}
	<-a.changed // the first poll, at once
	b, _ := ws.join("watch=run&run=r1", probe, time.Hour, time.Second)
	<-b.changed // the last answer, without a poll of its own
	if fp, err := b.state(); fp != "fp-1" || err != nil {
		t.Fatalf("state %q, %v", fp, err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("two subscribers of one view polled %d times, want 1", n)
	}
	var subs []*subscription
	for i := range maxWatches - 1 {
		s, ok := ws.join("watch=run&run=x"+strconv.Itoa(i), probe, time.Hour, time.Second)
		if !ok {
			t.Fatalf("view %d refused", i+2)
		}
		subs = append(subs, s)
	}
	if _, ok := ws.join("watch=run&run=one-too-many", probe, time.Hour, time.Second); ok {
		t.Fatalf("a view beyond %d was accepted", maxWatches)
	}
	c, ok := ws.join("watch=run&run=r1", probe, time.Hour, time.Second)
	if !ok {
		t.Fatal("a view already watched was refused at the bound")
	}
	subs = append(subs, c)
	a.leave()
	b.leave()
	for _, s := range subs {
		s.leave()
	}
	done := make(chan struct{})
	go func() { ws.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("polls still running after every subscriber left")
	}
}
