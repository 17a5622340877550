package partition_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/partition"
)

// TestOfEqualsTheServersPartitionMapping: Of is the hash of nats-server's
// partition(P, wildcard) subject mapping (ARCHITECTURE.md "Scale path":
// the same hash as the server's partition() mapping). A
// real server maps weft.ptest.<run> to weft.ptested.<partition>.<run>; for
// a few hundred run ids (fixed seed) and several P the partition token it
// chose is Of(run, P).
func TestOfEqualsTheServersPartitionMapping(t *testing.T) {
	ps := []int{1, 7, 64, 256, 1000}
	var conf strings.Builder
	conf.WriteString("listen: 127.0.0.1:-1\nmappings {\n")
	for _, p := range ps {
		fmt.Fprintf(&conf, "  \"weft.ptest%d.*\": \"weft.ptested%d.{{partition(%d,1)}}.{{wildcard(1)}}\"\n", p, p, p)
	}
	conf.WriteString("}\n")
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(conf.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)

	rng := rand.New(rand.NewPCG(17, 1))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
	runs := []string{"a", "pay-7", "run-0123456789abcdef0123"}
	for len(runs) < 300 {
		b := make([]byte, 1+rng.IntN(40))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		runs = append(runs, string(b))
	}
	for _, p := range ps {
		sub, err := nc.SubscribeSync(fmt.Sprintf("weft.ptested%d.*.*", p))
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, run := range runs {
			if err := nc.Publish(fmt.Sprintf("weft.ptest%d.%s", p, run), nil); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[int]bool{}
		for range runs {
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("P=%d: %v", p, err)
			}
			tok := strings.SplitN(m.Subject, ".", 4)
			got, err := strconv.Atoi(tok[2])
			if err != nil {
				t.Fatalf("subject %s: %v", m.Subject, err)
			}
			if want := partition.Of(tok[3], p); got != want {
				t.Errorf("run %q, P=%d: the server mapped it to partition %d, Of says %d", tok[3], p, got, want)
			}
			seen[got] = true
		}
		_ = sub.Unsubscribe()
		if p > 1 && len(seen) < 2 {
			t.Errorf("P=%d: every run in one partition", p)
		}
	}
}

func TestOfIsInRange(t *testing.T) {
	for _, p := range []int{-1, 0, 1, 2, 64} {
		for _, run := range []string{"", "x", "pay-7"} {
			if got := partition.Of(run, p); got < 0 || (p > 0 && got >= p) || (p < 1 && got != 0) {
				t.Errorf("Of(%q, %d) = %d", run, p, got)
			}
		}
	}
}

// TestOwnerMovesOnlyTheJoinersShare: the assignment is rendezvous hashing: with
// n runners each gets about P/n partitions, and a
// runner joining moves to itself only partitions, about P/(n+1) of them,
// never from one old runner to another; a runner leaving moves only its
// own.
func TestOwnerMovesOnlyTheJoinersShare(t *testing.T) {
	const p = 64
	ids := []string{"runner-a", "runner-b", "runner-c", "runner-d", "runner-e", "runner-f", "runner-g", "runner-h"}
	for n := 1; n < len(ids); n++ {
		before, after := ids[:n], ids[:n+1]
		count := map[string]int{}
		moved := 0
		for part := range p {
			was, now := partition.Owner(part, before), partition.Owner(part, after)
			count[now]++
			if was != now {
				moved++
				if now != ids[n] {
					t.Errorf("n=%d: partition %d moved from %s to %s, not to the joiner", n, part, was, now)
				}
			}
			if again := partition.Owner(part, []string{ids[n]}); n == 0 && again != ids[n] {
				t.Errorf("one runner owns everything")
			}
		}
		// Within a factor of the fair share: a hash, not a table.
		if fair := p / (n + 1); moved < fair/3 || moved > 3*fair {
			t.Errorf("n=%d -> %d: %d partitions moved, fair share %d", n, n+1, moved, fair)
		}
		for _, id := range after {
			if count[id] == 0 {
				t.Errorf("%d runners: %s owns no partition (%v)", n+1, id, count)
			}
		}
	}
	if partition.Owner(3, nil) != "" {
		t.Error("owner among nobody")
	}
}
