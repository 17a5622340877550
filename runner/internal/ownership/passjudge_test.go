package ownership

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 (a gone runner's work is taken over; only a runner
// that is gone is recovered from): a round of rebalancing judges each
// owner whose key left the view once, not once for each of its
// partitions. Here the owner of the four partitions assigned to this
// runner cannot be told gone (this runner's own key is absent), and each
// round makes one judgement of it — so a judgement that waits on a server
// that does not answer holds a round once per owner, not once per
// partition; and the partitions stay their owner's. Before, a round judged
// the owner four times. Real buckets, the fake ownership clock.
func TestSemantics8_ARoundJudgesEachOwnerOnce(t *testing.T) {
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
	cfg.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	peers := New(cfg, testLoop{})
	table := NewTable(TableConfig{ID: "me", Partitions: parts, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler)}, noOwners{})
	wctx, stop := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { defer close(watched); _ = table.Watch(wctx) }()
	t.Cleanup(func() { stop(); <-watched })
	<-table.Ready()
	seen, ready := viewWatch(t, peers, clk)
	ready()
	rev, err := live.Put(c, "other", []byte(`{"schema":1}`))
	if err != nil {
		t.Fatal(err)
	}
	seen("other", rev)

	judged := func() int { return strings.Count(buf.String(), `msg="partition owner judged" owner=peer`) }
	for round := 1; round <= 2; round++ {
		if !table.Pass(c, peers, nil, func(p int, _ uint64) { t.Errorf("partition %d released", p) }) {
			t.Fatal("no pass on a ready view")
		}
		if owned := table.Owned(); len(owned) != 0 {
			t.Fatalf("partitions %v claimed from a peer this runner cannot tell gone", owned)
		}
		if n := judged(); n != round {
			t.Fatalf("after %d rounds, the owner of %d partitions was judged %d times, want once a round: %s", round, parts, n, buf.String())
		}
	}
}
