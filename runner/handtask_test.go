package runner_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// TestSemantics7_TheStreamsCopyOfAHandedTaskRunsNoSecondBody: the runner
// hands each fenced attempt's task to its own worker and publishes it to
// WEFT_TASKS (docs/adr/0027-fewer-writes-per-step.md) — with
// runner.WithEagerTaskCopy, the copy's delivery while the handed task
// holds the attempt is reachable only in that mode or through a copy the
// handed task published (docs/adr/0039-the-stream-copy-only-when-needed.md). A second worker of
// the same queue, in another connection as another process's would be,
// takes the stream copies it is delivered: it finds the attempt claimed by
// the runner's worker (or no longer current) and never starts the body;
// its notice that the attempt was lost (worker_lost) is refused
// runner_busy, not recorded, while the runner's worker holds the attempt —
// recording it would replay, or make uncertain, an attempt whose body
// runs — and its retry after the report is stale. Ten runs of three steps:
// thirty body starts, no attempt lost, every action done at its first
// attempt. Each body takes 50 ms, and the other worker handles the copies
// at once (no Weft-Handed-To delay), so that its notice reaches the runner
// while the body runs. docs/semantics.md §7 (and §3: at most one start per
// attempt).
func TestSemantics7_TheStreamsCopyOfAHandedTaskRunsNoSecondBody(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s",
		model.CallTools(payCall(1, "slow")), model.CallTools(payCall(1, "slow")), model.CallTools(payCall(1, "slow")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithEagerTaskCopy())

	// The other worker: the same body, the default check and report path;
	// it handles the copies at once, as a worker ignoring their
	// Weft-Handed-To does.
	otherWorker(t, h, a, nil, worker.WithHandedCopyDelay(0))

	c := ctx(t)
	const n = 10
	for i := range n {
		if _, err := h.client.Start(c, api.StartRequest{Run: fmt.Sprint("hand-", i), Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		run := fmt.Sprint("hand-", i)
		for _, msg := range completedAtFirstAttempts(t, h, run) {
			if slices.Contains(msg, events.NameAttemptLost) || slices.Contains(msg, events.NameActionUncertain) {
				t.Errorf("run %s recorded %v: the runner's worker ran the attempt", run, msg)
			}
		}
	}
	if got := b.starts.Load(); got != 3*n {
		t.Errorf("%d body starts for %d attempts, want %d", got, 3*n, 3*n)
	}
	if r.HandedOff() == 0 {
		t.Error("the runner handed no task to its worker")
	}
}
