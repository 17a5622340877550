package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// AgentName is the name of the agent every runner of the harness serves.
const AgentName = "chaos"

// The harness's tools. Replayable reads (read in the runners, fetch in the
// standalone workers), non-replayable effects (ship in the workers, pay in
// the runners, behind an approval when its amount is over 100) and a
// settling tool (hold) whose stopped body settles later.
const (
	toolRead  = "read"
	toolFetch = "fetch"
	toolShip  = "ship"
	toolPay   = "pay"
	toolHold  = "hold"
)

// externalTools run in the standalone worker processes only.
var externalTools = []string{toolFetch, toolShip}

// Budgets and windows of the tools (recorded with every fence).
const (
	readAttempts  = 3
	fetchAttempts = 2
	toolTimeout   = 4 * time.Second
	holdTimeout   = 700 * time.Millisecond
	holdWindow    = 3 * time.Second
	// approvalLimit is the amount above which pay needs an approval.
	approvalLimit = 100
)

// args are every tool's input.
type args struct {
	// MS is how long the body works.
	MS int64 `json:"ms,omitempty"`
	// Amount is pay's amount; over approvalLimit it needs an approval.
	Amount int64 `json:"amount,omitempty"`
	// Fail makes the body fail definitely (tool_failed).
	Fail bool `json:"fail,omitempty"`
	// Settle makes a stopped hold body settle after SettleMS.
	Settle   bool  `json:"settle,omitempty"`
	SettleMS int64 `json:"settle_ms,omitempty"`
}

// out is every tool's output.
type out struct {
	Done string `json:"done"`
}

var (
	readDef  = tools.Define[args, out](toolRead, "A replayable read.")
	fetchDef = tools.Define[args, out](toolFetch, "A replayable read served by standalone workers.")
	shipDef  = tools.Define[args, out](toolShip, "A non-replayable effect served by standalone workers.")
	payDef   = tools.Define[args, out](toolPay, "A non-replayable payment; over 100 it needs an approval.")
	holdDef  = tools.Define[args, out](toolHold, "A settling reservation: when stopped it settles later.")
)

// errExplained is a definite failure the model sees.
var errExplained = errors.New("declined by the test tool")

func classify(err error) tools.Failure {
	if errors.Is(err, errExplained) {
		return tools.Explain(err.Error())
	}
	return tools.Uncertain(err.Error())
}

// call is one tool call of a run's script.
type call struct {
	Tool string `json:"tool"`
	Args args   `json:"args"`
}

// script is a run's input: the calls the model asks for on turn 1 and how
// long that model call takes; every later turn answers.
type script struct {
	Calls   []call `json:"calls"`
	ModelMS int64  `json:"model_ms,omitempty"`
}

func (s script) String() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Ledger is the side ledger of body starts: one fsynced line per start,
// written by the body itself before it does anything else, so it counts
// what really ran whatever the log says. A body makes its effect under its
// context, as a real tool's network call does (Go's I/O fails at once on
// a context that ended or whose deadline passed): a body called with an
// ended context writes a late line and does nothing. Lines are
//
//	start <unix nanos> <run> <action> <tool> <attempt> <process> <look began> <look answered>
//	late <unix nanos> <run> <action> <tool> <attempt> <process> <look began> <look answered>
//
// (the look's times in unix nanos, 0 when the process recorded none)
// and stay under PIPE_BUF, so concurrent appends of several processes
// never interleave.
type Ledger struct {
	mu      sync.Mutex
	path    string
	process string
	looks   *looks // this process's workers' last looks; nil: none recorded
}

// looks remembers, per attempt, the last look of this process's workers
// that found it current (worker.AttemptCheck): when the read of the run
// began and when it answered. A body writes its attempt's look with its
// start, so a start after its attempt was recorded lost tells whether the
// worker's last look could have seen the loss.
type looks struct {
	mu sync.Mutex
	m  map[string]look
}

type look struct{ began, ended time.Time }

func newLooks() *looks { return &looks{m: map[string]look{}} }

func lookKey(run, action string, attempt int) string {
	return fmt.Sprintf("%s %s %d", run, action, attempt)
}

// check wraps inner, recording every look that found the attempt current.
func (l *looks) check(inner worker.AttemptCheck) worker.AttemptCheck {
	return func(ctx context.Context, t api.Task) (bool, error) {
		began := time.Now()
		current, err := inner(ctx, t)
		if err == nil && current {
			l.mu.Lock()
			l.m[lookKey(t.Run, t.Action, t.Attempt)] = look{began: began, ended: time.Now()}
			l.mu.Unlock()
		}
		return current, err
	}
}

