package runner_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/bench"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_GroupCommitRunnerFinishesConcurrentRuns runs 48 runs of
// three durable steps at once on a runner with group commit
// (docs/adr/0025-group-commit.md): every run finishes with each step's
// attempt reported once and a log that loads chained, whether its
// decisions left in a batch or alone.
func TestSemantics8_GroupCommitRunnerFinishesConcurrentRuns(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, natstest.WithAssets(runner.Assets(2*time.Second)...), natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	if err := runner.Provision(ctx(t), srv.JS, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, srv: srv, client: api.NewClient(srv.Conn)}
	ag, err := bench.StepsAgent("steps")
	if err != nil {
		t.Fatal(err)
	}
	h.startRunner([]*agent.Agent{ag}, runner.WithGroupCommit())
	const n = 48
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.client.Start(ctx(t), api.StartRequest{Run: fmt.Sprintf("gc%d", i), Agent: "steps", Input: "steps=3"}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range n {
		run := fmt.Sprintf("gc%d", i)
		h.waitStatus(run, aggregate.StatusFinished)
		envs, _, err := h.srv.Log.Load(ctx(t), run)
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
		reported := 0
		for _, env := range envs {
			if env.Type == events.NameAttemptReported {
				reported++
			}
		}
		if reported != 3 {
			t.Fatalf("%s: %d attempts reported, want 3", run, reported)
		}
	}
	t.Logf("group commit: %+v", eventlog.ReadCommitStats())
}
