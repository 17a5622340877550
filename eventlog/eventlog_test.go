package eventlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

// ev returns a small event distinguishable by turn.
func ev(turn int64) events.Event { return events.ModelRequested{Turn: turn, Incarnation: 1} }

func turnOf(t testing.TB, env events.Envelope) int64 {
	t.Helper()
	e, err := env.Event()
	if err != nil {
		t.Fatalf("decode %s: %v", env.ID, err)
	}
	return e.(events.ModelRequested).Turn
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t testing.TB, l *eventlog.Log, run string, head eventlog.Head, evs ...events.Event) eventlog.Head {
	t.Helper()
	_, h, err := l.Append(ctxT(t), run, head, t0, evs...)
	if err != nil {
		t.Fatalf("append %s at %d: %v", run, head.Version, err)
	}
	return h
}

func TestAppendLoadOrderAndChain(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	h := mustAppend(t, s.Log, "r1", eventlog.Head{}, ev(1), ev(2))
	mustAppend(t, s.Log, "other", eventlog.Head{}, ev(100))
	h3 := mustAppend(t, s.Log, "r1", h, ev(3))
	h = mustAppend(t, s.Log, "r1", h3, ev(4), ev(5), ev(6))

	envs, head, err := s.Log.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if head != h {
		t.Fatalf("Load head %+v, Append head %+v", head, h)
	}
	if len(envs) != 6 {
		t.Fatalf("loaded %d events, want 6", len(envs))
	}
	prev := ""
	for i, env := range envs {
		if env.Version != uint64(i+1) || turnOf(t, env) != int64(i+1) || env.Run != "r1" {
			t.Fatalf("event %d: version %d turn %d run %s", i, env.Version, turnOf(t, env), env.Run)
		}
		if env.Prev != prev {
			t.Fatalf("event %d: prev %q, want %q", i, env.Prev, prev)
		}
		if !env.Recorded.Equal(t0) || env.Type != events.NameModelRequested || env.Schema != 1 {
			t.Fatalf("event %d: envelope %+v", i, env)
		}
		prev = env.Hash()
	}
	if head.Hash != prev || head.Version != 6 {
		t.Fatalf("head %+v, want version 6 hash %s", head, prev)
	}
	got, err := s.Log.Head(ctx, "r1")
	if err != nil || got != head {
		t.Fatalf("Head = %+v, %v; want %+v", got, err, head)
	}

	// LoadAfter returns the tail only.
	tail, head2, err := s.Log.LoadAfter(ctx, "r1", h3)
	if err != nil {
		t.Fatal(err)
	}
	if len(tail) != 3 || tail[0].Version != 4 || tail[0].Prev != h3.Hash || head2 != head {
		t.Fatalf("LoadAfter: %d events, head %+v", len(tail), head2)
	}

	// An unknown run is empty.
	none, zero, err := s.Log.Load(ctx, "nobody")
	if err != nil || len(none) != 0 || !zero.IsZero() {
		t.Fatalf("Load(nobody) = %d, %+v, %v", len(none), zero, err)
	}
}

func TestAppendConflict(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	h1 := mustAppend(t, s.Log, "r", eventlog.Head{}, ev(1))
	h2 := mustAppend(t, s.Log, "r", h1, ev(2))

	// A second writer still at h1 loses, learning the current head.
	_, _, err := s.Log.Append(ctx, "r", h1, t0, ev(99))
	var ce *eventlog.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("append at stale head: %v, want *ConflictError", err)
	}
	if ce.Current != h2 || ce.Expected != h1 || ce.Run != "r" {
		t.Fatalf("conflict %+v, want current %+v", ce, h2)
	}
	if weft.ErrorCode(err) != weft.CodeConflict {
		t.Fatalf("code %q, want conflict", weft.ErrorCode(err))
	}
	// Creating an existing run conflicts too.
	if _, _, err := s.Log.Append(ctx, "r", eventlog.Head{}, t0, ev(99)); !errors.As(err, &ce) {
		t.Fatalf("append at zero head of existing run: %v", err)
	}
	envs, _, err := s.Log.Load(ctx, "r")
	if err != nil || len(envs) != 2 {
		t.Fatalf("after conflicts: %d events, %v", len(envs), err)
	}
}

func TestRunIDValidation(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", "é", strings.Repeat("x", 129)} {
		_, _, err := s.Log.Append(ctx, bad, eventlog.Head{}, t0, ev(1))
		if weft.ErrorCode(err) != weft.CodeInvalidName {
			t.Errorf("Append(%q): %v, want invalid_name", bad, err)
		}
		if _, _, err := s.Log.Load(ctx, bad); weft.ErrorCode(err) != weft.CodeInvalidName {
			t.Errorf("Load(%q): %v, want invalid_name", bad, err)
		}
	}
	for _, good := range []string{"a", "A-b_9", strings.Repeat("x", 128)} {
		if err := eventlog.CheckRun(good); err != nil {
			t.Errorf("CheckRun(%q) = %v", good, err)
		}
	}
}

