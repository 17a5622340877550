package runner_test

import (
	"errors"
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

// docs/semantics.md §8 (graceful row) and the availability budget
// (docs/reliability.md: after a graceful stop, no runner_busy longer than
// the drain): a draining runner whose body runs to the end of the drain
// window hands that body's partition over within the window — its key is
// deleted, for the runner it is assigned to to claim, before the window
// ends — not after it. Ordered by the store's clock: a mark put just
// before the stop, and the deletion of the partition's key.
func TestSemantics8_ADrainHandsItsPartitionsOverWithinTheWindow(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "dh-0"
	// A 5 s window keeps a reserve of 1 s for the hand-over, so that a
	// loaded machine's slower hand-over still fits it (the fault, before
	// the reserve, was the key deleted after the window's end).
	const window = 5 * time.Second
	_, stop := h.hangingBody(run, runner.WithDrainWindow(window))
	c := ctx(t)
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

// hangingBody starts run on a runner of h (opts) that owns every
// partition, whose body hangs (its timeout tools.Infinity) until the test
// ends, and returns once the body started.
func (h *harness) hangingBody(run string, opts ...runner.Option) (*runner.Runner, func()) {
	t := h.t
	t.Helper()
	g := &gate{open: make(chan struct{})}
	var opened sync.Once
	t.Cleanup(func() { opened.Do(func() { close(g.open) }) })
	a := build(t, payThenAnswer(50), []tools.Tool{g.tool()}, policy.Func(allow), agent.WithToolTimeout(tools.Infinity()))
	r, stop := h.startRunner([]*agent.Agent{a}, opts...)
	until(t, "the runner owns every partition", func() bool { return ownsAll(r) })
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	until(t, "the body started", func() bool { return g.starts.Load() == 1 })
	return r, stop
}

// docs/semantics.md §8 (a live runner's run is never taken over): at the end of
// a drain, the partition of a run whose lock the hand-off could not have
// (a command still applied to it past the window; here its body runs to
// the window's end too) keeps its key while the run is held — its new
// owner would take over a run this process still drives — and only the
// partitions with no run held move then.
func TestSemantics8_ADrainKeepsThePartitionOfARunStillHeld(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "dk-0"
	drainReleased, checked := make(chan struct{}, 1), make(chan struct{})
	r, stop := h.hangingBody(run, runner.WithDrainWindow(300*time.Millisecond), runner.WithHandOffLockTimeout(50*time.Millisecond),
		runner.WithHook(func(event string, _ int, _ string) {
			if event == "drain-released" {
				drainReleased <- struct{}{}
				<-checked // Run waits here until the keys were read
			}
		}))
	unlock, ok := runner.HoldRun(r, run)
	if !ok {
		t.Fatal("the run is not held in memory")
	}
	defer unlock()
	c := ctx(t)
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	p := partition.Of(run, runner.DefaultPartitions)
	key := fmt.Sprintf("p.%04d", p)
	other := fmt.Sprintf("p.%04d", (p+1)%runner.DefaultPartitions)
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	receive(t, "the drain released its partitions", drainReleased)
	// The hook holds Run: the keys are as the hand-over left them (the end
	// of Run deletes the held run's key too, even while the test holds it).
	if _, err := parts.Get(c, other); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("partition key %s of no run held: %v, want deleted at the end of the drain", other, err)
	}
	if e, err := parts.Get(c, key); err != nil {
		t.Errorf("partition key %s of the run still held: %v, want kept while the run is held", key, err)
	} else if string(e.Value()) != r.ID() {
		t.Errorf("partition key %s names %q, want %q", key, e.Value(), r.ID())
	}
	close(checked)
	unlock()
	receive(t, "the drain ended (its stop returned)", stopped)
}

// docs/semantics.md §8 and the availability budget (docs/reliability.md):
// a partition with nothing running whose key the drain could not delete
// when it released it early (the window ended during the delete, or the
// store did not answer) is still deleted at the end of the drain, with
// the others. The early release marked it not owned before the delete, so
// the end of the drain skipped it: its key kept naming the gone runner
// (runner package's parallel run: TestSemantics8_ADrainKeepsThePartitionOf
// ARunStillHeld found p+1's key after the drain).
func TestSemantics8_ADrainDeletesTheKeyOfAPartitionItsEarlyReleaseMissed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const window = 300 * time.Millisecond
	missed := -1
	drainReleased := make(chan struct{}, 1)
	r, stop := h.startRunner([]*agent.Agent{build(t, payThenAnswer(1), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))},
		runner.WithDrainWindow(window),
		runner.WithHook(func(event string, p int, _ string) {
			switch {
			case event == "release-quiet" && missed < 0:
				// The early release of the first partition outlasts the
				// window: its delete is made on a context that ended.
				missed = p
				// wall clock: the drain's context ends on the wall clock (runner.go: the drain window's context.WithTimeout), which this outlasts
				time.Sleep(2 * window)
			case event == "drain-released":
				drainReleased <- struct{}{}
			}
		}))
	until(t, "the runner owns every partition", func() bool { return ownsAll(r) })
	parts, err := h.srv.JS.KeyValue(ctx(t), runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	receive(t, "the drain released its partitions", drainReleased)
	// The hook runs in Run, which waits for it: the keys are as the
	// hand-over left them.
	key := fmt.Sprintf("p.%04d", missed)
	if e, err := parts.Get(ctx(t), key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("partition key %s after the drain: %v (%v), want deleted at the end of the drain", key, entryValue(e), err)
	}
	receive(t, "the drain ended (its stop returned)", stopped)
}

