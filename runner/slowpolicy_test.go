package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §5: an attempt's deadline is its fence's time plus the
// tool's timeout, and the body has that whole timeout. The policy that
// decides a model reply's call answers before the fence is decided: the
// fence is stamped after the policy answered, so a slow policy does not
// shorten the body's time (a 500 ms policy and a 300 ms body under a
// 700 ms timeout end succeeded, on the first attempt), and the log
// records the timeout the body had.
func TestSemantics5_ASlowPolicyDoesNotShortenTheToolsTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 700 * time.Millisecond
	var mu sync.Mutex
	var answered time.Time // when the policy last answered
	slow := func(context.Context, policy.Action) (policy.Decision, error) {
		time.Sleep(500 * time.Millisecond)
		mu.Lock()
		answered = time.Now()
		mu.Unlock()
		return policy.Allow(), nil
	}
	tool := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		select {
		case <-time.After(300 * time.Millisecond):
			return payOut{ID: "x"}, nil
		case <-ctx.Done():
			return payOut{}, ctx.Err()
		}
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{tools.WithTimeout(tool, tools.After(timeout))}, policy.Func(slow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "sp1", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("sp1", "settled", func(s aggregate.State) bool {
		st := aggregate.Status(s).Kind
		return st == aggregate.StatusFinished || st == aggregate.StatusSuspended
	})
	act := s.Actions()[0]
	if act.State != aggregate.ActionSucceeded || act.Attempts != 1 {
		t.Fatalf("action %s (%s) after %d attempts, want succeeded after 1", act.State, act.Detail, act.Attempts)
	}
	mu.Lock()
	policyAnswered := answered
	mu.Unlock()
	if act.FencedAt.Before(policyAnswered) {
		t.Fatalf("the fence is recorded at %s, before the policy answered (%s)", act.FencedAt, policyAnswered)
	}
	if d := act.Attempt.Deadline; d == nil || d.Sub(act.FencedAt) != timeout {
		t.Fatalf("the fence's deadline is %v for a fence at %s, want the fence's time plus %s", d, act.FencedAt, timeout)
	}
}
