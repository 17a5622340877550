package ownership

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/natstest"
)

// syncBuffer is a log sink written by the rounds and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// docs/semantics.md §8 (only a runner that is gone is recovered from, and
// a gone runner's work is taken over): a partition assigned to this runner
// whose owner's liveness key left the view, but which the rounds cannot
// tell gone — here because this runner's own key is absent (its
// heartbeats are not in the bucket: it is not one to judge by) — stays its owner's (no claim), and is
// said at Warn once it has stayed undecided for the grace of a new view
// and a lease (staleAfter), naming the owner, its partitions and what the
// judgement saw; then once per staleWarnEvery, not every round. Real
// buckets, the fake ownership clock.
func TestSemantics8_AnOwnerWithAStaleHeartbeatNotJudgedGoneIsSaidAtWarn(t *testing.T) {
	t.Parallel()
	const lease, parts = 2 * time.Second, 4
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := srv.JS.Stream(c, "KV_"+testBucket)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		if _, err := kv.Create(c, Key(p), []byte("peer")); err != nil {
			t.Fatal(err)
		}
	}
	var buf syncBuffer
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := testConfig(srv.Conn, live, stream, lease, clk)
	cfg.Partitions = parts
	cfg.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	peers := New(cfg, testLoop{})
	table := NewTable(TableConfig{ID: "me", Partitions: parts, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler)}, noOwners{})
	wctx, stop := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); _ = table.Watch(wctx) }()
	t.Cleanup(func() { stop(); <-watched })
	<-table.Ready()
	seen, ready := viewWatch(t, peers, clk)
	ready()
	// A live runner that takes no part in the partitions beats every
	// heartbeat interval, so that the view follows the bucket (a watch
	// silent for a lease is made again); this runner's own key is never
	// put.
	beat := func() {
		t.Helper()
		rev, err := live.Put(c, "other", []byte(`{"schema":1}`))
		if err != nil {
			t.Fatal(err)
		}
		seen("other", rev)
	}
	advance := func(d time.Duration) {
		t.Helper()
		for d > 0 {
			step := min(d, lease/4)
			clk.Advance(step)
			beat()
			d -= step
		}
	}
	beat()

	warns := func() int { return strings.Count(buf.String(), "is not judged gone") }
	pass := func() {
		t.Helper()
		if !table.Pass(c, peers, nil, func(p int, _ uint64) { t.Errorf("partition %d released", p) }) {
			t.Fatal("no pass on a ready view")
		}
		if owned := table.Owned(); len(owned) != 0 {
			t.Fatalf("partitions %v claimed from a peer this runner cannot tell gone", owned)
		}
	}
	pass() // the owner is undecided from now
	advance(peers.staleAfter() - time.Nanosecond)
	pass()
	if n := warns(); n != 0 {
		t.Fatalf("%d warnings before the owner stayed undecided for %s: %s", n, peers.staleAfter(), buf.String())
	}
	advance(time.Nanosecond)
	pass()
	got := buf.String()
	if n := warns(); n != 1 || !strings.Contains(got, "owner=peer") || !strings.Contains(got, `partitions="[0 1 2 3]"`) ||
		!strings.Contains(got, "own key unreadable") {
		t.Fatalf("after %s undecided: %d warnings, want 1 naming the owner, its partitions and what the judgement saw: %s", peers.staleAfter(), n, got)
	}
	advance(lease)
	pass()
	if n := warns(); n != 1 {
		t.Fatalf("a second warning a lease after the first: %s", buf.String())
	}
	advance(peers.staleWarnEvery())
	pass()
	if n := warns(); n != 2 {
		t.Fatalf("%d warnings, want the second one staleWarnEvery after the first: %s", n, buf.String())
	}
}

