package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

type verIn struct {
	Text string `json:"text"`
}

type verOut struct {
	Body string `json:"body"`
}

var verDef = tools.Define[verIn, verOut]("ver_echo", "Echo the text, saying whose body ran.")

// docs/semantics.md §3 (a tool binding belongs to its agent identity): one
// runner
// serves acc-ver 1, acc-ver 2.0 (a version with a '.', the NATS token
// separator) and another agent, each binding its own body of a tool named
// ver_echo; every run executes the body bound in its own agent@version,
// and no other body starts.
func TestToolBindingBelongsToItsAgentIdentity(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	starts := map[string][]string{} // body identity -> runs
	body := func(id string) tools.Tool {
		return tools.Bind(verDef, func(_ context.Context, call tools.Call, in verIn) (verOut, error) {
			mu.Lock()
			starts[id] = append(starts[id], call.Run)
			mu.Unlock()
			return verOut{Body: id}, nil
		}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	}
	mk := func(name, version string) *agent.Agent {
		m := model.NewScripted("s-"+name+"-"+version, model.CallTools(model.Call("ver_echo", `{"text":"hi"}`)), model.Answer("ok"))
		a, err := agent.New(name, m, []tools.Tool{body(name + "@" + version)}, policy.Func(allow),
			agent.WithVersion(version), agent.WithApprovers(approvers.Trusting("desk"))).Build()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	idents := []struct{ name, version string }{{"acc-ver", "1"}, {"acc-ver", "2.0"}, {"other", "1"}}
	var agents []*agent.Agent
	for _, id := range idents {
		agents = append(agents, mk(id.name, id.version))
	}
	h := newHarness(t)
	h.startRunner(agents)
	c := ctx(t)
	for i, id := range idents {
		run := fmt.Sprintf("vb-%d", i)
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: id.name, Version: id.version, Input: "x"}); err != nil {
			t.Fatal(err)
		}
		s, out := finished(t, h, run)
		if out.Kind != events.OutcomeCompleted {
			t.Fatalf("run %s (%s@%s): outcome %s", run, id.name, id.version, out.Kind)
		}
		var got verOut
		if err := json.Unmarshal(s.Actions()[0].Content, &got); err != nil {
			t.Fatalf("run %s: content %s: %v", run, s.Actions()[0].Content, err)
		}
		if want := id.name + "@" + id.version; got.Body != want {
			t.Errorf("run %s of %s ran the body bound in %s", run, want, got.Body)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, id := range idents {
		want := []string{fmt.Sprintf("vb-%d", i)}
		if got := starts[id.name+"@"+id.version]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("body of %s@%s started for runs %v, want %v", id.name, id.version, got, want)
		}
	}
}

// docs/semantics.md §3 with external workers: a worker outside the runner
// serves
// exactly one agent identity's tool. With ver_echo external for acc-ver 1
// and acc-ver 2.0, a worker serving acc-ver@2.0's queue runs the 2.0 run's
// body, while the task of the version-1 run waits in its own consumer
// (weft_task_acc-ver@1@ver_echo), never reaching that worker.
func TestExternalWorkerServesOneAgentIdentity(t *testing.T) {
	t.Parallel()
	mk := func(version string) *agent.Agent {
		m := model.NewScripted("s-"+version, model.CallTools(model.Call("ver_echo", `{"text":"hi"}`)), model.Answer("ok"))
		a, err := agent.New("acc-ver", m, []tools.Tool{echoBody("in-process " + version)}, policy.Func(allow), agent.WithVersion(version)).Build()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	h := newHarness(t)
	h.startRunner([]*agent.Agent{mk("1"), mk("2.0")}, runner.WithExternalTools("ver_echo"))
	q2 := api.Queue{Agent: "acc-ver", Version: "2.0", Tool: "ver_echo"}
	w := worker.New(h.srv.Connect(), h.srv.JS)
	w.Handle(q2, runner.ToolHandler(echoBody("external 2.0"), nil))
	wctx, stopW := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { stopW(); <-wdone })

	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "ev-2", Agent: "acc-ver", Version: "2.0", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "ev-2")
	if out.Kind != events.OutcomeCompleted || string(s.Actions()[0].Content) != `{"body":"external 2.0"}` {
		t.Fatalf("run of acc-ver@2.0: outcome %s, content %s", out.Kind, s.Actions()[0].Content)
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: "ev-1", Agent: "acc-ver", Version: "1", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	q1 := api.Queue{Agent: "acc-ver", Version: "1", Tool: "ver_echo"}
	if q1.Consumer() != "weft_task_acc-ver@1@ver_echo" {
		t.Fatalf("consumer name %s", q1.Consumer())
	}
	cons, err := h.srv.JS.Consumer(c, api.TaskStream, q1.Consumer())
	if err != nil {
		t.Fatal(err)
	}
	for {
		ci, err := cons.Info(c)
		if err != nil {
			t.Fatal(err)
		}
		if ci.NumPending == 1 {
			break // the version-1 task waits for a worker of its own queue
		}
		if c.Err() != nil {
			t.Fatalf("the version-1 task never reached its consumer: %+v", ci)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if a := h.state("ev-1").Actions()[0]; a.State != aggregate.ActionRunning {
		t.Fatalf("version-1 action %s, want running (its task untaken)", a.State)
	}
}

// runner.New refuses an external tool that no served agent binds: the
// tool meant to run outside would run in this process, or nowhere.
func TestExternalToolNamesABoundTool(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	_, err := runner.New(h.srv.Conn, h.srv.JS, []*agent.Agent{a}, runner.WithExternalTools("pay", "payy"))
	if err == nil || !strings.Contains(err.Error(), "payy") || strings.Contains(err.Error(), "[pay ") {
		t.Fatalf("New = %v, want an error naming payy only", err)
	}
}

func echoBody(id string) tools.Tool {
	return tools.Bind(verDef, func(context.Context, tools.Call, verIn) (verOut, error) { return verOut{Body: id}, nil },
		func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// deskQueue is the queue of tool as bound in the test agent desk (version
// agent.DefaultVersion, see build).
func deskQueue(tool string) api.Queue {
	return api.Queue{Agent: "desk", Version: agent.DefaultVersion, Tool: tool}
}
