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

// The agents of the randomized test (TestChaos): "chaos" versions 1 and 2,
// each binding its own "fetch" (replayable, 3 attempts) and "pay" (not
// replayable; amounts over 100 need approval "finance") — the same tool
// names with different bodies, so a body of the wrong agent version shows
// in the ledger. Version 1 runs one action at a time (actions queue behind
// each other, approved ones too), version 2 two.

// chaosIn is a chaos tool's input: the body blocks ms on its first attempt
// and ms/4 on later ones.
type chaosIn struct {
	MS     int64 `json:"ms,omitempty"`
	Amount int64 `json:"amount,omitempty"`
}

type chaosOut struct {
	Done string `json:"done"`
}

var (
	fetchDef = tools.Define[chaosIn, chaosOut]("fetch", "A replayable read.")
	payDef   = tools.Define[chaosIn, chaosOut]("pay", "A payment: not replayable.")
)

// chaosLedger appends one fsynced line per real body start:
// "<unix ns> <run> <action> <attempt> <tool> <agent version> <pid>".
type chaosLedger struct {
	mu   sync.Mutex
	path string
}

func (l *chaosLedger) start(version, tool string, c tools.Call) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(f, "%d %s %s %d %s %s %d\n", time.Now().UnixNano(), c.Run, c.Action, c.Attempt, tool, version, os.Getpid())
	if err := f.Sync(); err != nil {
		panic(err)
	}
	_ = f.Close()
}

func chaosBody(l *chaosLedger, version, tool string) tools.Handler[chaosIn, chaosOut] {
	return func(ctx context.Context, c tools.Call, in chaosIn) (chaosOut, error) {
		l.start(version, tool, c)
		d := time.Duration(in.MS) * time.Millisecond
		if c.Attempt > 1 {
			d /= 4
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return chaosOut{}, ctx.Err()
		}
		return chaosOut{Done: fmt.Sprintf("%s v%s attempt %d", tool, version, c.Attempt)}, nil
	}
}

// chaosCall is one call of a chaos run's input.
type chaosCall struct {
	Tool string  `json:"tool"`
	Args chaosIn `json:"args"`
}

// chaosInput is a chaos run's input: the calls of turn 1 and how long each
// model call takes.
type chaosInput struct {
	Calls   []chaosCall `json:"calls"`
	ModelMS int64       `json:"model_ms,omitempty"`
}

func (in chaosInput) String() string {
	b, _ := json.Marshal(in)
	return string(b)
}

// chaosAgents are the agents every runner process of TestChaos serves.
func chaosAgents(ledgerPath string) ([]*agent.Agent, error) {
	l := &chaosLedger{path: ledgerPath}
	var out []*agent.Agent
	for _, v := range []struct {
		version     string
		concurrency int
	}{{"1", 1}, {"2", 2}} {
		cls := func(err error) tools.Failure { return tools.Uncertain(err.Error()) }
		fetch := tools.WithTimeout(tools.WithReplay(tools.Bind(fetchDef, chaosBody(l, v.version, "fetch"), cls), 3), tools.After(8*time.Second))
		pay := tools.WithTimeout(tools.Bind(payDef, chaosBody(l, v.version, "pay"), cls), tools.After(8*time.Second))
		m := model.NewRules("chaos",
			model.Rule{Name: "answer", Match: func(r model.Request) bool { return len(r.Transcript) > 1 }, Step: model.Answer("done")},
			model.Rule{Name: "call", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
				var in chaosInput
				_ = json.Unmarshal([]byte(r.Transcript[0].Text), &in)
				if in.ModelMS > 0 {
					select {
					case <-time.After(time.Duration(in.ModelMS) * time.Millisecond):
					case <-ctx.Done():
						return model.Reply{}, ctx.Err()
					}
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
			in, matched, err := tools.Input(payDef, a)
			if err != nil {
				return policy.Decision{}, err
			}
			if matched && in.Amount > 100 {
				return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
			}
			return policy.Allow(), nil
		})
		a, err := agent.New("chaos", m, []tools.Tool{fetch, pay}, pol, agent.WithVersion(v.version),
			agent.WithApprovers(approvers.Trusting("desk")), agent.WithMaxConcurrency(v.concurrency)).Build()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