// docs/semantics.md §8 (a gone runner's partitions are taken over): a
// round of rebalancing that has not ended for staleAfter — a read or write
// of it that does not return — is said at Warn with the partition it is
// at, and so are rounds that have not begun for as long (the partition
// loop held elsewhere). On the fake ownership clock.
func TestSemantics8_ARoundThatDoesNotEndIsSaidAtWarn(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	var buf syncBuffer
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := &Peers{cfg: Config{ID: "me", Lease: lease, Clock: clk, Conn: natstest.Start(t).Conn,
		Log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.WatchRounds(ctx) }()
	defer func() { cancel(); <-done }()
	said := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // a bound on the watcher's goroutine, not a measure
		for !strings.Contains(buf.String(), what) {
			if time.Now().After(deadline) {
				t.Fatalf("never said %q: %s", what, buf.String())
			}
			clk.Advance(lease)
			// wall clock: a poll of the log, bounded, while the watcher's goroutine takes the tick the fake clock fired
			time.Sleep(5 * time.Millisecond)
		}
	}
	p.roundBegan(clk.Now())
	p.roundAt(7)
	said(`msg="a round of rebalancing has not ended"`)
	if !strings.Contains(buf.String(), "partition=7") {
		t.Fatalf("the warning does not name the partition the round is at: %s", buf.String())
	}
	p.noteRound(clk.Now())
	said(`msg="no round of rebalancing has begun"`)
}

// docs/semantics.md §8 (a gone runner's partitions are taken over): a
// runners view that holds a partition owner live while its liveness key is
// absent — here an entry put in the view by hand, valid for an hour — keeps
// the owner's partitions its own (a live owner releases them itself); once
// that lasted staleAfter it is said at Warn, naming the owner and its
// partitions, once per staleWarnEvery. Real buckets, the fake ownership
// clock.
func TestSemantics8_AViewHoldingAnOwnerWithoutAKeyLiveIsSaidAtWarn(t *testing.T) {
	t.Parallel()
	const lease, parts = 2 * time.Second, 4
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := srv.JS.Stream(c, "KV_"+testBucket)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		if _, err := kv.Create(c, Key(p), []byte("peer")); err != nil {
			t.Fatal(err)
		}
	}
	var buf syncBuffer
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := testConfig(srv.Conn, live, stream, lease, clk)
	cfg.Partitions = parts
	cfg.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	peers := New(cfg, testLoop{})
	table := NewTable(TableConfig{ID: "me", Partitions: parts, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler)}, noOwners{})
	wctx, stop := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); _ = table.Watch(wctx) }()
	t.Cleanup(func() { stop(); <-watched })
	<-table.Ready()
	seen, ready := viewWatch(t, peers, clk)
	ready()
	// A live runner that takes no part in the partitions beats every
	// heartbeat interval, so that the view follows the bucket (a watch
	// silent for a lease is made again); this runner's own key is never
	// put.
	beat := func() {
		t.Helper()
		rev, err := live.Put(c, "other", []byte(`{"schema":1}`))
		if err != nil {
			t.Fatal(err)
		}
		seen("other", rev)
	}
	advance := func(d time.Duration) {
		t.Helper()
		for d > 0 {
			step := min(d, lease/4)
			clk.Advance(step)
			beat()
			d -= step
		}
	}
	beat()
	// The view holds "peer" live, though its key was never put.
	peers.runners.mu.Lock()
	peers.runners.keys["peer"] = runnerEntry{assignable: false, revision: 1, until: clk.Now().Add(time.Hour)}
	peers.runners.mu.Unlock()

	warns := func() int { return strings.Count(buf.String(), "holds a partition owner live") }
	pass := func() {
		t.Helper()
		if !table.Pass(c, peers, nil, func(p int, _ uint64) { t.Errorf("partition %d released", p) }) {
			t.Fatal("no pass on a ready view")
		}
		if owned := table.Owned(); len(owned) != 0 {
			t.Fatalf("partitions %v claimed from an owner the view holds live", owned)
		}
	}
	pass()
	advance(peers.staleAfter() - time.Nanosecond)
	pass()
	if n := warns(); n != 0 {
		t.Fatalf("%d warnings before staleAfter: %s", n, buf.String())
	}
	advance(time.Nanosecond)
	pass()
	if n := warns(); n != 1 || !strings.Contains(buf.String(), "owner=peer") || !strings.Contains(buf.String(), `partitions="[0 1 2 3]"`) {
		t.Fatalf("%d warnings, want 1 naming the owner and its partitions: %s", warns(), buf.String())
	}
	advance(lease)
	pass()
	if n := warns(); n != 1 {
		t.Fatalf("a second warning a lease after the first: %s", buf.String())
	}
}
