package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

func researcher(t testing.TB) *agent.Agent {
	t.Helper()
	a, err := agent.New("researcher", model.NewScripted("r"), nil, policy.AlwaysAllow(), agent.WithMaxTurns(3)).Build()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestDelegate checks the tool of a sub-agent: named after the child, input
// schema {"input": string}, validated like any tool, no body, and found
// again by SubAgent and SubAgents.
func TestDelegate(t *testing.T) {
	child := researcher(t)
	tool := agent.Delegate(child, "Finds facts.")
	if tool.Name() != "researcher" || tool.Spec().Description != "Finds facts." {
		t.Fatalf("spec %+v", tool.Spec())
	}
	var schema struct {
		Properties map[string]struct{ Type string } `json:"properties"`
		Required   []string                         `json:"required"`
	}
	if err := json.Unmarshal(tool.Spec().InputSchema, &schema); err != nil || schema.Properties["input"].Type != "string" || len(schema.Required) != 1 {
		t.Fatalf("schema %s: %v", tool.Spec().InputSchema, err)
	}
	parent, err := agent.New("desk", model.NewScripted("d"), []tools.Tool{tool}, policy.AlwaysAllow(), agent.WithMaxChildren(2)).Build()
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := parent.SubAgent("researcher"); !ok || got != child {
		t.Fatal("SubAgent did not find the child")
	}
	if subs := parent.SubAgents(); len(subs) != 1 || subs[0] != child {
		t.Fatalf("SubAgents %v", subs)
	}
	if _, ok := child.SubAgent("researcher"); ok {
		t.Fatal("a child without delegations has a sub-agent")
	}
	if out, _, _ := parent.ValidateCall("researcher", json.RawMessage(`{"input":7}`)); out != events.CallInvalidArguments {
		t.Fatalf("bad input validated: %s", out)
	}
	if out, _, norm := parent.ValidateCall("researcher", json.RawMessage(`{"input":"find"}`)); out != events.CallValid || string(norm.JSON) != `{"input":"find"}` {
		t.Fatalf("validation %s %s", out, norm.JSON)
	}
	if r := tool.Invoke(context.Background(), tools.Call{}, json.RawMessage(`{"input":"x"}`), tools.Settlement{}); r.Outcome != events.OutcomeExplain {
		t.Fatalf("a delegation's body ran: %+v", r)
	}
	if parent.Limits().MaxChildren != 2 || parent.Limits().MaxDepth != agent.DefaultMaxDepth {
		t.Fatalf("limits %+v", parent.Limits())
	}
}

// ExampleDelegate declares a sub-agent as a tool of the payment desk: the
// model calls "researcher" with {"input": "..."}; the runtime runs a child
// run of the researcher and gives the model its answer.
func ExampleDelegate() {
	child, _ := agent.New("researcher", model.NewScripted("r", model.Answer("INV-7 is paid")), nil, policy.AlwaysAllow(),
		agent.WithSystem("You look facts up."), agent.WithMaxTurns(4)).Build()
	desk, err := agent.New("payment-desk", model.NewScripted("d"),
		[]tools.Tool{agent.Delegate(child, "Looks up facts about invoices.")},
		policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
			if a.Target == policy.TargetAgent {
				return policy.Allow(), nil
			}
			return policy.Deny("only delegations"), nil
		}),
		agent.WithMaxChildren(2), agent.WithMaxDepth(1),
	).Build()
	if err != nil {
		fmt.Println(err)
		return
	}
	sub, _ := desk.SubAgent("researcher")
	fmt.Println(sub.Ref(), string(desk.Specs()[0].InputSchema))
	// Output:
	// {researcher 1} {"type":"object","properties":{"input":{"type":"string","description":"the task for the sub-agent, in plain words"}},"required":["input"],"additionalProperties":false}
}
