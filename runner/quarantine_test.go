package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// docs/adr/0011-quarantine-and-repair-of-malformed-messages.md, with
// docs/semantics.md §5 ("an attempted action is never
// reported as not having happened") and §8 (nothing acts on a state it
// cannot derive): a malformed message lands on a run's subject while one
// of its tool bodies runs. The runner refuses every command on the run
// (quarantined) and keeps serving another run, which completes; the body's
// report is not recorded while the run is quarantined, and the worker keeps
// it instead of dropping it; once the message is voided the report lands,
// the action ends succeeded (not uncertain, not not_started) with its body
// started exactly once, and the run completes.
func TestAnAttemptInFlightOfAQuarantinedRunIsKeptUntilRepaired(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := map[string]int{}
	gate := make(chan struct{})
	tool := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		mu.Lock()
		starts[call.Run]++
		mu.Unlock()
		if call.Run == "rq" {
			<-gate
		}
		return payOut{ID: "p-" + call.Run}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	started := func(run string) int {
		mu.Lock()
		defer mu.Unlock()
		return starts[run]
	}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(1, "ok"))})
	h := newHarness(t)
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{tool}, policy.Func(allow))})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "rq", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("rq", "the body running", func(aggregate.State) bool { return started("rq") == 1 })

	ack, err := h.srv.JS.Publish(c, eventlog.Subject("rq"), []byte("garbage"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c1", Run: "rq"}); !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
		t.Fatalf("cancel of the quarantined run: %v, want quarantined", err)
	}
	// Another run is served meanwhile.
	if _, err := h.client.Start(c, api.StartRequest{Run: "rok", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "rok"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("the healthy run: %s", out.Kind)
	}

	close(gate) // the body returns; its report meets the quarantine
	if _, _, err := h.srv.Log.Load(c, "rq"); !errors.Is(err, &weft.Error{Code: weft.CodeQuarantined}) {
		t.Fatalf("load of the poisoned run: %v, want quarantined", err)
	}
	if _, err := h.srv.Log.Void(c, "rq", ack.Sequence, "published by a test", "tester", time.Now()); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "rq")
	a := s.Actions()
	if out.Kind != events.OutcomeCompleted || len(a) != 1 || a[0].State != aggregate.ActionSucceeded || started("rq") != 1 {
		t.Fatalf("after repair: outcome %s, actions %+v, starts %d; want completed, one succeeded action, one start", out.Kind, a, started("rq"))
	}
}
