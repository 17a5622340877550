package runner_test

import (
	"fmt"
	"sync"
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

// SEMANTICS §8 (graceful row) and the availability budget
// (docs/reliability.md: after a graceful stop, no runner_busy longer than
// the drain): a draining runner whose body runs to the end of the drain
// window hands that body's partition over within the window — its key is
// deleted, for the runner it is assigned to to claim, before the window
// ends — not after it. Ordered by the store's clock: a mark put just
// before the stop, and the deletion of the partition's key.
func TestSemantics8_ADrainHandsItsPartitionsOverWithinTheWindow(t *testing.T) {
	h := newHarness(t)
	const run = "dh-0"
	// A 5 s window keeps a reserve of 1 s for the hand-over, so that a
	// loaded machine's slower hand-over still fits it (the fault, before
	// the reserve, was the key deleted after the window's end).
	const window = 5 * time.Second
	g := &gate{open: make(chan struct{})}
	var opened sync.Once
	t.Cleanup(func() { opened.Do(func() { close(g.open) }) })
	a := build(t, payThenAnswer(50), []tools.Tool{g.tool()}, policy.Func(allow), agent.WithToolTimeout(tools.Infinity()))
	r, stop := h.startRunner([]*agent.Agent{a}, runner.WithDrainWindow(window))
	until(t, "the runner owns every partition", func() bool { return ownsAll(r) })
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	until(t, "the body started", func() bool { return g.starts.Load() == 1 })
	marks, err := h.srv.JS.CreateKeyValue(c, jetstream.KeyValueConfig{Bucket: "test_marks"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := marks.Put(c, "stop", nil); err != nil {
		t.Fatal(err)
	}
	mark, err := marks.Get(c, "stop")
	if err != nil {
		t.Fatal(err)
	}
	stop() // SIGTERM-like: the body hangs to the end of the window
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("p.%04d", partition.Of(run, runner.DefaultPartitions))
	hist, err := parts.History(c, key)
	if err != nil {
		t.Fatal(err)
	}
	last := hist[len(hist)-1]
	if last.Operation() == jetstream.KeyValuePut {
		t.Fatalf("partition key %s still names %s after the drain", key, last.Value())
	}
	if end := mark.Created().Add(window); !last.Created().Before(end) {
		t.Errorf("the partition of the body running to the window's end was handed over %s after the window ended (store clock), want within the window",
			last.Created().Sub(end))
	}
}
