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
)

// warmHandOff starts runs of agent desk on r until r's in-process worker
// took a task (it takes tasks once it set up its consumers), so that the
// next reply's claims are prepared with their fences.
func warmHandOff(t *testing.T, h *harness, r *runner.Runner) {
	t.Helper()
	for i := 0; r.HandedOff() == 0; i++ {
		if i == 20 {
			t.Fatal("the runner's worker took no task in 20 runs")
		}
		warm := fmt.Sprint("warm-", i)
		h.startServed(ctx(t), api.StartRequest{Run: warm, Agent: "desk", Input: "x"})
		h.waitStatus(warm, aggregate.StatusFinished)
	}
}

// newClaimOf waits for a claim of run to be stored in weft_claims (10 s
// at most), reporting whether one was.
func newClaimOf(t *testing.T, h *harness, run string) bool {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Errorf("claims bucket: %v", err)
		return false
	}
	wt, err := claims.Watch(c, run+".>")
	if err != nil {
		t.Errorf("watch the run's claims: %v", err)
		return false
	}
	defer func() { _ = wt.Stop() }()
	for {
		select {
		case e := <-wt.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				return true
			}
		case <-c.Done():
			t.Errorf("no claim of %s stored within 10 s", run)
			return false
		}
	}
}

// noClaimsOf waits until weft_claims holds no claim of run.
func noClaimsOf(t *testing.T, h *harness, run string) {
	t.Helper()
	claims, err := h.srv.JS.KeyValue(ctx(t), api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	until(t, "no claim of "+run+" is left", func() bool {
		l, err := claims.ListKeysFiltered(ctx(t), run+".>")
		if err != nil {
			return false
		}
		n := 0
		for range l.Keys() {
			n++
		}
		return n == 0
	})
}

// TestSemantics7_APreparedClaimWhoseRedecidedAppendDoesNotFenceItIsRemoved:
// a model reply's append with its fence conflicts with a cancel recorded
// meanwhile (appended from the hook "resolution-appending", as another
// runner's command would be); decided again on the cancelled run, the
// reply fences nothing, so the attempt's claim prepared with the first
// pass (docs/adr/0031-claim-with-the-fence.md) is aborted: the body never
// starts (docs/semantics.md §7: nothing acts before it is recorded) and the
// claim is removed.
func TestSemantics7_APreparedClaimWhoseRedecidedAppendDoesNotFenceItIsRemoved(t *testing.T) {
	t.Parallel()
	const run = "conflict-abort"
	h := newHarness(t)
	var starts atomic.Int64
	body := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		if call.Run == run {
			starts.Add(1)
		}
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("done"))
	a := build(t, m, []tools.Tool{body}, policy.Func(allow))
	var appending, conflicted atomic.Int64
	hook := func(event string, _ int, id string) {
		if event != "resolution-appending" || id != run {
			return
		}
		appending.Add(1)
		if conflicted.Load() != 0 {
			return
		}
		// The attempt's claim goes out with the append (prepared).
		if !newClaimOf(t, h, run) {
			return
		}
		// Under the run's lock: the log is written past the runner.
		_, head, err := h.srv.Log.Load(context.Background(), run)
		if err != nil {
			t.Errorf("load: %v", err)
			return
		}
		if _, _, err := h.srv.Log.Append(context.Background(), run, head, time.Now(), events.CancelRequested{By: "ops", Reason: "meanwhile"}); err != nil {
			t.Errorf("the conflicting cancel: %v", err)
			return
		}
		conflicted.Add(1)
	}
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithHook(hook))
	warmHandOff(t, h, r)
	h.startServed(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	until(t, "the cancel appended past the runner", func() bool { return conflicted.Load() == 1 })
	noClaimsOf(t, h, run)
	if n := appending.Load(); n != 1 {
		t.Errorf("%d appends of a reply with its fence, want 1 (the pass after the conflict fences nothing)", n)
	}
	for _, a := range h.state(run).Actions() {
		t.Errorf("action %s recorded (%s), want none: the run was cancelled before the reply's fence", a.ID, a.State)
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("%d body starts for a fence never recorded, want 0", n)
	}
}

// TestSemantics8_APreparedClaimWhoseFencesAppendIsNotAcknowledgedRunsTheBodyOnce:
// the append of a model reply with its fence, whose attempt's claim went
// out with it (docs/adr/0031-claim-with-the-fence.md), is not acknowledged.
// Landed, the runner reads its decision back (resync) and gives the
// prepared task its go; not landed, the preparation is aborted and the
// reply recorded again, its attempt handed off then. Either way the body
// runs once and the run completes (docs/semantics.md §8: pending work is
// retried, never dropped, and not done twice).
func TestSemantics8_APreparedClaimWhoseFencesAppendIsNotAcknowledgedRunsTheBodyOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ackLost bool
	}{{"not landed: aborted, recorded again", false}, {"landed: read back, given its go", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const run = "unknown-prepared"
			b := &bodies{}
			m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
			a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
			h := newHarness(t)
			js := &replyFaultJS{JetStream: h.srv.JS, ackLost: tc.ackLost, run: run}
			var prepared atomic.Int64
			hook := func(event string, _ int, id string) {
				if event == "resolution-appending" && id == run {
					prepared.Add(1)
				}
			}
			r := h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithLease(2*time.Second), runner.WithHook(hook))
			warmHandOff(t, h, r)
			warm := b.starts.Load()
			h.startServed(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"})
			s, out := finished(t, h, run)
			if !js.fired.Load() || prepared.Load() == 0 {
				t.Fatalf("faulted %v, %d appends of the reply with its prepared claim: want the faulted append prepared", js.fired.Load(), prepared.Load())
			}
			if out.Kind != events.OutcomeCompleted || s.Actions()[0].State != aggregate.ActionSucceeded || b.starts.Load()-warm != 1 {
				t.Fatalf("outcome %s, action %s, %d starts (want completed, succeeded, 1)", out.Kind, s.Actions()[0].State, b.starts.Load()-warm)
			}
		})
	}
}
