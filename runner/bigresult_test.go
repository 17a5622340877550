package runner_test

import (
	"context"
	"strings"
	"testing"

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

// nearMax is an output that encodes just under the default max result
// bytes (1 MiB, docs/semantics.md §2).
var nearMax = strings.Repeat("x", 1<<20-64)

var hugeDef = tools.Define[payIn, payOut]("huge", "Return a large result.")

func hugeTool() tools.Tool {
	return tools.Bind(hugeDef, func(context.Context, tools.Call, payIn) (payOut, error) {
		return payOut{ID: nearMax}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// TestMaxResultBytesResultIsRecorded (docs/semantics.md §2 max result bytes,
// the
// succeeded side of scenario 13): a result just under the default max
// result bytes is reported and recorded — by the in-process worker and by
// an external worker over weft.api.report — and the run completes.
func TestMaxResultBytesResultIsRecorded(t *testing.T) {
	t.Parallel()
	for _, external := range []bool{false, true} {
		name := map[bool]string{false: "in-process", true: "external"}[external]
		t.Run(name, func(t *testing.T) {
			m := model.NewRules("s",
				model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "huge"); return ok }, Step: model.Answer("ok")},
				model.Rule{Name: "call", Match: func(model.Request) bool { return true }, Step: model.CallTools(model.Call("huge", `{"amount":1}`))})
			a := build(t, m, []tools.Tool{hugeTool()}, policy.Func(allow))
			h := newHarness(t)
			var opts []runner.Option
			if external {
				opts = append(opts, runner.WithExternalTools("huge"))
			}
			h.startRunner([]*agent.Agent{a}, opts...)
			if external {
				w := worker.New(h.srv.Connect(), h.srv.JS)
				w.Handle(deskQueue("huge"), runner.ToolHandler(hugeTool(), nil))
				wctx, stopW := context.WithCancel(context.Background())
				wdone := make(chan struct{})
				go func() { defer close(wdone); _ = w.Run(wctx) }()
				t.Cleanup(func() { stopW(); <-wdone })
			}
			if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "big", Agent: "desk", Input: "x"}); err != nil {
				t.Fatal(err)
			}
			s, out := finished(t, h, "big")
			act := s.Actions()[0]
			if out.Kind != events.OutcomeCompleted || act.State != aggregate.ActionSucceeded || len(act.Content) < 1<<20-64 {
				t.Fatalf("outcome %s, action %s (%d bytes) %q", out.Kind, act.State, len(act.Content), act.Detail)
			}
		})
	}
}
