package runner_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// SEMANTICS §8 (a live runner's run is never taken over): at the end of
// a drain, the partition of a run whose lock the hand-off could not have
// (a command still applied to it past the window; here its body runs to
// the window's end too) keeps its key while
// the run is held — its new owner would take over a run this process
// still drives — and only the partitions with no run held move then.
func TestSemantics8_ADrainKeepsThePartitionOfARunStillHeld(t *testing.T) {
	h := newHarness(t)
	const run = "dk-0"
	drainReleased := make(chan struct{}, 1)
	g := &gate{open: make(chan struct{})}
	t.Cleanup(func() { close(g.open) })
	a := build(t, payThenAnswer(50), []tools.Tool{g.tool()}, policy.Func(allow), agent.WithToolTimeout(tools.Infinity()))
	r, stop := h.startRunner([]*agent.Agent{a}, runner.WithDrainWindow(300*time.Millisecond), runner.WithHandOffLockTimeout(50*time.Millisecond),
		runner.WithHook(func(event string, _ int, _ string) {
			if event == "drain-released" {
				drainReleased <- struct{}{}
			}
		}))
	until(t, "the runner owns every partition", func() bool { return ownsAll(r) })
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	unlock, ok := runner.HoldRun(r, run)
	if !ok {
		t.Fatal("the run is not held in memory")
	}
	defer unlock()
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	p := partition.Of(run, runner.DefaultPartitions)
	key := fmt.Sprintf("p.%04d", p)
	other := fmt.Sprintf("p.%04d", (p+1)%runner.DefaultPartitions)
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	<-drainReleased
	// The hook runs in Run, which waits for it: the keys are as the
	// hand-over left them.
	if _, err := parts.Get(c, other); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("partition key %s of no run held: %v, want deleted at the end of the drain", other, err)
	}
	if e, err := parts.Get(c, key); err != nil {
		t.Errorf("partition key %s of the run still held: %v, want kept while the run is held", key, err)
	} else if string(e.Value()) != r.ID() {
		t.Errorf("partition key %s names %q, want %q", key, e.Value(), r.ID())
	}
	unlock()
	<-stopped
}
