package runner_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 "a run can always be answered" and "only a runner
// that is gone is recovered from" — and a gone one is: the claims of a
// gone peer's partitions never wait behind a scan of the driver entries. A scan wakes the entries of the runs this
// runner does not hold — each a read of the run's log, a takeover — and
// may wait on the server for up to its timeouts (a watch of weft_drivers
// whose consumer was lost to a server restart waits its whole 30 s; a
// takeover's reads as long); while it ran inside the partition loop, no
// round of rebalancing was made meanwhile, and a peer that died then kept
// its partitions — every command of their runs forwarded to a runner that
// does not answer (seen in chaos seed 2: a survivor made no round for
// exactly the scan's 30 s after a server restart). Here a scan of this
// runner is held in a run's acquisition (hook "acquire-owned") while a
// stand-in peer stops beating: its partitions are claimed all the same.
func TestSemantics8_AGonePeersPartitionsAreClaimedWhileAScanIsHeld(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	drivers, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	const id, lease = "scanner", 2 * time.Second // lease: the harness's bucket max age
	members := []string{"ghost", id}
	// A run of a partition assigned to this runner, with a driver entry
	// naming the stand-in: the scan of the partition this runner claims at
	// its start wakes it (it does not hold it).
	stuck := ""
	for i := 0; stuck == ""; i++ {
		if run := fmt.Sprintf("held-%d", i); partition.Owner(partition.Of(run, runner.DefaultPartitions), members) == id {
			stuck = run
		}
	}
	if _, err := drivers.Create(c, runner.DriverKey(stuck, runner.DefaultPartitions), []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	stopGhost := beatAs(t, live, "ghost", lease)
	var ghosts []int
	for p := range runner.DefaultPartitions {
		if partition.Owner(p, members) == "ghost" {
			ghosts = append(ghosts, p)
			if _, err := parts.Create(c, fmt.Sprintf("p.%04d", p), []byte("ghost")); err != nil {
				t.Fatal(err)
			}
		}
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once, unblock sync.Once
	hook := func(event string, _ int, run string) {
		if event == "acquire-owned" && run == stuck {
			once.Do(func() { close(held) })
			<-release
		}
	}
	b := &bodies{}
	nc := h.srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r := h.runOn(nc, js, []*agent.Agent{build(t, payThenAnswer(50), []tools.Tool{b.tool()}, policy.Func(allow))},
		runner.WithID(id), runner.WithLease(lease), runner.WithHook(hook))
	t.Cleanup(func() { unblock.Do(func() { close(release) }) }) // before the runner stops (cleanups run last first)
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the scan never woke the driver entry of a run this runner does not hold")
	}
	if got := len(r.Stats().Partitions); got != runner.DefaultPartitions-len(ghosts) {
		t.Fatalf("r owns %d partitions beside the live stand-in, want %d", got, runner.DefaultPartitions-len(ghosts))
	}
	stopGhost()
	until(t, "r claimed the gone stand-in's partitions while its scan was held", func() bool { return ownsAll(r) })
}
