package runner_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// Scenario 37 after a lapsed lease: runner A drives a suspended run, its
// liveness key lapses and runner B takes the run over; A, alive again and
// still holding the run in memory, receives a cancel. Its decision loses
// the append (B's takeover) and changes nothing — and the cancel is then
// routed to B and applied, instead of being refused with conflict.
func TestScenario37_CommandAfterLapsedLeaseIsRerouted(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	// The model call never answers: the run stays in flight, in its
	// driver's memory (a run waiting only for an approval would be idle,
	// out of memory, and taken over by nobody: idle.go).
	m := model.NewRules("s", model.Rule{Name: "hang", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, _ model.Request) (model.Reply, error) {
		<-ctx.Done()
		return model.Reply{}, ctx.Err()
	}})
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)) }
	h := newHarness(t)
	ida, idb := keeping("r37l") // the run stays A's when B joins
	// A and B on one fake ownership clock (ownClock), stepped until A
	// owns every partition and, once B joined, until the partitions
	// settled between them; it follows the wall clock from there, so
	// that both keep their liveness keys (the bucket's max age is the
	// server's time) while the takeover and the cancel go on.
	clk := newOwnClock(t).as(ida)
	clkb := clk.another().as(idb)
	h.unbalanced = true // the partitions move on the clock's steps
	ra, _ := h.startRunner([]*agent.Agent{mk()}, clk.options(nil)...)
	clk.advanceUntil(t, "A owns every partition", 40, func() bool { return ownsAll(ra) })
	clk.follow()
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "r37l", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	rb, _ := h.startRunner([]*agent.Agent{mk()}, clkb.options(nil)...)
	clk.balance(t, ra, rb)
	clk.follow()

	// A's key lapses (deleted here; A's next heartbeat puts it back) and B
	// is woken for the run meanwhile: B takes it over.
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	wake, _ := json.Marshal(map[string]any{"kind": "wake", "run": "r37l"})
	h.waitFor("r37l", "B's takeover", func(s aggregate.State) bool {
		if s.Runner() == rb.ID() {
			return true
		}
		_ = live.Delete(c, ra.ID())
		_, _ = h.srv.Conn.Request(runner.ForwardPrefix+rb.ID()+".cmd", wake, 5*time.Second)
		return false
	})

	// A still holds the run in memory; a cancel reaches A.
	body, _ := json.Marshal(api.CancelRequest{Schema: api.Schema, CommandID: "c", Run: "r37l"})
	fwd, _ := json.Marshal(map[string]any{"kind": api.EndpointCancel, "run": "r37l", "body": json.RawMessage(body)})
	reply := func() *api.ErrorReply {
		for {
			m, err := h.srv.Conn.Request(runner.ForwardPrefix+ra.ID()+".cmd", fwd, 5*time.Second)
			if err == nil {
				var er api.ErrorReply
				_ = json.Unmarshal(m.Data, &er)
				return &er
			}
			if c.Err() != nil {
				t.Fatal(err)
			}
			// wall clock: a retry of the forwarded cancel until A's service answers it
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if reply.Error != nil {
		t.Fatalf("cancel at the runner whose lease lapsed: %v, want it applied by the new driver", reply.Error)
	}
	_, out := finished(t, h, "r37l")
	if out.Kind != events.OutcomeCancelled || b.starts.Load() != 0 {
		t.Fatalf("outcome %s, starts %d", out.Kind, b.starts.Load())
	}
}
