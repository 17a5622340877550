package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/partition"
)

// runIn returns a run id that falls in partition p of np.
func runIn(p, np int) string {
	for i := 0; ; i++ {
		if id := "r" + string(rune('a'+i%26)) + strings.Repeat("x", i/26); partition.Of(id, np) == p {
			return id
		}
	}
}

// The availability note (the availability budget, docs/reliability.md)
// counts, per runner SIGKILL, the first command accepted after the kill in
// each partition the killed runner owned — a refused one, one sent before
// the kill or after the next kill, or one in another partition is not it
// — and the partitions that got none.
func TestAvailabilityNoteTakesTheFirstAcceptedCommandPerPartitionAfterEachKill(t *testing.T) {
	const np = 8
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	kills := []runnerKill{{at: at(0), parts: []int{1, 2, 3}, np: np}, {at: at(10000), parts: []int{4}, np: np}}
	cmds := []command{
		{run: runIn(1, np), sent: at(-100), recv: at(50), ok: true},            // sent before the kill
		{run: runIn(1, np), sent: at(100), recv: at(900), code: "runner_busy"}, // refused
		{run: runIn(1, np), sent: at(1000), recv: at(1200), ok: true},          // partition 1: 1.2 s
		{run: runIn(1, np), sent: at(1300), recv: at(1400), ok: true},          // not the first
		{run: runIn(2, np), sent: at(400), recv: at(600), ok: true},            // partition 2: 0.6 s
		{run: runIn(5, np), sent: at(100), recv: at(200), ok: true},            // not the killed runner's
		{run: runIn(3, np), sent: at(10100), recv: at(10200), ok: true},        // after the next kill: partition 3 unmeasured
		{run: runIn(4, np), sent: at(10500), recv: at(13000), ok: true},        // partition 4: 3 s
	}
	got := availabilityNote(kills, cmds, time.Second)
	for _, want := range []string{"after 2 runner SIGKILLs", "in 3 partitions", "p50 1.2s", "p99 3s", "max 3s", "×1.20, ×3.00, ×3.00", "1 such partitions got no command"} {
		if !strings.Contains(got, want) {
			t.Errorf("note %q lacks %q", got, want)
		}
	}
	if note := availabilityNote(nil, cmds, time.Second); note != "" {
		t.Errorf("a note without kills: %q", note)
	}
}
