package runner

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 (a run can always be answered): this runner's table
// of the partitions' owners was set back — to a gone runner at a revision
// the partition's key has left — by a read that was behind (lostPartition
// after a kv.Get answered by a replica that lagged; its watcher, past that
// revision already, delivers nothing new). The claim of the partition from
// the gone runner, at the table's revision, is refused: the table then
// moves forward to the key as it is. When the key names this runner (its
// own claim, which the stale read hid), the partition is owned again and
// due for a scan, so that its runs are taken over without a command; when
// it names another runner, the table follows it. Before, every pass made
// the same refused claim and nothing else moved the table.
func TestSemantics8_ARefusedClaimCatchesTheTableUpWithTheKey(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: PartitionsBucket, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{id: "me", lease: time.Second, log: slog.New(slog.DiscardHandler),
		partitionOwnership: partitionOwnership{nparts: 2, partKV: kv, parts: newPartTable(2)}}
	for p, now := range []string{"me", "other"} {
		gone, err := kv.Put(c, partKey(p), []byte("ghost"))
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(c, partKey(p), []byte(now))
		if err != nil {
			t.Fatal(err)
		}
		// The table as a stale read left it: the gone runner at its
		// revision, not due.
		r.parts.mu.Lock()
		r.parts.owner[p], r.parts.rev[p], r.parts.scanDue[p] = "ghost", gone, false
		r.parts.mu.Unlock()
		r.claim(c, p, gone, "ghost")
		r.parts.mu.Lock()
		owner, got, due := r.parts.owner[p], r.parts.rev[p], r.parts.scanDue[p]
		r.parts.mu.Unlock()
		if owner != now || got != rev || due != (now == "me") {
			t.Fatalf("partition %d after a refused claim: owner %q at %d, due %v; want %q at %d, due %v", p, owner, got, due, now, rev, now == "me")
		}
	}
}
