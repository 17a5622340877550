package runner

import (
	"testing"
	"time"

	"github.com/weftrun/weft/internal/clock"
)

// docs/semantics.md §8 "only a runner that is gone is recovered from": the
// takeover of a gone runner's many runs judges it once per heartbeat
// interval (lease/4), not once per run — and not for longer: a runner
// judged gone a heartbeat interval ago is judged again (its key may be
// back). On the ownership clock, a fake one here.
func TestSemantics8_AGonePeerIsJudgedAgainAfterAHeartbeatInterval(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &Runner{id: "me", lease: lease, partitionOwnership: partitionOwnership{clk: clk}}
	if r.seenGone("peer") {
		t.Fatal("a peer never judged is seen gone")
	}
	r.markGone("peer")
	clk.Advance(lease/4 - time.Nanosecond)
	if !r.seenGone("peer") {
		t.Fatal("a peer judged gone less than a heartbeat interval ago is judged again")
	}
	clk.Advance(time.Nanosecond)
	if r.seenGone("peer") {
		t.Fatal("a peer judged gone a heartbeat interval ago is still taken as gone without a judgement")
	}
	if r.seenGone("peer") {
		t.Fatal("the expired judgement was kept")
	}
}
