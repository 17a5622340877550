package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// A delegation whose recorded sub-agent (name and version) no runner driving
// the parent serves (docs/semantics.md §2, an action ends in a definite state
// the
// model reads, like unknown_tool): the parent's runner cannot start the
// child (unknown_agent), so the delegated action settles with a failed child
// outcome, reason unknown_agent, instead of waiting forever; the model reads
// the error and the run completes.
func TestDelegation_UnservedSubAgentFailsTheAction(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var b bodies
	recorded := researcherAgent(t, &b) // researcher, default version
	served, err := agent.New("researcher", model.NewScripted("researcher", model.Answer("never")), []tools.Tool{b.tool()}, policy.AlwaysAllow(), agent.WithVersion("other")).Build()
	if err != nil {
		t.Fatal(err)
	}
	call := model.Call("researcher", `{"input":"check invoice 7"}`)
	call.ID = "call_1_1"
	old := build(t, model.NewScripted("desk", model.Answer("unused")), []tools.Tool{agent.Delegate(recorded, "Looks facts up.")}, policy.AlwaysAllow())

	// The parent's history up to child_started, written by a runner
	// ("ghost") that is gone before it started the child.
	c := ctx(t)
	var s aggregate.State
	hd := appendDecided(t, h, "du1", &s, aggregate.Start{Run: "du1", Agent: old.Ref(), Input: "is invoice 7 paid?", Limits: old.Limits(), Runner: "ghost"})
	hd = appendDecidedAt(t, h, "du1", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	ref := recorded.Ref()
	appendDecidedAt(t, h, "du1", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}, Delegate: &ref}}})
	if a, ok := s.Action("1/" + call.ID); !ok || a.State != aggregate.ActionDelegated || a.Child == nil {
		t.Fatalf("crafted history: action %+v", s.Actions())
	}
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, runner.DriverKey("du1", runner.DefaultPartitions), []byte("ghost")); err != nil {
		t.Fatal(err)
	}

	// The runner that takes the parent over serves desk (same version) but
	// delegating to another version of researcher.
	parent := build(t, model.NewRules("desk", model.Rule{Name: "echo", Match: func(model.Request) bool { return true }, Step: echoResults}), []tools.Tool{agent.Delegate(served, "Looks facts up.")}, policy.AlwaysAllow())
	h.startRunner([]*agent.Agent{parent})
	fs := h.waitStatus("du1", aggregate.StatusFinished)
	o, _ := fs.Finished()
	act, _ := fs.Action("1/" + call.ID)
	if o.Kind != events.OutcomeCompleted || act.State != aggregate.ActionChildSettled || !strings.Contains(string(o.Answer), "unknown_agent") {
		t.Fatalf("parent outcome %s, action %s %s", events.DescribeOutcome(o), act.State, act.Content)
	}
	if b.starts.Load() != 0 {
		t.Fatal("a child body ran")
	}
}

func appendDecided(t *testing.T, h *harness, run string, s *aggregate.State, c aggregate.Command) eventlog.Head {
	t.Helper()
	return appendDecidedAt(t, h, run, s, eventlog.Head{}, c)
}

func appendDecidedAt(t *testing.T, h *harness, run string, s *aggregate.State, head eventlog.Head, c aggregate.Command) eventlog.Head {
	t.Helper()
	now := time.Now()
	evs, err := aggregate.Decide(*s, c, now)
	if err != nil {
		t.Fatal(err)
	}
	envs, next, err := h.srv.Log.Append(context.Background(), run, head, now, evs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		*s = aggregate.Evolve(*s, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return next
}
