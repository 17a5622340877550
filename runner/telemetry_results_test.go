package runner_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

// results lists the "result" attribute of every emitted name.
func (e *events_) results(name telemetry.Name) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.got {
		if ev.Name != name {
			continue
		}
		for _, kv := range ev.Attrs {
			if kv.Key == "weft.result" {
				out = append(out, kv.Value.AsString())
			}
		}
	}
	return out
}

type typedAnswer struct {
	OK bool `json:"ok"`
}

// docs/semantics.md §11: model_turn carries answer_rejected, protocol_violation
// and budget_stop for turns the decision refused, and tool_settled
// effect_uncertain for an attempt lost with nothing left but uncertainty.
func TestTelemetryResults(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	hang := tools.WithTimeout(b.tool(), tools.After(50*time.Millisecond))
	cases := []struct {
		name    string
		agent   func(t *testing.T) *agent.Agent
		event   telemetry.Name
		want    string
		notAlso string
	}{
		{"answer_rejected", func(t *testing.T) *agent.Agent {
			m := model.NewScripted("s", model.Answer("not json"), model.Answer(`{"ok":true}`))
			return build(t, m, nil, policy.Func(allow), agent.WithTypedAnswer[typedAnswer]())
		}, telemetry.ModelTurn, "answer_rejected", ""},
		{"protocol_violation", func(t *testing.T) *agent.Agent {
			m := model.NewScripted("s", model.CallTools())
			return build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
		}, telemetry.ModelTurn, "protocol_violation", "tool_request"},
		{"budget_stop", func(t *testing.T) *agent.Agent {
			m := model.NewScripted("s", model.CallTools(payCall(1, "ok")))
			return build(t, m, []tools.Tool{b.tool()}, policy.Func(allow), agent.WithMaxTurns(1))
		}, telemetry.ModelTurn, "budget_stop", "tool_request"},
		{"effect_uncertain", func(t *testing.T) *agent.Agent {
			m := model.NewScripted("s", model.CallTools(payCall(1, "hang")), model.Answer("ok"))
			return build(t, m, []tools.Tool{hang}, policy.Func(allow))
		}, telemetry.ToolSettled, "effect_uncertain", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tel := &events_{}
			h := newHarness(t)
			h.startRunner([]*agent.Agent{c.agent(t)}, runner.WithTelemetry(telemetry.New(telemetry.WithHandler(tel.handler))))
			if _, err := h.client.Start(context.Background(), api.StartRequest{Run: "tr", Agent: "desk", Input: "x"}); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			for !slices.Contains(tel.results(c.event), c.want) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			got := tel.results(c.event)
			if !slices.Contains(got, c.want) || (c.notAlso != "" && slices.Contains(got, c.notAlso)) {
				t.Fatalf("%s results %v, want %s (and not %q)", c.event, got, c.want, c.notAlso)
			}
		})
	}
}
