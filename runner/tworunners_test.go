package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// countingBodies counts body starts per run.
type countingBodies struct {
	mu     sync.Mutex
	starts map[string]int
}

func (b *countingBodies) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		b.mu.Lock()
		b.starts[call.Run]++
		b.mu.Unlock()
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// Two runners serve the same 500 runs (scenario 37 at scale): every run
// needs an approval; a third of them are approved, a third cancelled and a
// third get both at once, each command sent through the shared queue group
// so either runner may receive it. Every run reaches a stable state and no
// body starts more than once; approved-only runs complete with exactly one
// start; cancelled ones never start after the cancel wins.
func TestTwoRunners500Runs(t *testing.T) {
	t.Parallel()
	const n = 500
	h := newHarness(t)
	b := &countingBodies{starts: map[string]int{}}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)) }
	h.startRunner([]*agent.Agent{mk()})
	h.startRunner([]*agent.Agent{mk()})
	// One deadline for all 1,000+ commands: generous, so that a loaded
	// machine slows the test down instead of failing it.
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			run := fmt.Sprint("tw-", i)
			if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
				t.Errorf("start %s: %v", run, err)
			}
		}()
	}
	wg.Wait()
	for i := range n {
		run := fmt.Sprint("tw-", i)
		s := h.waitStatus(run, aggregate.StatusSuspended)
		act, _ := s.Action(aggregate.Status(s).Approvals[0])
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			// A command a loaded runner could not apply in time (runner_busy,
			// outcome_unknown, …) is sent again with its command id until it
			// gets a definite answer.
			approve := func() error {
				return retrying(c, func() error {
					_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
					return err
				})
			}
			cancel := func() error {
				return retrying(c, func() error { _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c", Run: run}); return err })
			}
			switch i % 3 {
			case 0:
				if err := approve(); err != nil {
					t.Errorf("%s: approve: %v", run, err)
				}
			case 1:
				if err := cancel(); err != nil {
					t.Errorf("%s: cancel: %v", run, err)
				}
			case 2:
				// Whichever loses may be refused because the run ended.
				var inner sync.WaitGroup
				inner.Add(2)
				check := func(what string, err error) {
					if err != nil && weft.ErrorCode(err) != weft.CodeRunEnded {
						t.Errorf("%s: %s: %v", run, what, err)
					}
				}
				go func() { defer inner.Done(); check("approve", approve()) }()
				go func() { defer inner.Done(); check("cancel", cancel()) }()
				inner.Wait()
			}
		}()
	}
	wg.Wait()
	for i := range n {
		run := fmt.Sprint("tw-", i)
		s := h.waitStatus(run, aggregate.StatusFinished)
		out, _ := s.Finished()
		b.mu.Lock()
		starts := b.starts[run]
		b.mu.Unlock()
		if starts > 1 {
			t.Errorf("%s: body started %d times", run, starts)
		}
		switch i % 3 {
		case 0:
			if out.Kind != events.OutcomeCompleted || starts != 1 {
				t.Errorf("%s: approved run ended %s with %d starts", run, out.Kind, starts)
			}
		case 1:
			if out.Kind != events.OutcomeCancelled || starts != 0 {
				t.Errorf("%s: cancelled run ended %s with %d starts", run, out.Kind, starts)
			}
		case 2:
			if out.Kind != events.OutcomeCancelled && out.Kind != events.OutcomeCompleted {
				t.Errorf("%s: raced run ended %s", run, out.Kind)
			}
		}
	}
}