func (l *looks) get(run, action string, attempt int) look {
	if l == nil {
		return look{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[lookKey(run, action, attempt)]
}

// start records a body start and reports whether the body may act: false
// (a late line) when its context had ended when it was called — cancelled,
// or its deadline passed by the clock. A ledger that cannot be written
// stops the process: a start that is not counted would hide a violation.
func (l *Ledger) start(ctx context.Context, tool string, c tools.Call) bool {
	now := time.Now()
	live := ctx.Err() == nil
	if d, ok := ctx.Deadline(); ok && !now.Before(d) {
		live = false
	}
	kind := "start"
	if !live {
		kind = "late"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos: ledger:", err)
		os.Exit(70)
	}
	lk := l.looks.get(c.Run, c.Action, c.Attempt)
	line := fmt.Sprintf("%s %d %s %s %s %d %s %d %d\n", kind, now.UnixNano(), c.Run, c.Action, tool, c.Attempt, l.process, nanos(lk.began), nanos(lk.ended))
	if _, err := f.WriteString(line); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: ledger:", err)
		os.Exit(70)
	}
	if err := f.Sync(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: ledger:", err)
		os.Exit(70)
	}
	_ = f.Close()
	return live
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// bodyStart is one line of the ledger.
type bodyStart struct {
	At      time.Time
	Run     string
	Action  string
	Tool    string
	Attempt int
	Process string
	// Late is a call whose context had ended: the body did nothing.
	Late bool
	// Look is the last look of the process's worker that found the
	// attempt current before the start (zero: none recorded).
	Look look
}

func parseStart(line string) (bodyStart, bool) {
	f := strings.Fields(line)
	if len(f) != 9 || (f[0] != "start" && f[0] != "late") {
		return bodyStart{}, false
	}
	ns, err1 := strconv.ParseInt(f[1], 10, 64)
	att, err2 := strconv.Atoi(f[5])
	began, err3 := strconv.ParseInt(f[7], 10, 64)
	ended, err4 := strconv.ParseInt(f[8], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return bodyStart{}, false
	}
	return bodyStart{At: time.Unix(0, ns), Run: f[2], Action: f[3], Tool: f[4], Attempt: att, Process: f[6], Late: f[0] == "late",
		Look: look{began: fromNanos(began), ended: fromNanos(ended)}}, true
}

// work is the body of every tool: ledger line, then MS of work (stopped by
// the context), then a definite failure or the output.
func work(l *Ledger, tool string) tools.Handler[args, out] {
	return func(ctx context.Context, c tools.Call, in args) (out, error) {
		if !l.start(ctx, tool, c) {
			return out{}, errLate
		}
		if err := sleep(ctx, in.MS); err != nil {
			return out{}, err
		}
		if in.Fail {
			return out{}, errExplained
		}
		return out{Done: fmt.Sprintf("%s %s attempt %d", tool, c.Action, c.Attempt)}, nil
	}
}

// holdBody is the settling tool: a body stopped before it finished (its
// timeout, a cancellation) settles its call SettleMS later when Settle is
// set, as an external system's callback would; otherwise a person must
// reconcile it.
func holdBody(l *Ledger) tools.SettlingHandler[args, out] {
	return func(ctx context.Context, c tools.Call, in args, st *tools.Settler[out]) (out, error) {
		if !l.start(ctx, toolHold, c) {
			return out{}, errLate
		}
		err := sleep(ctx, in.MS)
		if err == nil {
			return out{Done: fmt.Sprintf("hold %s attempt %d", c.Action, c.Attempt)}, nil
		}
		if in.Settle {
			go func() {
				time.Sleep(time.Duration(in.SettleMS) * time.Millisecond)
				sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = st.Settle(sctx, out{Done: fmt.Sprintf("hold %s settled", c.Action)}, "hold "+c.Action+" settled by its callback")
			}()
		}
		return out{}, err
	}
}

// errLate is a body's answer when it was called with an ended context:
// it did nothing (an uncertain failure, as a cancelled call would be).
var errLate = errors.New("called after its context ended; did nothing")

func sleep(ctx context.Context, ms int64) error {
	if ms <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Agent returns the harness's agent, whose tool bodies write their starts
// to l, with opts after its own. Every runner and worker process of the
// harness builds the same one.
func Agent(l *Ledger, opts ...agent.Option) (*agent.Agent, error) {
	read := tools.WithTimeout(tools.WithReplay(tools.Bind(readDef, work(l, toolRead), classify), readAttempts), tools.After(toolTimeout))
	fetch := tools.WithTimeout(tools.WithReplay(tools.Bind(fetchDef, work(l, toolFetch), classify), fetchAttempts), tools.After(toolTimeout))
	ship := tools.WithTimeout(tools.Bind(shipDef, work(l, toolShip), classify), tools.After(toolTimeout))
	pay := tools.WithTimeout(tools.Bind(payDef, work(l, toolPay), classify), tools.After(toolTimeout))
	hold := tools.WithTimeout(tools.BindSettling(holdDef, holdBody(l), classify, holdWindow), tools.After(holdTimeout))
	m := model.NewRules("chaos-script",
		model.Rule{Name: "answer", Match: func(r model.Request) bool { return len(r.Transcript) > 1 }, Step: model.Answer("done")},
		model.Rule{Name: "calls", Match: func(model.Request) bool { return true }, Step: func(ctx context.Context, r model.Request) (model.Reply, error) {
			var s script
			_ = json.Unmarshal([]byte(r.Transcript[0].Text), &s)
			if err := sleep(ctx, s.ModelMS); err != nil {
				return model.Reply{}, err
			}
			var calls []model.ToolCall
			for _, c := range s.Calls {
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
		if matched && in.Amount > approvalLimit {
			return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
		}
		return policy.Allow(), nil
	})
	return agent.New(AgentName, m, []tools.Tool{read, fetch, ship, pay, hold}, pol,
		append([]agent.Option{agent.WithApprovers(approvers.Trusting("desk")), agent.WithMaxConcurrency(2),
			agent.WithToolTimeout(tools.After(toolTimeout))}, opts...)...).Build()
}
