package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// The agents of the bench. Every process of a bench serves all of them,
// built the same way (a run only continues under its agent identity).
const (
	// agentSteps is the workload run: 3 turns that each call the instant
	// tool "step" once, then the final answer.
	agentSteps = "bench-steps"
	// agentRecover calls the replayable tool "work" once; its body hangs
	// in a process started with hang set (the runner that is killed).
	agentRecover = "bench-recover"
	// agentApprove calls "step" once under a policy that requires an
	// approval: its runs stay suspended.
	agentApprove = "bench-approve"
	// agentHistory runs as many turns as its input says, each with a
	// 1 KiB assistant text and one call of "blob", whose result is 500
	// bytes.
	agentHistory = "bench-history"
)

// stepTimeout is the tool timeout of the workload: short, so that — as in
// a long steady state, where the timeouts of earlier runs keep falling due
// — the timeouts of the measured runs fall due while the bench still runs.
const stepTimeout = time.Second

// hang makes the body of "work" block until it is stopped (set in the
// subprocess whose runner is killed).
var hang atomic.Bool

type stepIn struct {
	N int `json:"n"`
}

type stepOut struct {
	OK bool `json:"ok"`
}

type blobOut struct {
	Data string `json:"data"`
}

var (
	stepDef = tools.Define[stepIn, stepOut]("step", "One instant durable step.")
	workDef = tools.Define[stepIn, stepOut]("work", "A replayable step.")
	blobDef = tools.Define[stepIn, blobOut]("blob", "Returns 500 bytes.")
)

func uncertain(err error) tools.Failure { return tools.Uncertain(err.Error()) }

func stepTool() tools.Tool {
	return tools.Bind(stepDef, func(context.Context, tools.Call, stepIn) (stepOut, error) { return stepOut{OK: true}, nil }, uncertain)
}

func workTool() tools.Tool {
	t := tools.Bind(workDef, func(ctx context.Context, _ tools.Call, _ stepIn) (stepOut, error) {
		if hang.Load() {
			<-ctx.Done()
			return stepOut{}, ctx.Err()
		}
		return stepOut{OK: true}, nil
	}, uncertain)
	return tools.WithTimeout(tools.WithReplay(t, 3), tools.After(time.Minute))
}

// blobData is the 500-byte tool result of agentHistory (its JSON
// encoding, {"data":"…"}, is 500 bytes).
var blobData = strings.Repeat("r", 500-len(`{"data":""}`))

// assistantText is the 1 KiB assistant text of every agentHistory turn.
var assistantText = strings.Repeat("a", 1024)

func blobTool() tools.Tool {
	return tools.Bind(blobDef, func(context.Context, tools.Call, stepIn) (blobOut, error) { return blobOut{Data: blobData}, nil }, uncertain)
}

// benchModel answers every agent of the bench from the request alone.
type benchModel struct{ agent string }

func (m benchModel) Name() string { return "bench:" + m.agent }

func (m benchModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	u := &model.Usage{InputTokens: 10, OutputTokens: 5}
	call := func(tool string, text string) (model.Reply, error) {
		args := `{"n":` + strconv.Itoa(req.Turn) + `}`
		return model.Reply{Kind: model.ReplyToolRequest, Usage: u, Turn: model.Message{Role: model.RoleAssistant, Text: text,
			Calls: []model.ToolCall{{ID: "c" + strconv.Itoa(req.Turn), Name: tool, Arguments: json.RawMessage(args)}}}}, nil
	}
	answer := model.Reply{Kind: model.ReplyFinalAnswer, Usage: u, Turn: model.Message{Role: model.RoleAssistant, Text: "done"}}
	switch m.agent {
	case agentSteps:
		if req.Turn <= 3 {
			return call("step", "")
		}
	case agentRecover:
		if req.Turn == 1 {
			return call("work", "")
		}
	case agentApprove:
		if req.Turn == 1 {
			return call("step", "")
		}
	case agentHistory:
		turns := 1
		if len(req.Transcript) > 0 {
			turns, _ = strconv.Atoi(strings.TrimPrefix(req.Transcript[0].Text, "turns="))
		}
		if req.Turn <= turns {
			return call("blob", assistantText)
		}
	}
	return answer, nil
}

