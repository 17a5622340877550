package agent

import (
	"context"
	"errors"

	"github.com/weftrun/weft/tools"
)

// DelegateInput is what the model sends when it calls a sub-agent: the
// child run's input.
type DelegateInput struct {
	Input string `json:"input" jsonschema:"the task for the sub-agent, in plain words"`
}

// errNoBody is returned by a delegation's Invoke: a delegation has no body.
var errNoBody = errors.New("a sub-agent delegation has no tool body: the runtime starts a child run")

// delegation is the tool of a sub-agent.
type delegation struct {
	tools.Tool
	child *Agent
}

// Delegate returns a tool through which an agent delegates to child (a
// sub-agent, docs/semantics.md §1): the model calls it by child's name with
// {"input": text}, and instead of running a body the runtime starts a child
// run of child with that input and gives the model the child's answer (or an
// error naming the child's outcome). description is what the model is told
// about the sub-agent.
//
// The delegating run's own limits bound delegation (checked before policy):
// max children (WithMaxChildren, default 4) and max depth (WithMaxDepth,
// default 1: a root run may delegate, its children may not); the family
// turn budget (the root's max turns shared by the family) bounds the
// child's turns. The policy sees the action with target policy.TargetAgent.
// A delegation has no body timeout and holds no concurrency slot; the child
// run's own limits bound it. Register child with the runtime too (the
// runner registers the sub-agents of its agents itself).
//
// tools.WithReplay and tools.WithTimeout mean nothing for a delegation:
// do not apply them to the returned tool.
func Delegate(child *Agent, description string) tools.Tool {
	def := tools.Define[DelegateInput, string](child.Name(), description)
	t := tools.Bind(def, func(context.Context, tools.Call, DelegateInput) (string, error) { return "", errNoBody },
		func(error) tools.Failure { return tools.Explain(errNoBody.Error()) })
	return &delegation{Tool: t, child: child}
}

// SubAgent returns the sub-agent of a tool made by Delegate, and false for
// any other tool.
func SubAgent(t tools.Tool) (*Agent, bool) {
	d, ok := t.(*delegation)
	if !ok {
		return nil, false
	}
	return d.child, true
}

// SubAgent returns the sub-agent the agent's tool called name delegates
// to, and false when that tool is not a delegation (or does not exist).
func (a *Agent) SubAgent(name string) (*Agent, bool) {
	t, ok := a.byName[name]
	if !ok {
		return nil, false
	}
	return SubAgent(t)
}

// SubAgents returns every agent reachable through the agent's delegations,
// depth first in tool order, each once (the agent itself excluded).
func (a *Agent) SubAgents() []*Agent {
	var out []*Agent
	seen := map[*Agent]bool{a: true}
	var walk func(*Agent)
	walk = func(x *Agent) {
		for _, t := range x.tools {
			if c, ok := SubAgent(t); ok && !seen[c] {
				seen[c] = true
				out = append(out, c)
				walk(c)
			}
		}
	}
	walk(a)
	return out
}
