package runner

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/telemetry"
)

// Sub-agent delegation (docs/adr/0007). The aggregate decides everything;
// the runner only keeps each delegated action's child run in step with it,
// idempotently, from whatever it observes:
//
//   - a committed child_started: start the child run (the same start path as
//     the API, under the id the aggregate derived, with the Parent link);
//     when this runner does not serve the recorded sub-agent (unknown_agent)
//     the child can never start: decide ChildSettle with a failed outcome,
//     reason unknown_agent, which the parent's model reads;
//   - a child run's committed run_finished: decide ChildSettle on the
//     parent (on the parent's driver: a forwarded wake when another live
//     runner drives it);
//   - a committed cancel_requested, or a detached delegation: cancel the
//     child;
//   - a takeover, start or wake of a run (act with all): do all of the above
//     for every delegated action, so nothing is lost with a runner.
//
// tendChild makes one such check for one delegation; it is serialized per
// child run and reads parent and child from the log.

// Start starts a run (api.Backend). Like a routed command it counts as a
// command in flight, which a drain waits for within its window, and it
// ends when the window ends (bounded): a start off its lane
// (api.ReleaseLane) never holds the drain past it.
func (r *Runner) Start(ctx context.Context, req api.StartRequest) (api.StartReply, error) {
	r.commands.Add()
	defer r.commands.Done()
	ctx, end := r.bounded(ctx)
	defer end()
	return r.start(ctx, req, nil)
}

