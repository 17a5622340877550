// Command tsdkharness starts what the TypeScript SDK's Node tests run
// against (sdk/typescript/test): an embedded nats-server listening on a
// free loopback port, with its store in the directory given by -data, and
// a real runner serving agent "tsdk" version "1", all of whose tools are
// left to external workers (runner.WithExternalTools): the TypeScript
// worker under test serves them; with the projector, the query service
// and the catalog (host.Run).
//
// It prints "NATS_URL=<url>" on stdout once the runner and the queries
// answer, then
// serves until SIGTERM or SIGINT (a graceful drain) or until its stdin
// closes (the test process that spawned it ended).
//
// The agent's scripted model reads the run's input as a JSON array of
// calls, [{"tool":"echo","args":{"text":"hi"}}], asks for them all in
// turn 1, and answers turn 2 with the tool results the model read, as a
// JSON array of their contents in call order.
//
// Besides the runtime's own subjects it answers one of its own for the
// tests: tsdktest.check with a task as its body replies with the Go
// worker's attempt check of it (worker.LogCheck), {"current"} or
// {"error"}, for the Node tests to compare theirs with; and
// tsdktest.state with body {"run":"<id>"} replies with the run
// folded from its log (aggregate.Fold): {"exists", "status",
// "outcome", "answer", "actions":[{"id","tool","state","detail",
// "attempts","content"}]}. It reads the log, never a read model, so what a
// test sees is what the runtime recorded.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// agentName is the name of the harness's agent; its version is
// agent.DefaultVersion.
const agentName = "tsdk"

// toolIn and toolOut are the input and output of every tool of the agent:
// the Node tests' bodies read mode to decide what they do.
type (
	toolIn struct {
		Text string `json:"text"`
		Mode string `json:"mode,omitempty"`
	}
	toolOut struct {
		Text string `json:"text"`
	}
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "tsdkharness:", err)
		os.Exit(1)
	}
}

