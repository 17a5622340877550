// Package tsdktest holds the Go side of the TypeScript SDK's tests
// (sdk/typescript, docs/typescript.md) and the worker conformance suite
// that the Go worker and the TypeScript worker both run (RunWorkerSuite):
// an agent whose tools are all served by workers outside the runner's
// process (Build), and the state of a run folded from its log (State).
// cmd/tsdkharness serves them to the Node tests; cmd/goworker is the Go
// worker as a process, the twin of sdk/typescript/test/support/hanging-worker.js.
package tsdktest

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/tools"
)

// AgentName is the name of the agent Build builds; its version is
// agent.DefaultVersion.
const AgentName = "tsdk"

// In is the input of every tool of the agent: the workers' bodies read
// Mode to decide what they do ("" returns Out{Text}, "hang" runs until
// stopped, "finish" returns after 1.5 s whatever happens).
type In struct {
	Text string `json:"text"`
	Mode string `json:"mode,omitempty"`
}

// Out is the output of every tool of the agent.
type Out struct {
	Text string `json:"text"`
}

// The agent's tools, all served by external workers. Their settings are
// what the tests need: echo is a plain non-replayable tool; slow has a
// one-second timeout; replay may be started again three times; settle is
// a settling tool with a ten-second window (a late return after 1.5 s
// lands well inside it on a loaded machine); guarded needs an approval
// (requirement "finance" version 1, approver "tsdk", which trusts the
// credential it is given as the reviewer's name).
var (
	echoDef   = tools.Define[In, Out]("echo", "Echo the text.")
	slowDef   = tools.Define[In, Out]("slow", "Echo the text, with a one-second timeout.")
	replayDef = tools.Define[In, Out]("replay", "Echo the text; replayable.")
	settleDef = tools.Define[In, Out]("settle", "Echo the text; settles.")
	guardDef  = tools.Define[In, Out]("guarded", "Echo the text once a person approved it.")
)

// ToolNames are the names of the agent's tools, to leave to external
// workers (runner.WithExternalTools).
func ToolNames() []string { return []string{"echo", "slow", "replay", "settle", "guarded"} }

// external is the Go body of a tool served outside the process: the
// runner never runs it (runner.WithExternalTools).
func external(context.Context, tools.Call, In) (Out, error) {
	return Out{}, errors.New("served by an external worker")
}

func externalSettling(context.Context, tools.Call, In, *tools.Settler[Out]) (Out, error) {
	return Out{}, errors.New("served by an external worker")
}

func uncertain(err error) tools.Failure { return tools.Uncertain(err.Error()) }

// Build builds the agent. Its approvers are "tsdk" (approvers.Trusting:
// the credential is the reviewer) and, with signing keys given, "keys"
// (approvers.Signed: proofs signed with any of those public user nkeys,
// reviewer "carol"). Its scripted model reads the run's input as a
// JSON array of calls, [{"tool":"echo","args":{"text":"hi"}}], asks for
// them all in turn 1, and answers turn 2 with the tool results the model
// read, as a JSON array of their contents in call order.
func Build(signingKeys ...string) (*agent.Agent, error) {
	ts := []tools.Tool{
		tools.WithTimeout(tools.Bind(echoDef, external, uncertain), tools.After(30*time.Second)),
		tools.WithTimeout(tools.Bind(slowDef, external, uncertain), tools.After(time.Second)),
		tools.WithReplay(tools.WithTimeout(tools.Bind(replayDef, external, uncertain), tools.After(30*time.Second)), 3),
		tools.WithTimeout(tools.BindSettling(settleDef, externalSettling, uncertain, 10*time.Second), tools.After(time.Second)),
		tools.WithTimeout(tools.Bind(guardDef, external, uncertain), tools.After(30*time.Second)),
	}
	p := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		if a.Tool == guardDef.Name() {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		return policy.Allow(), nil
	})
	list := []*approvers.Approver{approvers.Trusting("tsdk")}
	if len(signingKeys) > 0 {
		keys := make([]approvers.Key, len(signingKeys))
		for i, k := range signingKeys {
			keys[i] = approvers.Key{Public: k, Reviewer: "carol"}
		}
		list = append(list, approvers.Signed("keys", keys))
	}
	return agent.New(AgentName, scripted(), ts, p, agent.WithApprovers(list...)).Build()
}

// scripted is the agent's model: turn 1 calls the tools the input lists,
// turn 2 answers with the contents of their results.
func scripted() *model.Scripted {
	return model.NewScripted("tsdk", func(ctx context.Context, req model.Request) (model.Reply, error) {
		var calls []struct {
			Tool string          `json:"tool"`
			Args json.RawMessage `json:"args"`
		}
		if err := json.Unmarshal([]byte(req.Transcript[0].Text), &calls); err != nil || len(calls) == 0 {
			return model.Answer("the input is not a JSON array of calls")(ctx, req)
		}
		tc := make([]model.ToolCall, len(calls))
		for i, c := range calls {
			tc[i] = model.Call(c.Tool, string(c.Args))
		}
		return model.CallTools(tc...)(ctx, req)
	}, func(ctx context.Context, req model.Request) (model.Reply, error) {
		var contents []json.RawMessage
		for _, r := range req.Transcript[len(req.Transcript)-1].Results {
			contents = append(contents, r.Content)
		}
		b, err := json.Marshal(contents)
		if err != nil {
			return model.Reply{}, err
		}
		return model.Answer(string(b))(ctx, req)
	})
}

// RunState is a run as State folds it from its log.
type RunState struct {
	Exists  bool            `json:"exists"`
	Status  string          `json:"status,omitempty"`
	Outcome string          `json:"outcome,omitempty"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	Actions []ActionState   `json:"actions,omitempty"`
}

// ActionState is one action of a RunState.
type ActionState struct {
	ID       string          `json:"id"`
	Tool     string          `json:"tool"`
	State    string          `json:"state"`
	Detail   string          `json:"detail,omitempty"`
	Attempts int             `json:"attempts"`
	Content  json.RawMessage `json:"content,omitempty"`
}

// State folds run from its log (aggregate.Fold): what the runtime
// recorded, never a read model that may lag.
func State(ctx context.Context, js jetstream.JetStream, run string) (RunState, error) {
	envs, _, err := eventlog.New(js).Load(ctx, run)
	if err != nil {
		return RunState{}, err
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		rec, err := projector.Recorded(env)
		if err != nil {
			return RunState{}, err
		}
		recs = append(recs, rec)
	}
	s := aggregate.Fold(recs)
	if !s.Exists() {
		return RunState{}, nil
	}
	out := RunState{Exists: true, Status: string(aggregate.Status(s).Kind)}
	if o, fin := s.Finished(); fin {
		out.Outcome, out.Answer = string(o.Kind), o.Answer
	}
	for _, a := range s.Actions() {
		out.Actions = append(out.Actions, ActionState{ID: a.ID, Tool: a.Tool, State: string(a.State), Detail: a.Detail, Attempts: a.Attempts, Content: a.Content})
	}
	return out, nil
}