// TestLostAckRetry: the first publish lands but its acknowledgement is lost;
// Append retries and must neither store the decision twice nor report a
// conflict.
func TestLostAckRetry(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	lost := 0
	l := eventlog.New(s.JS, eventlog.WithPublishWrapper(func(next eventlog.PublishFunc) eventlog.PublishFunc {
		return func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
			ack, err := next(ctx, m)
			if err == nil && lost < 2 {
				lost++
				return nil, nats.ErrTimeout
			}
			return ack, err
		}
	}))
	// Lost ack on creating the run, then on extending it.
	_, h1, err := l.Append(ctx, "r", eventlog.Head{}, t0, ev(1), ev(2))
	if err != nil {
		t.Fatalf("append with lost ack: %v", err)
	}
	_, h2, err := l.Append(ctx, "r", h1, t0, ev(3))
	if err != nil {
		t.Fatalf("second append with lost ack: %v", err)
	}
	if lost != 2 {
		t.Fatalf("lost %d acks, want 2", lost)
	}
	envs, head, err := s.Log.Load(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if len(envs) != 3 || head != h2 {
		t.Fatalf("stored %d events head %+v, want 3 and %+v", len(envs), head, h2)
	}
	info, err := s.JS.Stream(ctx, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Fatalf("stream holds %d messages, want 2", n)
	}
}

// TestLostAckThenOtherWriter: our append landed with a lost ack and another
// writer extended the run before the retry; the retry still reports success.
func TestLostAckThenOtherWriter(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	first := true
	l := eventlog.New(s.JS, eventlog.WithPublishWrapper(func(next eventlog.PublishFunc) eventlog.PublishFunc {
		return func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
			ack, err := next(ctx, m)
			if err == nil && first {
				first = false
				// Another writer, having read our event, appends on top.
				if _, _, err := s.Log.Append(ctx, "r", eventlog.Head{Version: 1, Seq: ack.Sequence, Hash: mustHead(t, s, "r").Hash}, t0, ev(2)); err != nil {
					t.Errorf("other writer: %v", err)
				}
				return nil, nats.ErrTimeout
			}
			return ack, err
		}
	}))
	envs, h, err := l.Append(ctx, "r", eventlog.Head{}, t0, ev(1))
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if h.Version != 1 || envs[0].Version != 1 {
		t.Fatalf("head %+v", h)
	}
	all, _, err := s.Log.Load(ctx, "r")
	if err != nil || len(all) != 2 {
		t.Fatalf("%d events, %v", len(all), err)
	}
}

func mustHead(t *testing.T, s *natstest.Server, run string) eventlog.Head {
	h, err := s.Log.Head(context.Background(), run)
	if err != nil {
		t.Errorf("head: %v", err)
	}
	return h
}

// TestLoadPages: a history longer than one direct-get batch is read in
// several requests, completely and in order.
func TestLoadPages(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	var want eventlog.Head
	for i := 1; i <= 7; i++ {
		want = mustAppend(t, s.Log, "paged", want, ev(int64(i)))
		mustAppend(t, s.Log, fmt.Sprintf("noise%d", i), eventlog.Head{}, ev(0))
	}
	for _, batch := range []int{1, 2, 3, 7, 8} {
		l := eventlog.New(s.JS, eventlog.WithLoadBatch(batch))
		envs, head, err := l.Load(ctx, "paged")
		if err != nil {
			t.Fatal(err)
		}
		if len(envs) != 7 || head != want {
			t.Fatalf("batch %d: %d events, head %+v; want 7, %+v", batch, len(envs), head, want)
		}
		for i, env := range envs {
			if turnOf(t, env) != int64(i+1) {
				t.Fatalf("batch %d: event %d has turn %d", batch, i, turnOf(t, env))
			}
		}
	}
}

// TestAppendTooLarge: a decision over the server's max payload is refused
// with payload_too_large and nothing is written.
func TestAppendTooLarge(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	big := events.AnswerRejected{Turn: 1, Reason: strings.Repeat("x", natsnode.MaxPayload+1)}
	_, _, err := s.Log.Append(ctx, "big", eventlog.Head{}, t0, big)
	if weft.ErrorCode(err) != weft.CodePayloadTooLarge {
		t.Fatalf("Append over max payload: %v, want payload_too_large", err)
	}
	if h, err := s.Log.Head(ctx, "big"); err != nil || !h.IsZero() {
		t.Fatalf("head after refused append: %+v, %v", h, err)
	}
}

// TestLoadAndSubscribeStream: loading a run of 200 single-event decisions
// and following the whole log take a handful of client requests, not one
// per event (both stream efficiently). The client's outgoing
// message count is the number of requests it made.
func TestLoadAndSubscribeStream(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	const n = 200
	var h eventlog.Head
	for i := 1; i <= n; i++ {
		h = mustAppend(t, s.Log, "long", h, ev(int64(i)))
	}
	nc := s.Connect()
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l := eventlog.New(js)
	before := nc.Stats().OutMsgs
	envs, head, err := l.Load(ctx, "long")
	if err != nil || len(envs) != n || head != h {
		t.Fatalf("Load: %d events head %+v, %v", len(envs), head, err)
	}
	reqs := nc.Stats().OutMsgs - before
	t.Logf("Load: %d requests for %d events", reqs, n)
	if reqs > 3 {
		t.Fatalf("Load of %d events sent %d requests, want at most 3", n, reqs)
	}

	before = nc.Stats().OutMsgs
	got := 0
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := l.Subscribe(sctx, 0, func(eventlog.StreamEvent) error {
		if got++; got == n {
			cancel()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Consumer creation, pull requests and flow control: a few dozen at
	// most for the whole log, never one per event.
	reqs = nc.Stats().OutMsgs - before
	t.Logf("Subscribe: %d client messages for %d events", reqs, n)
	if got != n || reqs >= n/4 {
		t.Fatalf("Subscribe delivered %d events with %d client messages, want %d with fewer than %d", got, reqs, n, n/4)
	}
}