// withSubAgents returns list followed by every sub-agent reachable through
// the delegations of its agents (agent.Delegate) that the list does not
// hold yet (by name and version), so that child runs are served.
func withSubAgents(list []*agent.Agent) []*agent.Agent {
	out := append([]*agent.Agent(nil), list...)
	have := map[events.AgentRef]bool{}
	for _, a := range list {
		have[a.Ref()] = true
	}
	for _, a := range list {
		for _, s := range a.SubAgents() {
			if !have[s.Ref()] {
				have[s.Ref()] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// delegationLimits are the calls of the batch over a delegation bound, by
// call id (the aggregate's DelegationLimits): the policy is not evaluated
// for them. valid names the calls whose arguments validated.
func delegationLimits(rn *run, b aggregate.CallBatch, valid map[string]bool) map[string]string {
	subs := map[string]bool{}
	for _, c := range b.Calls {
		if _, ok := rn.agent.SubAgent(c.Name); ok && valid[c.ID] {
			subs[c.ID] = true
		}
	}
	if len(subs) == 0 {
		return nil
	}
	return aggregate.DelegationLimits(rn.state, b.Turn, func(id string) bool { return subs[id] })
}

// delegationTarget marks res as a delegation when the called tool is a
// sub-agent, and returns the policy target of the call and whether the call
// is over a delegation bound (then the policy is not evaluated).
func delegationTarget(rn *run, c events.ToolCall, res *aggregate.Resolution, limited map[string]string) (policy.Target, bool) {
	sub, ok := rn.agent.SubAgent(c.Name)
	if !ok {
		return policy.TargetTool, false
	}
	ref := sub.Ref()
	res.Delegate = &ref
	_, over := limited[c.ID]
	return policy.TargetAgent, over
}

// targetOf is the policy target of an action of the agent's tool name.
func targetOf(a *agent.Agent, tool string) policy.Target {
	if _, ok := a.SubAgent(tool); ok {
		return policy.TargetAgent
	}
	return policy.TargetTool
}

// afterAppend is act's delegation step, after the appended events were
// applied and before the Pending work: telemetry, child runs to tend, and
// tool_changed. It returns true when it ended the run (tool_changed), so
// act has nothing left to do.
func (r *Runner) afterAppend(ctx context.Context, rn *run, appended []events.Event, all bool) bool {
	tend := map[string]bool{}
	for _, ev := range appended {
		switch e := ev.(type) {
		case events.ChildStarted:
			r.tel.Emit(ctx, telemetry.ChildStarted, "run", rn.id, "action", e.Action, "child", e.Child, "depth", strconv.Itoa(e.Depth))
			tend[e.Action] = true
		case events.ChildSettled:
			res := e.Outcome.Kind
			if e.Detached {
				res = "detached"
			}
			r.tel.Emit(ctx, telemetry.ChildSettled, "run", rn.id, "action", e.Action, "child", e.Child, "result", res)
			if e.Detached {
				tend[e.Action] = true
			}
		case events.CancelRequested:
			all = true
		case events.RunFinished:
			if p := rn.state.Parent(); p != nil {
				r.tendInBackground(p.Run, p.Action)
			}
		}
	}
	if all {
		for _, a := range rn.state.Actions() {
			if a.State == aggregate.ActionDelegated {
				tend[a.ID] = true
			}
		}
	}
	for _, a := range rn.state.Actions() { // in action order
		if tend[a.ID] {
			r.tendInBackground(rn.id, a.ID)
		}
	}
	if _, fin := rn.state.Finished(); fin || rn.state.Cancelling() {
		return false
	}
	// tool_changed: the run continues under its recorded agent name and
	// version, whose tools must still include every live action's tool.
	for _, a := range rn.state.Actions() {
		switch a.State {
		case aggregate.ActionAwaitingApproval, aggregate.ActionQueued, aggregate.ActionRunning:
		default:
			continue
		}
		if _, ok := rn.agent.Tool(a.Tool); ok {
			continue
		}
		if err := r.step(ctx, rn, aggregate.ToolMissing{Action: a.ID, Tool: a.Tool}); err != nil {
			r.log.Error("tool_changed", "run", rn.id, "action", a.ID, "tool", a.Tool, "err", err)
			if transient(err) {
				r.retryLater(rn.id)
			}
		}
		return true
	}
	return false
}

// childLocks serializes tendChild per child run id.
var childLocks sync.Map // child run id -> *sync.Mutex

// tendInBackground tends parent's delegated action in the runner's
// background group. Once the runner stops it tends nothing: a
// delegation left untended is tended again by the next driver of the
// parent (its takeover acts on every delegated action) or of the child
// (its run_finished).
func (r *Runner) tendInBackground(parent, action string) {
	r.bg.Go(func(ctx context.Context) { r.tendChild(ctx, parent, action) })
}

// tendChild brings the child run of parent's delegated action in step
// with the parent: starts it, settles the parent with its outcome, or
// cancels it, as the log says. It is idempotent and safe to call at any
// time from any runner; ctx bounds it.
func (r *Runner) tendChild(ctx context.Context, parent, action string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	child := aggregate.ChildRunID(parent, action)
	mu, _ := childLocks.LoadOrStore(child, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	ps, _, err := r.load(ctx, parent)
	if err != nil {
		r.log.Warn("delegation: load parent", "run", parent, "err", err)
		r.retryLater(parent)
		return
	}
	a, ok := ps.Action(action)
	if !ok || a.Child == nil {
		return
	}
	cs, _, err := r.load(ctx, child)
	if err != nil {
		r.log.Warn("delegation: load child", "run", child, "err", err)
		r.retryLater(parent)
		return
	}
	childOutcome, childDone := cs.Finished()
	_, parentDone := ps.Finished()
	switch {
	case a.State != aggregate.ActionDelegated || parentDone:
		// Settled, or detached because the parent finished first: a child
		// still running is cancelled.
		if cs.Exists() && !childDone {
			r.cancelChild(ctx, child, parent)
		}
	case !cs.Exists() && ps.Cancelling():
		// Cancelled before its child started: it never will.
		r.settleParent(ctx, parent, aggregate.ChildSettle{Action: action, Child: child, Outcome: events.Outcome{Kind: events.OutcomeCancelled, Reason: "not_started"}})
	case !cs.Exists():
		st := a.Child
		p := events.Parent{Run: parent, Action: action, Depth: st.Depth, FamilyTurns: st.FamilyTurns, MaxDepth: st.MaxDepth}
		_, err := r.start(ctx, api.StartRequest{Run: child, Agent: st.Agent.Name, Version: st.Agent.Version, Input: st.Input, Correlation: ps.Started().Correlation}, &p)
		switch weft.ErrorCode(err) {
		case "", weft.CodeAlreadyStarted:
		case weft.CodeUnknownAgent:
			// The parent's runner serves the parent's recorded agent and
			// version, hence its sub-agents: a recorded sub-agent it does
			// not serve means that agent version changed under the same
			// name (as tool_changed). The child can never start here; the
			// delegation ends with a failed child outcome the model reads
			// instead of waiting forever.
			r.log.Warn("delegation: sub-agent not served; the delegation fails", "run", parent, "action", action, "child", child, "agent", st.Agent.Name, "version", st.Agent.Version)
			r.settleParent(ctx, parent, aggregate.ChildSettle{Action: action, Child: child, Outcome: events.Outcome{Kind: events.OutcomeFailed, Reason: string(weft.CodeUnknownAgent)}})
		default:
			r.log.Warn("delegation: start child", "run", parent, "action", action, "child", child, "err", err)
			r.retryLater(parent)
		}
	case childDone:
		r.settleParent(ctx, parent, aggregate.ChildSettle{Action: action, Child: child, Outcome: childOutcome, Turns: cs.FamilyUsed()})
	case ps.Cancelling():
		r.cancelChild(ctx, child, parent)
	}
}

func (r *Runner) cancelChild(ctx context.Context, child, parent string) {
	_, err := r.Cancel(ctx, api.CancelRequest{Run: child, By: "parent " + parent, Reason: "parent cancelled or finished"})
	if err != nil && weft.ErrorCode(err) != weft.CodeRunEnded {
		r.log.Warn("delegation: cancel child", "run", parent, "child", child, "err", err)
		if transient(err) {
			r.retryLater(parent)
		}
	}
}

// settleParent decides c on the parent, on its driver: when another live
// runner drives the parent it is woken instead, and its own tending
// settles the child.
func (r *Runner) settleParent(ctx context.Context, parent string, c aggregate.ChildSettle) {
	err := r.command(ctx, parent, c)
	var fe *forwardError
	if errors.As(err, &fe) {
		err = r.forwardWake(ctx, fe.driver, parent)
	}
	switch weft.ErrorCode(err) {
	case "", weft.CodeAlreadyRecorded, weft.CodeRunEnded:
		return
	}
	r.log.Warn("delegation: settle parent", "run", parent, "action", c.Action, "err", err)
	if transient(err) {
		r.retryLater(parent)
	}
}
