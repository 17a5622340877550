package projector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// cutDialer dials the server over TCP like the client's own dialer, and
// can cut the connection it dialed last: what the client writes on it
// after the cut reaches nobody, as bytes sent to a server that was
// SIGKILLed before it read them. The client notices nothing until the
// server goes away; the connections it dials after that are whole.
type cutDialer struct {
	mu  sync.Mutex
	cur *cutConn
}

func (d *cutDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 2*time.Second)
	if err != nil {
		return nil, err
	}
	cc := &cutConn{Conn: c}
	d.mu.Lock()
	d.cur = cc
	d.mu.Unlock()
	return cc, nil
}

// cut cuts the last connection dialed; the channel it returns is closed
// once a write was swallowed.
func (d *cutDialer) cut() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cur.mu.Lock()
	defer d.cur.mu.Unlock()
	d.cur.swallowed = make(chan struct{})
	return d.cur.swallowed
}

type cutConn struct {
	net.Conn
	mu        sync.Mutex
	swallowed chan struct{} // non-nil once cut
	closed    bool
}

func (c *cutConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.swallowed != nil {
		if !c.closed {
			c.closed = true
			close(c.swallowed)
		}
		c.mu.Unlock()
		return len(b), nil
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

// rewind stores checkpoint seq, as a projector that stopped after it wrote
// the views of the later messages but before it moved its checkpoint
// leaves it.
func rewind(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), projector.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(projector.Checkpoint{Schema: 1, Seq: seq})
	if _, err := kv.Put(context.Background(), projector.KeyCheckpoint, b); err != nil {
		t.Fatal(err)
	}
}

// docs/semantics.md §8 (work not recorded is derived again from the log,
// never dropped), for the read models: a projector whose read the server
// never answers — the server restarted after the request left the client
// and before it was answered — resumes from its checkpoint and follows
// the log again once the server is back, instead of waiting for the
// answer for good while it keeps renewing its lease (the views stayed
// stranded for minutes in a chaos run, the lease held by a projector that
// projected nothing). The read is the one of a run's inbox items when the
// projector, resuming, writes again what derives from a view whose last
// event it delivers again.
func TestSemantics8_TheProjectorResumesAfterAReadTheRestartedServerNeverAnswered(t *testing.T) {
	s := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, log := projtest.Histories(5, 3)
	appendLog(t, s.Log, log)
	head := lastSeq(t, s.JS)

	p1, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p1)
	waitSeq(t, p1, head)
	stop()
	rewind(t, s.JS, head-1)

	d := &cutDialer{}
	nc := s.Connect(nats.SetCustomDialer(d), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cuts := make(chan (<-chan struct{}), 1)
	var once sync.Once
	p2, err := projector.New(ctx, js, eventlog.New(js), projector.WithBeforeRead(func(string) {
		once.Do(func() { cuts <- d.cut() })
	}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- projector.Supervise(ctx, p2) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()
	// The last message is delivered again: its run's view holds it, so
	// the projector reads the run's inbox items to write them again. That
	// read leaves for a server that dies before it reads it.
	var swallowed <-chan struct{}
	select {
	case swallowed = <-cuts:
	case <-time.After(stallLimit):
		t.Fatal("the projector never read a run's inbox items")
	}
	select {
	case <-swallowed:
	case <-time.After(stallLimit):
		t.Fatal("the projector's read never left it")
	}
	s.Restart()

	// The log moves on once the server is back: the projector follows it.
	at := log[len(log)-1].At.Add(time.Second)
	if _, _, err := s.Log.Append(ctx, "after-restart", eventlog.Head{}, at, events.RunStarted{Agent: events.AgentRef{Name: "triage", Version: "1"}, Input: "x"}); err != nil {
		t.Fatal(err)
	}
	waitSeq(t, p2, lastSeq(t, s.JS))
}

// docs/semantics.md §8 (work not recorded is derived again from the log,
// never dropped), for the read models: a projector whose subscription to
// the log stops delivering — an iterator that never returns after a
// server restart, which no deadline of the projector's own bounds — is
// noticed by its watchdog once the log is ahead and nothing moved
// for its stall bound: it logs a warning naming both positions and
// resumes from its checkpoint, and the event appended meanwhile is
// projected.
func TestSemantics8_AProjectorWhoseLogSubscriptionStopsDeliveringResumes(t *testing.T) {
	s := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, log := projtest.Histories(6, 4)
	var stuck atomic.Bool // the next delivery never returns
	var once sync.Once
	entered := make(chan struct{}) // closed once a delivery is held
	var logs syncbuf.Buffer
	p, err := projector.New(ctx, s.JS, s.Log, projector.WithStallAfter(2*time.Second),
		projector.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		projector.WithFeedHook(func(ctx context.Context, _ eventlog.StreamEvent) {
			if stuck.Load() {
				once.Do(func() {
					stuck.Store(false)
					close(entered)
					<-ctx.Done()
				})
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- projector.Supervise(ctx, p) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()
	appendLog(t, s.Log, log)
	at := lastSeq(t, s.JS)
	waitSeq(t, p, at)
	stuck.Store(true)
	last := log[len(log)-1].At.Add(time.Second)
	if _, _, err := s.Log.Append(ctx, "after-stall", eventlog.Head{}, last, events.RunStarted{Agent: events.AgentRef{Name: "triage", Version: "1"}, Input: "x"}); err != nil {
		t.Fatal(err)
	}
	head := lastSeq(t, s.JS)
	// The subscription is held for good only once the hook was entered
	// (a pass the watchdog ended before the event reached the hook
	// resumes from the checkpoint and delivers it again).
	select {
	case <-entered:
	case <-time.After(stallLimit):
		t.Fatalf("the event appended after %d was not delivered within %s", at, stallLimit)
	}
	waitSeq(t, p, head)
	want := fmt.Sprintf("projector stalled: the log is ahead and nothing moved (no message delivered, no write answered); resuming from the checkpoint\" log=%d projected=%d", head, at)
	if got := logs.String(); !strings.Contains(got, want) {
		t.Fatalf("the projector logged\n%s\nwant a warning with %q", got, want)
	}
}

// docs/semantics.md §8 (work not recorded is derived again from the log,
// never dropped), for the read models: a slow but live projector is not a
// stalled one. Every direct get of a run's inbox items takes 100 ms (a
// loaded machine) and the projector resumes from a checkpoint behind the
// views it already wrote (a stop between the views and the checkpoint,
// which a watchdog stop itself leaves), so each run's last event repairs
// what derives from its view: a batch takes far longer than the stall
// bound, while messages are delivered and writes answered all along. The
// watchdog must not stop it (a stopped batch is redone from the same
// checkpoint, as slowly, and stopped again: it never caught up).
func TestSemantics8_ASlowBatchIsNotAStall(t *testing.T) {
	s := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, log := projtest.Histories(40, 20)
	appendLog(t, s.Log, log)
	head := lastSeq(t, s.JS)
	p1, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p1)
	waitSeq(t, p1, head)
	stop()
	rewind(t, s.JS, 0)

	var logs syncbuf.Buffer
	p2, err := projector.New(ctx, s.JS, s.Log, projector.WithStallAfter(2*time.Second),
		projector.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		projector.WithBeforeRead(func(string) { time.Sleep(100 * time.Millisecond) }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- projector.Supervise(ctx, p2) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	}()
	// It ends at the first stall, or once everything is projected.
	deadline := time.After(5 * stallLimit)
	for p2.Seq() < head && !strings.Contains(logs.String(), "projector stalled") {
		select {
		case <-deadline:
			t.Fatalf("a slow but live projector: at %d of %d after %s, no stall logged", p2.Seq(), head, 5*stallLimit)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if got := logs.String(); strings.Contains(got, "projector stalled") {
		t.Fatalf("a slow but live projector (at %d of %d) was stopped as stalled:\n%s", p2.Seq(), head, got)
	}
}

// holdDialer dials the server over TCP and, once armed, calls at on the
// first write that carries marker and holds that write a while before it
// lets it go to the server.
type holdDialer struct {
	marker []byte
	at     func()
	armed  atomic.Bool
}

func (d *holdDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &holdConn{Conn: c, d: d}, nil
}

type holdConn struct {
	net.Conn
	d *holdDialer
}

func (c *holdConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.d.marker) && c.d.armed.CompareAndSwap(true, false) {
		c.d.at()
		// Held so that the writer has seen its context end well before
		// the write can be answered.
		time.Sleep(200 * time.Millisecond)
	}
	return c.Conn.Write(b)
}

// docs/semantics.md §8 (work not recorded is derived again from the log,
// never dropped), for the read models: a pass that ends while a store
// write it sent is not answered yet — here the checkpoint's, its pass
// stopped as the write leaves — waits for that answer before Run returns
// (and gives the lease up, or the next pass starts), as the pipelines
// settle: when Run returned, the checkpoint the projector reports is the
// one stored, no write of the ended pass is left to land after it.
func TestSemantics8_APassThatEndsWaitsForTheWritesItSent(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	_, log := projtest.Histories(7, 4)
	appendLog(t, s.Log, log)

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	d := &holdDialer{marker: []byte("PUB $KV." + projector.BucketState + "." + projector.KeyCheckpoint + " "), at: stop}
	d.armed.Store(true)
	nc := s.Connect(nats.SetCustomDialer(d))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := projector.New(ctx, js, eventlog.New(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if d.armed.Load() {
		t.Fatal("the projector wrote no checkpoint")
	}
	if err := nc.Flush(); err != nil { // every write of the projector reached the server
		t.Fatal(err)
	}
	cp, err := p.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq == 0 || p.Seq() != cp.Seq {
		t.Fatalf("the pass stopped while its checkpoint write was in flight: Run returned reporting %d, the server stores %d", p.Seq(), cp.Seq)
	}
}