func run() error {
	data := flag.String("data", "", "the embedded server's store directory (required)")
	verbose := flag.Bool("v", false, "log the runtime's warnings and more on stderr")
	flag.Parse()
	if *data == "" {
		return errors.New("-data is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		// The spawning test process ended (its end of our stdin closed).
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	level := slog.LevelError
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	node, err := natsnode.Start(ctx, natsnode.WithDataDir(*data), natsnode.WithListen(0))
	if err != nil {
		return err
	}
	defer node.Close(context.Background())
	a, err := build()
	if err != nil {
		return err
	}
	sub, err := node.Conn().Subscribe("tsdktest.state", func(m *nats.Msg) { answerState(node, m) })
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	check := worker.LogCheck(node.JetStream())
	csub, err := node.Conn().Subscribe("tsdktest.check", func(m *nats.Msg) { answerCheck(check, m) })
	if err != nil {
		return err
	}
	defer csub.Unsubscribe()
	// host.Run: the runner, the projector and query service (the Node
	// client's queries read them) and the catalog.
	return host.Run(ctx, node.Conn(), node.JetStream(), []*agent.Agent{a}, host.WithLogger(log),
		host.WithRunnerOptions(runner.WithExternalTools(toolNames()...), runner.WithDrainWindow(5*time.Second)),
		host.WithReady(func() { fmt.Printf("NATS_URL=%s\n", node.URL()) }))
}

// The agent's tools, all served by external workers. Their settings are
// what the Node tests need: echo is a plain non-replayable tool; slow has
// a one-second timeout; replay may be started again three times; settle
// is a settling tool with a two-second window; guarded needs an approval
// (requirement "finance" version 1, approver "tsdk", which trusts the
// credential it is given as the reviewer's name).
var (
	echoDef   = tools.Define[toolIn, toolOut]("echo", "Echo the text.")
	slowDef   = tools.Define[toolIn, toolOut]("slow", "Echo the text, with a one-second timeout.")
	replayDef = tools.Define[toolIn, toolOut]("replay", "Echo the text; replayable.")
	settleDef = tools.Define[toolIn, toolOut]("settle", "Echo the text; settles.")
	guardDef  = tools.Define[toolIn, toolOut]("guarded", "Echo the text once a person approved it.")
)

// toolNames are the names of the agent's tools.
func toolNames() []string { return []string{"echo", "slow", "replay", "settle", "guarded"} }

// external is the Go body of a tool served outside the process: the
// runner never runs it (runner.WithExternalTools).
func external(context.Context, tools.Call, toolIn) (toolOut, error) {
	return toolOut{}, errors.New("served by an external worker")
}

func externalSettling(context.Context, tools.Call, toolIn, *tools.Settler[toolOut]) (toolOut, error) {
	return toolOut{}, errors.New("served by an external worker")
}

func uncertain(err error) tools.Failure { return tools.Uncertain(err.Error()) }

// build builds the harness's agent.
func build() (*agent.Agent, error) {
	ts := []tools.Tool{
		tools.WithTimeout(tools.Bind(echoDef, external, uncertain), tools.After(30*time.Second)),
		tools.WithTimeout(tools.Bind(slowDef, external, uncertain), tools.After(time.Second)),
		tools.WithReplay(tools.WithTimeout(tools.Bind(replayDef, external, uncertain), tools.After(30*time.Second)), 3),
		tools.WithTimeout(tools.BindSettling(settleDef, externalSettling, uncertain, 2*time.Second), tools.After(time.Second)),
		tools.WithTimeout(tools.Bind(guardDef, external, uncertain), tools.After(30*time.Second)),
	}
	p := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		if a.Tool == guardDef.Name() {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		return policy.Allow(), nil
	})
	return agent.New(agentName, scripted(), ts, p, agent.WithApprovers(approvers.Trusting("tsdk"))).Build()
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

// state is the reply of tsdktest.state.
type state struct {
	Exists  bool            `json:"exists"`
	Status  string          `json:"status,omitempty"`
	Outcome string          `json:"outcome,omitempty"`
	Answer  json.RawMessage `json:"answer,omitempty"`
	Actions []actionState   `json:"actions,omitempty"`
	Error   string          `json:"error,omitempty"`
}

type actionState struct {
	ID       string          `json:"id"`
	Tool     string          `json:"tool"`
	State    string          `json:"state"`
	Detail   string          `json:"detail,omitempty"`
	Attempts int             `json:"attempts"`
	Content  json.RawMessage `json:"content,omitempty"`
}

func answerState(node *natsnode.Node, m *nats.Msg) {
	reply := func(s state) {
		b, _ := json.Marshal(s)
		_ = m.Respond(b)
	}
	var req struct {
		Run string `json:"run"`
	}
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Run == "" {
		reply(state{Error: "the body is not {\"run\":\"<id>\"}"})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	envs, _, err := eventlog.New(node.JetStream()).Load(ctx, req.Run)
	if err != nil {
		reply(state{Error: err.Error()})
		return
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		rec, err := projector.Recorded(env)
		if err != nil {
			reply(state{Error: err.Error()})
			return
		}
		recs = append(recs, rec)
	}
	s := aggregate.Fold(recs)
	if !s.Exists() {
		reply(state{})
		return
	}
	st := aggregate.Status(s)
	out := state{Exists: true, Status: string(st.Kind)}
	if o, fin := s.Finished(); fin {
		out.Outcome, out.Answer = string(o.Kind), o.Answer
	}
	for _, a := range s.Actions() {
		out.Actions = append(out.Actions, actionState{ID: a.ID, Tool: a.Tool, State: string(a.State), Detail: a.Detail, Attempts: a.Attempts, Content: a.Content})
	}
	reply(out)
}

// answerCheck replies to tsdktest.check: the Go worker's attempt check of
// the task in m's body.
func answerCheck(check worker.AttemptCheck, m *nats.Msg) {
	var reply struct {
		Current bool   `json:"current"`
		Error   string `json:"error,omitempty"`
	}
	var t worker.Task
	if err := json.Unmarshal(m.Data, &t); err != nil {
		reply.Error = err.Error()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		reply.Current, err = check(ctx, t)
		cancel()
		if err != nil {
			reply.Error = err.Error()
		}
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}
