package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 (graceful row; only a runner that is gone is recovered
// from) and the availability budget: a decision in progress when a
// partition's release checks for work without a deadline — an approval
// whose policy re-run holds the run's lock, and which starts a body whose
// timeout is tools.Infinity — is waited for by the check, never skipped:
// the release is postponed once the body runs, and the partition's other
// runs are served meanwhile (a new run of it starts), instead of the
// release waiting for ever on the body with every run of the partition
// answered runner_busy. Once the body ended the partition moves, with
// nothing uncertain.
func TestSemantics8_AReleaseWaitsForADecisionInProgressBeforeJudgingItsWork(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true
	const run = "infd-0"
	first, second := moving(run)
	p := partition.Of(run, runner.DefaultPartitions)
	other := ""
	for i := 1; other == ""; i++ {
		if id := fmt.Sprint("infd-", i); partition.Of(id, runner.DefaultPartitions) == p {
			other = id
		}
	}
	g := &gate{open: make(chan struct{})}
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.open) }) }
	t.Cleanup(open)
	// The approver's policy re-run waits until the release checks: the
	// approval holds the run's lock while the check runs.
	inPolicy, deciding := make(chan struct{}, 1), make(chan struct{})
	var decided sync.Once
	decide := func() { decided.Do(func() { close(deciding) }) }
	t.Cleanup(decide)
	pol := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		if _, ok := policy.Reviewer(ctx); ok {
			select {
			case inPolicy <- struct{}{}:
			default:
			}
			<-deciding
		}
		return approvalAbove(ctx, a)
	})
	hook := func(event string, q int, _ string) {
		if event == "release-check" && q == p {
			decide()
		}
	}
	mk := func() *agent.Agent {
		return build(t, payThenAnswer(500), []tools.Tool{g.tool()}, pol, agent.WithToolTimeout(tools.Infinity()))
	}
	r1, _ := h.startRunner([]*agent.Agent{mk()}, runner.WithID(first), runner.WithDrainWindow(200*time.Millisecond), runner.WithHook(hook))
	until(t, "the first runner owns every partition", func() bool { return ownsAll(r1) })
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus(run, aggregate.StatusSuspended)
	act := s.Actions()[0]
	approved := make(chan error, 1)
	go func() {
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"})
		approved <- err
	}()
	receive(t, "the approval holding the run's lock", inPolicy)
	r2, _ := h.startRunner([]*agent.Agent{mk()}, runner.WithID(second), runner.WithDrainWindow(200*time.Millisecond))
	if err := receive(t, "the approval's answer", approved); err != nil {
		t.Fatalf("approve: %v", err)
	}
	until(t, "the approved body running", func() bool { return g.starts.Load() == 1 })
	// A retrying client: the partition may still be moving until the
	// release judged the run's work; then it is served again.
	rc := api.NewClient(h.srv.Conn, api.WithRetry(15*time.Second))
	if _, err := rc.Start(c, api.StartRequest{Run: other, Agent: "desk", Input: "x"}); err != nil {
		t.Fatalf("a start in the partition of a body without a deadline: %v (want it started)", err)
	}
	if s := h.state(run); len(s.Actions()) != 1 || s.Actions()[0].State != aggregate.ActionRunning || s.Runner() != first {
		t.Errorf("the infinite body's run moved while it ran (runner %s)", s.Runner())
	}
	open()
	s = h.waitStatus(run, aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Errorf("%s ended %s", run, events.DescribeOutcome(out))
	}
	checkGraceful(t, h, run, s)
	until(t, "the partition moved once its body ended", func() bool {
		for _, q := range r2.Stats().Partitions {
			if q == p {
				return true
			}
		}
		return false
	})
}
