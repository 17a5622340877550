package runner_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// TestSemantics7_AHandedTasksClaimGoesOutWithItsFenceAndTheBodyWaitsForTheFence:
// the claim of an attempt the runner's own worker runs is created while
// the model reply that fences it is appended, not after
// (docs/adr/0031-claim-with-the-fence.md), and the body still starts only
// once its fence is in the log (docs/semantics.md §7: nothing acts before
// it is recorded). The runner is held before each such append is sent
// (the hook "resolution-appending") until the attempt's claim is stored in
// weft_claims — which, before the change, was created only after the
// append's acknowledgement, so the hold never ended — and no body may have
// started then. Every body reads the run's log as it starts and must find
// its attempt's fence there.
func TestSemantics7_AHandedTasksClaimGoesOutWithItsFenceAndTheBodyWaitsForTheFence(t *testing.T) {
	t.Parallel()
	const run = "claim-fence"
	h := newHarness(t)
	var starts, fenced atomic.Int64
	body := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		if call.Run != run {
			return payOut{ID: "pay-" + call.Action}, nil // a warm-up run
		}
		starts.Add(1)
		envs, _, err := h.srv.Log.Load(ctx, call.Run)
		if err != nil {
			return payOut{}, err
		}
		for _, env := range envs {
			if ev, err := env.Event(); err == nil {
				if f, ok := ev.(events.AttemptFenced); ok && f.Action == call.Action && f.Attempt == call.Attempt {
					fenced.Add(1)
				}
			}
		}
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.CallTools(payCall(2, "ok")), model.Answer("done"))
	a := build(t, m, []tools.Tool{body}, policy.Func(allow))

	var held, claimedFirst atomic.Int64
	seen := map[string]bool{} // claim keys seen by earlier holds (the hook runs under the run's lock)
	hook := func(event string, _ int, id string) {
		if event != "resolution-appending" || id != run {
			return
		}
		held.Add(1)
		before := starts.Load()
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		claims, err := h.srv.JS.KeyValue(c, worker.ClaimsBucket)
		if err != nil {
			t.Errorf("claims bucket: %v", err)
			return
		}
		wt, err := claims.Watch(c, run+".>")
		if err != nil {
			t.Errorf("watch the run's claims: %v", err)
			return
		}
		defer func() { _ = wt.Stop() }()
		for {
			select {
			case e := <-wt.Updates():
				if e == nil || e.Operation() != jetstream.KeyValuePut || seen[e.Key()] {
					continue
				}
				seen[e.Key()] = true
				claimedFirst.Add(1)
				if n := starts.Load(); n != before {
					t.Errorf("a body started while its fence was not appended yet (%d starts, %d before)", n, before)
				}
				return
			case <-c.Done():
				t.Errorf("append %d of a reply with its fence: no new claim stored before it was sent", held.Load())
				return
			}
		}
	}
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithHook(hook))
	// The in-process worker takes tasks once it set up its consumers: runs
	// before the measured one until it took one.
	for i := 0; r.HandedOff() == 0; i++ {
		if i == 20 {
			t.Fatal("the runner's worker took no task in 20 runs")
		}
		warm := fmt.Sprint("warm-", i)
		if _, err := h.client.Start(ctx(t), api.StartRequest{Run: warm, Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(warm, aggregate.StatusFinished)
	}
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus(run, aggregate.StatusFinished)
	if held.Load() != 2 || claimedFirst.Load() != 2 {
		t.Errorf("%d replies appended with their fences, %d claims stored before them; want 2 and 2", held.Load(), claimedFirst.Load())
	}
	if starts.Load() != 2 || fenced.Load() != 2 {
		t.Errorf("%d body starts, %d of them with their fence in the log; want 2 and 2", starts.Load(), fenced.Load())
	}
}