func requireApproval(context.Context, policy.Action) (policy.Decision, error) {
	return policy.RequireApproval(policy.Requirement{Name: "bench", Version: 1}), nil
}

// agents builds the bench's agents.
func agents() ([]*agent.Agent, error) {
	defs := []*agent.Definition{
		agent.New(agentSteps, benchModel{agentSteps}, []tools.Tool{stepTool()}, policy.AlwaysAllow(), agent.WithToolTimeout(tools.After(stepTimeout))),
		agent.New(agentRecover, benchModel{agentRecover}, []tools.Tool{workTool()}, policy.AlwaysAllow()),
		agent.New(agentApprove, benchModel{agentApprove}, []tools.Tool{stepTool()}, policy.Func(requireApproval),
			agent.WithApprovers(approvers.Trusting("bench"))),
		agent.New(agentHistory, benchModel{agentHistory}, []tools.Tool{blobTool()}, policy.AlwaysAllow(), agent.WithMaxTurns(1000)),
	}
	var out []*agent.Agent
	for _, d := range defs {
		a, err := d.Build()
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// inproc is a runner (with its in-process worker) in the bench's process,
// on a connection of its own.
type inproc struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

var runnerSeq atomic.Int64

// startRuntime starts an in-process runner and waits until it serves.
func (b *bencher) startRuntime(ctx context.Context) error {
	if b.rt != nil {
		return nil
	}
	var opts []nats.Option
	if b.srv.srv != nil {
		opts = append(opts, nats.InProcessServer(b.srv.srv))
	}
	nc, err := b.srv.connect(opts...)
	if err != nil {
		return err
	}
	js, _ := jetstream.New(nc)
	ags, err := agents()
	if err != nil {
		nc.Close()
		return err
	}
	ropts := []runner.Option{runner.WithID(fmt.Sprintf("bench-main-%d-%d", time.Now().Unix()%100000, runnerSeq.Add(1))),
		runner.WithLease(benchLease), runner.WithDrainWindow(2 * time.Second), runner.WithHeadKey(headKey())}
	if b.srv.sync && !b.cfg.NoGroupCommit {
		ropts = append(ropts, runner.WithGroupCommit())
	}
	r, err := runner.New(nc, js, ags, ropts...)
	if err != nil {
		nc.Close()
		return err
	}
	rctx, cancel := context.WithCancel(context.Background())
	rt := &inproc{nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { rt.done <- r.Run(rctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := api.NewClient(nc).Ready(wctx); err != nil {
		cancel()
		<-rt.done
		nc.Close()
		return fmt.Errorf("in-process runner not ready: %w", err)
	}
	b.rt = rt
	return nil
}

// stopRuntime drains the in-process runner, if one runs.
func (b *bencher) stopRuntime() {
	if b.rt == nil {
		return
	}
	b.rt.cancel()
	select {
	case <-b.rt.done:
	case <-time.After(30 * time.Second):
	}
	b.rt.nc.Close()
	b.rt = nil
}

// watcher follows the log's messages as they are published (a core NATS
// subscription, no consumer) and tells waiters when a run recorded an
// event of a kind.
type watcher struct {
	nc  *nats.Conn
	sub *nats.Subscription

	mu     sync.Mutex
	waits  map[string]chan time.Time // run + "\x00" + kind
	counts map[string]int64          // by kind, since the watcher started
}

// watched are the event kinds a watcher looks for.
var watched = []string{"run_finished", "approval_requested", "run_recovered", "attempt_fenced"}

func (b *bencher) newWatcher() (*watcher, error) {
	var opts []nats.Option
	if b.srv.srv != nil {
		opts = append(opts, nats.InProcessServer(b.srv.srv))
	}
	nc, err := b.srv.connect(opts...)
	if err != nil {
		return nil, err
	}
	w := &watcher{nc: nc, waits: map[string]chan time.Time{}, counts: map[string]int64{}}
	w.sub, err = nc.Subscribe("weft.ev.*.events", w.on)
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = w.sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	return w, nil
}

func (w *watcher) on(m *nats.Msg) {
	now := time.Now()
	run := m.Header.Get("Weft-Run")
	for _, k := range watched {
		if !bytes.Contains(m.Data, []byte(`"type":"`+k+`"`)) {
			continue
		}
		w.mu.Lock()
		w.counts[k]++
		ch := w.waits[run+"\x00"+k]
		delete(w.waits, run+"\x00"+k)
		w.mu.Unlock()
		if ch != nil {
			ch <- now
		}
	}
}

// expect returns a channel that receives the time run records an event of
// kind. Call it before the run can record it.
func (w *watcher) expect(run, kind string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	w.mu.Lock()
	w.waits[run+"\x00"+kind] = ch
	w.mu.Unlock()
	return ch
}

func (w *watcher) count(kind string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.counts[kind]
}

func (w *watcher) close() { w.nc.Close() }

// clientResult is what a set of clients measured.
type clientResult struct {
	runs []string
	lat  []time.Duration
	// startLat is each run's Start call, request to reply.
	startLat []time.Duration
	elapsed  time.Duration
	failed   int
	lastErr  error
}

// clients runs n clients for d (or until each made max runs, when max is
// above 0): each starts a run of ag with input and waits until it records
// kind, then starts the next.
func (b *bencher) clients(ctx context.Context, w *watcher, n int, d time.Duration, max int, ag, input, kind, prefix string) clientResult {
	c := api.NewClient(w.nc)
	var (
		mu  sync.Mutex
		res clientResult
		wg  sync.WaitGroup
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for cl := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; (max == 0 || i < max) && time.Now().Before(stop) && ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%s-%d-%d", prefix, cl, i)
				ch := w.expect(id, kind)
				t0 := time.Now()
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := c.Start(sctx, api.StartRequest{Run: id, Agent: ag, Input: input})
				ts := time.Since(t0)
				if err == nil {
					select {
					case t1 := <-ch:
						mu.Lock()
						res.runs = append(res.runs, id)
						res.lat = append(res.lat, t1.Sub(t0))
						res.startLat = append(res.startLat, ts)
						mu.Unlock()
					case <-sctx.Done():
						err = fmt.Errorf("run %s: no %s within 30 s", id, kind)
					}
				}
				cancel()
				if err != nil {
					mu.Lock()
					res.failed++
					res.lastErr = err
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	slices.Sort(res.lat)
	slices.Sort(res.startLat)
	return res
}

var errNoRuns = errors.New("no run finished")

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// StepsAgent builds the agent of the peers comparison (bench/peers): its
// scripted model asks, one turn at a time, for as many calls of the
// instant tool "step" as the run's input says ("steps=3"), then answers;
// allow-all policy; tool timeout infinite.
func StepsAgent(name string) (*agent.Agent, error) {
	return agent.New(name, stepsModel{}, []tools.Tool{stepTool()}, policy.AlwaysAllow(),
		agent.WithToolTimeout(tools.Infinity()), agent.WithMaxTurns(1000)).Build()
}

type stepsModel struct{}

func (stepsModel) Name() string { return "bench:steps" }

func (stepsModel) Complete(_ context.Context, req model.Request) (model.Reply, error) {
	steps := 0
	if len(req.Transcript) > 0 {
		steps, _ = strconv.Atoi(strings.TrimPrefix(req.Transcript[0].Text, "steps="))
	}
	u := &model.Usage{InputTokens: 10, OutputTokens: 5}
	if req.Turn <= steps {
		return model.Reply{Kind: model.ReplyToolRequest, Usage: u, Turn: model.Message{Role: model.RoleAssistant,
			Calls: []model.ToolCall{{ID: "c" + strconv.Itoa(req.Turn), Name: "step", Arguments: json.RawMessage(`{"n":` + strconv.Itoa(req.Turn) + `}`)}}}}, nil
	}
	return model.Reply{Kind: model.ReplyFinalAnswer, Usage: u, Turn: model.Message{Role: model.RoleAssistant, Text: "done"}}, nil
}

// headKey is the head signing key of this process's runners: the bench's
// runners sign their runs' heads as a deployment's do (`weft dev`, `weft
// roles init` give them one), so that the figures include signing
// (docs/adr/0026-signed-heads.md).
var headKey = sync.OnceValue(func() nkeys.KeyPair {
	kp, err := nkeys.CreateUser()
	if err != nil {
		panic(fmt.Sprintf("bench: head key: %v", err))
	}
	return kp
})
