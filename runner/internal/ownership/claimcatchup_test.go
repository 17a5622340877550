package ownership

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
)

// docs/semantics.md §8 (a run can always be answered; a partition moves
// only by compare-and-set): this runner's table of the partitions' owners
// was set back — to a gone runner at a revision the partition's key has
// left — by a read that was behind (Verify or catchUp; its watcher, past that
// revision already, delivers nothing new). The claim of the partition from
// the gone runner, at the table's revision, is refused: the table then
// moves forward to the key as the stream's leader has it. When the key
// names this runner (its own claim, which the stale read hid), the
// partition is claimed again by compare-and-set at the key's revision —
// owned at the revision of that write, and due for a scan, so that its
// runs are taken over without a command; when it names another runner,
// the table follows it. A key at a revision the table already reached
// leaves the table as it is: it never moves back. Before, every pass made
// the same refused claim and nothing else moved the table.
func TestSemantics8_ARefusedClaimCatchesTheTableUpWithTheKey(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	r := NewTable(TableConfig{ID: "me", Partitions: 4, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler)}, noOwners{})
	for p, now := range []string{"me", "other"} {
		gone, err := kv.Put(c, Key(p), []byte("ghost"))
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(c, Key(p), []byte(now))
		if err != nil {
			t.Fatal(err)
		}
		// The table as a stale read left it: the gone runner at its
		// revision, not due.
		r.mu.Lock()
		r.owner[p], r.rev[p], r.scanDue[p] = "ghost", gone, false
		r.mu.Unlock()
		r.claim(c, p, gone, "ghost")
		e, err := kv.Get(c, Key(p))
		if err != nil {
			t.Fatal(err)
		}
		want := rev
		if now == "me" {
			want = e.Revision() // the compare-and-set that claimed it again
			if want == rev || string(e.Value()) != "me" {
				t.Fatalf("partition %d: the key is %q at %d, want a claim by compare-and-set after %d", p, e.Value(), e.Revision(), rev)
			}
		}
		r.mu.Lock()
		owner, got, due := r.owner[p], r.rev[p], r.scanDue[p]
		r.mu.Unlock()
		if owner != now || got != want || due != (now == "me") {
			t.Fatalf("partition %d after a refused claim: owner %q at %d, due %v; want %q at %d, due %v", p, owner, got, due, now, want, now == "me")
		}
	}
	// Never backwards: a table ahead of the key (another runner's claim
	// the watcher delivered) is left as it is.
	const p = 2
	rev, err := kv.Put(c, Key(p), []byte("me"))
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.owner[p], r.rev[p] = "other", rev+5
	r.mu.Unlock()
	r.catchUp(c, p)
	r.mu.Lock()
	owner, got := r.owner[p], r.rev[p]
	r.mu.Unlock()
	if owner != "other" || got != rev+5 {
		t.Fatalf("partition %d: a key behind the table moved it to %q at %d", p, owner, got)
	}
	// A deleted key (its owner released it) names nobody at the deletion's
	// revision: the next claim is a Create, which wins.
	const q = 3
	gone, err := kv.Put(c, Key(q), []byte("ghost"))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(c, Key(q)); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.owner[q], r.rev[q] = "ghost", gone
	r.mu.Unlock()
	r.claim(c, q, gone, "ghost")
	r.mu.Lock()
	owner, got = r.owner[q], r.rev[q]
	r.mu.Unlock()
	if owner != "" || got <= gone {
		t.Fatalf("partition %d, its key deleted after %d: the table says %q at %d, want nobody after it", q, gone, owner, got)
	}
	r.claim(c, q, 0, "")
	if o, _ := r.OwnerOf(q); o != "me" {
		t.Fatalf("partition %d after a Create: owner %q", q, o)
	}
}

// noOwners is the command loop of a test's Table: it holds no run.
type noOwners struct{}

func (noOwners) ForgetPartition(context.Context, int) {}
func (noOwners) ForgetPartitionLater(int)             {}
