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

// chaosInput is a chaos run's input: the calls of each tool turn (one or
// two), and how long the first model call of each turn takes (a retried
// call half as long each time).
type chaosInput struct {
	Turns   [][]chaosCall `json:"turns"`
	ModelMS int64         `json:"model_ms,omitempty"`
}

func (in chaosInput) String() string {
	b, _ := json.Marshal(in)
	return string(b)
}

// chaosModel plays a chaos run's input: the tool turns in order, then the
// answer "done".
func chaosModel() model.Model {
	return model.NewRules("chaos", model.Rule{Name: "play", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
		var in chaosInput
		_ = json.Unmarshal([]byte(r.Transcript[0].Text), &in)
		done := 0 // tool turns answered so far
		for _, m := range r.Transcript {
			if len(m.Calls) > 0 {
				done++
			}
		}
		if retries := r.Turn - 1 - done; in.ModelMS > 0 && retries >= 0 && retries < 8 {
			select {
			case <-time.After(time.Duration(in.ModelMS>>retries) * time.Millisecond):
			case <-ctx.Done():
				return model.Reply{}, ctx.Err()
			}
		}
		if done >= len(in.Turns) || len(in.Turns[done]) == 0 {
			return model.Answer("done")(ctx, r)
		}
		var calls []model.ToolCall
		for _, c := range in.Turns[done] {
			b, _ := json.Marshal(c.Args)
			calls = append(calls, model.Call(c.Tool, string(b)))
		}
		return model.CallTools(calls...)(ctx, r)
	}})
}

// chaosAgents are the agents every runner and worker process of
// TestChaos serves. Both versions bind "fetch" (replayable, 3 attempts,
// timeout 1.2 s) and "pay" (not replayable, timeout 1.5 s; amounts over
// 100 need approval "finance"), so bodies time out now and then. Version 1
// runs one action at a time (actions queue behind each other, approved
// ones too) and its model calls time out after 250 ms (retried after
// 100 ms); version 2 runs two at a time and its approval requests expire
// after 4 s.
func chaosAgents(ledgerPath string) ([]*agent.Agent, error) {
	l := &chaosLedger{path: ledgerPath}
	var out []*agent.Agent
	for _, v := range []struct {
		version     string
		concurrency int
		opts        []agent.Option
	}{
		{"1", 1, []agent.Option{agent.WithModelTimeout(tools.After(250 * time.Millisecond)), agent.WithModelRetryDelay(100 * time.Millisecond)}},
		{"2", 2, []agent.Option{agent.WithApprovalExpiry(tools.After(4 * time.Second))}},
	} {
		cls := func(err error) tools.Failure { return tools.Uncertain(err.Error()) }
		fetch := tools.WithTimeout(tools.WithReplay(tools.Bind(fetchDef, chaosBody(l, v.version, "fetch"), cls), 3), tools.After(1200*time.Millisecond))
		pay := tools.WithTimeout(tools.Bind(payDef, chaosBody(l, v.version, "pay"), cls), tools.After(1500*time.Millisecond))
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
		opts := append([]agent.Option{agent.WithVersion(v.version), agent.WithApprovers(approvers.Trusting("desk")), agent.WithMaxConcurrency(v.concurrency)}, v.opts...)
		a, err := agent.New("chaos", chaosModel(), []tools.Tool{fetch, pay}, pol, opts...).Build()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
