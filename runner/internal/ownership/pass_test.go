package ownership

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/partition"
)

// docs/adr/0019-partitions.md (ownership follows the live runners by
// rendezvous hashing; one claim wins) and docs/semantics.md §8 (only a
// runner that is gone is recovered from): a round of rebalancing, on a
// Table and Peers alone over real buckets and the fake ownership clock,
// claims exactly the partitions that partition.Owner assigns to this
// runner among the live assignable runners of its view — all of them when
// it is alone, its share beside a live peer — and no partition a live
// peer owns. A view that cannot tell yet makes no claim at all.
func TestPassClaimsThisRunnersShareOfTheLiveRunners(t *testing.T) {
	t.Parallel()
	const lease, parts = 2 * time.Second, 8
	for _, alone := range []bool{true, false} {
		t.Run(map[bool]string{true: "alone", false: "beside a live peer"}[alone], func(t *testing.T) {
			srv := natstest.Start(t)
			c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			live, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: testBucket, Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatal(err)
			}
			kv, err := srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "weft_partitions", Storage: jetstream.FileStorage})
			if err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg := testConfig(srv.Conn, live, nil, lease, clk)
			cfg.Partitions = parts
			peers := New(cfg, testLoop{})
			table := NewTable(TableConfig{ID: "me", Partitions: parts, Conn: srv.Conn, KV: kv, Bucket: "weft_partitions", Log: slog.New(slog.DiscardHandler)}, noOwners{})
			released := func(p int, _ uint64) { t.Errorf("partition %d released by a runner that owned nothing", p) }
			if table.Pass(c, peers, nil, released) {
				t.Fatal("a pass was made on a view that cannot tell yet")
			}
			if owned := table.Owned(); len(owned) != 0 {
				t.Fatalf("claims on a view that cannot tell: %v", owned)
			}
			runners := []string{"me"}
			if !alone {
				b, _ := json.Marshal(beat{Schema: 1, Partitions: parts})
				if _, err := live.Put(c, "peer", b); err != nil {
					t.Fatal(err)
				}
				runners = append(runners, "peer")
			}
			seen, ready := viewWatch(t, peers, clk)
			ready()
			if !alone {
				seen("peer", 1)
			}
			if !table.Pass(c, peers, nil, released) {
				t.Fatal("no pass on a ready view")
			}
			var want []int
			for p := range parts {
				if partition.Owner(p, runners) == "me" {
					want = append(want, p)
				}
			}
			if !alone && (len(want) == 0 || len(want) == parts) {
				t.Fatalf("partition.Owner gives %v of %d partitions to me: the case tells nothing", want, parts)
			}
			if got := table.Owned(); !slices.Equal(got, want) {
				t.Fatalf("alone %v: claimed %v, want %v (partition.Owner among %v)", alone, got, want, runners)
			}
			for p := range parts {
				owner, _, err := table.partitionKey(c, p)
				if err != nil {
					t.Fatal(err)
				}
				if mine := slices.Contains(want, p); mine != (owner == "me") {
					t.Fatalf("alone %v: partition %d's key names %q", alone, p, owner)
				}
			}
		})
	}
}
