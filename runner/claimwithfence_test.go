package runner_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
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
		claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
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
	warmHandOff(t, h, r)
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

// TestSemantics8_AHandedTasksCopyThatIsNotAcknowledgedIsPublishedAgain:
// the stream copy of a task the runner's own worker took (with
// runner.WithEagerTaskCopy; copyFallback's failure takes the same path,
// docs/adr/0039) is acknowledged
// off the run's lock (docs/adr/0031-claim-with-the-fence.md); a copy the
// server refuses is published again by the run's next act, so that the
// fallback of the handed task is not dropped (docs/semantics.md §8: work
// not recorded is derived again, never dropped) — also when the run's
// lock is held, as a command or a stalled step holds it, from the copy's
// failure until its republish is arranged (the attempt was left marked
// dispatched when its lock could not be had: fenced, with no copy).
// WEFT_TASKS refuses every task (its max message size cut to 16 bytes)
// until the copy was published a second time while the body runs, then
// accepts them again: the run completes, its body started once.
func TestSemantics8_AHandedTasksCopyThatIsNotAcknowledgedIsPublishedAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hold bool
	}{{"the run's lock free", false}, {"the run's lock held", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			copyPublishedAgain(t, tc.hold)
		})
	}
}

func copyPublishedAgain(t *testing.T, hold bool) {
	const run = "copy-again"
	h := newHarness(t)
	started, release := make(chan struct{}), make(chan struct{})
	var starts atomic.Int64
	body := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		if call.Run == run && starts.Add(1) == 1 {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return payOut{}, ctx.Err()
			}
		}
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("done"))
	a := build(t, m, []tools.Tool{body}, policy.Func(allow))
	var rp atomic.Pointer[runner.Runner]
	var held atomic.Bool
	var unlock func()
	hook := func(event string, _ int, id string) {
		if !hold || id != run {
			return
		}
		switch {
		case event == "copy-unacknowledged" && held.CompareAndSwap(false, true):
			u, ok := runner.HoldRun(rp.Load(), run)
			if !ok {
				t.Error("the run is not in memory at its copy's failure")
				return
			}
			unlock = u
		case event == "copy-lost" && unlock != nil:
			u := unlock
			unlock = nil
			u()
		}
	}
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithHook(hook), runner.WithEagerTaskCopy())
	rp.Store(r)
	warmHandOff(t, h, r)
	c := ctx(t)
	// Every publish of a task reaches this spy, stored or refused.
	spy := h.srv.Connect()
	var copies atomic.Int64
	again := make(chan struct{})
	sub, err := spy.Subscribe(api.Queue{Agent: "desk", Version: a.Version(), Tool: "pay"}.Subject(), func(msg *nats.Msg) {
		var tk api.Task
		if json.Unmarshal(msg.Data, &tk) == nil && tk.Run == run && copies.Add(1) == 2 {
			close(again)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	tasks, err := h.srv.JS.Stream(c, api.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tasks.CachedInfo().Config
	limit := cfg
	limit.MaxMsgSize = 16
	if _, err := h.srv.JS.UpdateStream(c, limit); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-c.Done():
		t.Fatal("the handed task's body did not start")
	}
	select {
	case <-again:
	case <-c.Done():
		t.Fatalf("the refused copy was not published again (%d publishes)", copies.Load())
	}
	if _, err := h.srv.JS.UpdateStream(c, cfg); err != nil {
		t.Fatal(err)
	}
	close(release)
	h.waitStatus(run, aggregate.StatusFinished)
	if n := starts.Load(); n != 1 {
		t.Errorf("%d body starts, want 1", n)
	}
}