func entryValue(e jetstream.KeyValueEntry) string {
	if e == nil {
		return ""
	}
	return string(e.Value())
}

// docs/semantics.md §8 and the availability budget (docs/reliability.md),
// with the default hand-off lock wait: a run still held at the end of the
// drain used up the hand-off's shared final context waiting for its lock,
// so the end of the drain deleted the other partitions' keys on an ended
// context — and, having marked them not owned first, never again: they
// kept naming the gone runner. At the end of the drain every key but the
// held run's is deleted, and once Run returned that one too.
func TestSemantics8_ADrainWithTheDefaultLockWaitDeletesEveryKey(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	const run = "dd-0"
	drainReleased, checked := make(chan struct{}, 1), make(chan struct{})
	r, stop := h.hangingBody(run, runner.WithDrainWindow(300*time.Millisecond),
		runner.WithHook(func(event string, _ int, _ string) {
			if event == "drain-released" {
				drainReleased <- struct{}{}
				<-checked // Run waits here until the keys were read
			}
		}))
	unlock, ok := runner.HoldRun(r, run)
	if !ok {
		t.Fatal("the run is not held in memory")
	}
	defer unlock()
	c := ctx(t)
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	held := fmt.Sprintf("p.%04d", partition.Of(run, runner.DefaultPartitions))
	naming := func() []string {
		var left []string
		for p := 0; p < runner.DefaultPartitions; p++ {
			key := fmt.Sprintf("p.%04d", p)
			e, err := parts.Get(c, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("partition key %s: %v", key, err)
			}
			if string(e.Value()) == r.ID() {
				left = append(left, key)
			}
		}
		return left
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	receive(t, "the drain released its partitions", drainReleased)
	// The hook holds Run: the keys are as the hand-over left them.
	if left := naming(); len(left) != 1 || left[0] != held {
		t.Errorf("at the end of the drain %d keys name the runner (%v), want only the held run's %s", len(left), left, held)
	}
	close(checked)
	unlock()
	receive(t, "the drain ended (its stop returned)", stopped)
	if left := naming(); len(left) != 0 {
		t.Errorf("after Run returned %d keys name the gone runner (%v), want none", len(left), left)
	}
}
