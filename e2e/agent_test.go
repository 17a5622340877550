package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// workIn is the test tools' input: block makes attempt 1 block for ms
// (attempt ≥ 2 returns at once); amount over 100 needs approval.
type workIn struct {
	MS     int64 `json:"ms,omitempty"`
	Block  bool  `json:"block,omitempty"`
	Amount int64 `json:"amount,omitempty"`
	// Crash makes attempts up to Crash kill their process (a crashed
	// worker) right after the ledger line.
	Crash int `json:"crash,omitempty"`
	// CrashBeforeStart makes attempts up to it kill their process after
	// the worker claimed the attempt but before the body's first
	// instruction (the ledger line): a worker killed between its claim
	// and its body.
	CrashBeforeStart int `json:"crash_before_start,omitempty"`
}

type workOut struct {
	Done string `json:"done"`
}

var (
	readDef  = tools.Define[workIn, workOut]("read", "A replayable read.")
	read2Def = tools.Define[workIn, workOut]("read2", "A read with 2 attempts.")
	writeDef = tools.Define[workIn, workOut]("write", "A write that is not replayable.")
)

// ledger appends one fsynced line per real body start.
type ledger struct {
	mu   sync.Mutex
	path string
}

func (l *ledger) start(tool string, c tools.Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(f, "%s %s %s %d\n", c.Run, c.Action, tool, c.Attempt)
	if err := f.Sync(); err != nil {
		panic(err)
	}
	_ = f.Close()
}

func body(l *ledger, tool string) tools.Handler[workIn, workOut] {
	return func(ctx context.Context, c tools.Call, in workIn) (workOut, error) {
		if c.Attempt <= in.CrashBeforeStart {
			os.Exit(3)
		}
		l.start(tool, c)
		if c.Attempt <= in.Crash {
			os.Exit(3)
		}
		if in.MS > 0 && (!in.Block || c.Attempt == 1) {
			select {
			case <-time.After(time.Duration(in.MS) * time.Millisecond):
			case <-ctx.Done():
				return workOut{}, ctx.Err()
			}
		}
		return workOut{Done: fmt.Sprintf("%s attempt %d", tool, c.Attempt)}, nil
	}
}

// call is one call of a test run's input.
type call struct {
	Tool string `json:"tool"`
	Args workIn `json:"args"`
}

// input is a test run's input: the calls of turn 1 and how long the first
// model call takes.
type input struct {
	Calls   []call `json:"calls"`
	ModelMS int64  `json:"model_ms,omitempty"`
}

func (in input) String() string {
	b, _ := json.Marshal(in)
	return string(b)
}

// e2eAgent is the agent every runner process of these tests serves.
func e2eAgent(ledgerPath string) (*agent.Agent, error) {
	l := &ledger{path: ledgerPath}
	cls := func(err error) tools.Failure { return tools.Uncertain(err.Error()) }
	read := tools.WithTimeout(tools.WithReplay(tools.Bind(readDef, body(l, "read"), cls), 3), tools.After(30*time.Second))
	write := tools.WithTimeout(tools.Bind(writeDef, body(l, "write"), cls), tools.After(30*time.Second))
	read2 := tools.WithReplay(tools.Bind(read2Def, body(l, "read2"), cls), 2)
	m := model.NewRules("e2e",
		model.Rule{Name: "answer", Match: func(r model.Request) bool { return len(r.Transcript) > 1 }, Step: model.Answer("done")},
		model.Rule{Name: "call", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			var in input
			_ = json.Unmarshal([]byte(r.Transcript[0].Text), &in)
			if in.ModelMS > 0 {
				time.Sleep(time.Duration(in.ModelMS) * time.Millisecond)
			}
			var calls []model.ToolCall
			for _, c := range in.Calls {
				b, _ := json.Marshal(c.Args)
				calls = append(calls, model.Call(c.Tool, string(b)))
			}
			if len(calls) == 0 {
				return model.Answer("nothing to do")(ctx, r)
			}
			return model.CallTools(calls...)(ctx, r)
		}},
	)
	pol := policy.Func(func(_ context.Context, a policy.Action) (policy.Decision, error) {
		in, matched, err := tools.Input(writeDef, a)
		if err != nil {
			return policy.Decision{}, err
		}
		if matched && in.Amount > 100 {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		return policy.Allow(), nil
	})
	return agent.New("e2e", m, []tools.Tool{read, write, read2}, pol,
		agent.WithApprovers(approvers.Trusting("desk")), agent.WithMaxConcurrency(1)).Build()
}
