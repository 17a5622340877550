package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

type harness struct {
	t      *testing.T
	srv    *natstest.Server
	client *api.Client

	mu       sync.Mutex
	running  map[*runner.Runner]bool // started and not stopped
	stopping int                     // runners draining
	// unbalanced: startRunner does not wait for the partitions to settle
	// (a test whose partitions stay with a stand-in or a busy runner).
	unbalanced bool
	// partitions is the deployment's number of partitions when a test
	// configures one (runner.WithPartitions); 0 is runner.DefaultPartitions.
	partitions int
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	srv := natstest.Start(t, natstest.WithAssets(runner.Assets(2*time.Second)...))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := runner.Provision(ctx, srv.JS, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, srv: srv, client: api.NewClient(srv.Conn)}
}

// startRunner runs a runner until the returned stop is called (SIGTERM-like
// drain) or the test ends.
func (h *harness) startRunner(agents []*agent.Agent, opts ...runner.Option) (*runner.Runner, func()) {
	h.t.Helper()
	return h.startRunnerJS(nil, agents, opts...)
}

// runOn runs a runner on nc and js (a JetStream wrapped to inject faults)
// until the test ends; it does not wait for the runner to serve (see
// startServed).
func (h *harness) runOn(nc *nats.Conn, js jetstream.JetStream, agents []*agent.Agent, opts ...runner.Option) *runner.Runner {
	h.t.Helper()
	r, err := runner.New(nc, js, agents, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	h.t.Cleanup(func() { stop(); <-done })
	return r
}

// startServed sends req until a runner serves it: unavailable (no runner
// serves the API yet) is sent again; any other refusal fails the test.
func (h *harness) startServed(c context.Context, req api.StartRequest) {
	h.t.Helper()
	for {
		_, err := h.client.Start(c, req)
		if err == nil {
			return
		}
		if weft.ErrorCode(err) != weft.CodeUnavailable || c.Err() != nil {
			h.t.Fatal(err)
		}
	}
}

// startRunnerJS is startRunner with the runner's JetStream context made
// with jsOpts (a jetstream.WithClientTrace that orders a test's step
// between two requests of the runner's).
func (h *harness) startRunnerJS(jsOpts []jetstream.JetStreamOpt, agents []*agent.Agent, opts ...runner.Option) (*runner.Runner, func()) {
	h.t.Helper()
	return h.startRunnerConn(nil, jsOpts, agents, opts...)
}

// startRunnerConn is startRunnerJS with the runner's connection made with
// natsOpts too (a reconnect wait, for example).
func (h *harness) startRunnerConn(natsOpts []nats.Option, jsOpts []jetstream.JetStreamOpt, agents []*agent.Agent, opts ...runner.Option) (*runner.Runner, func()) {
	h.t.Helper()
	// Its own connection and JetStream context, so that it reconnects
	// after a server restart (h.srv.Restart closes h.srv.JS's connection).
	nc := h.srv.Connect(append([]nats.Option{nats.MaxReconnects(-1)}, natsOpts...)...)
	js, err := jetstream.New(nc, jsOpts...)
	if err != nil {
		h.t.Fatal(err)
	}
	opts = append([]runner.Option{runner.WithLease(2 * time.Second), runner.WithDrainWindow(5 * time.Second)}, opts...)
	r, err := runner.New(nc, js, agents, opts...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// Wait until the service answers (without sending it a command).
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err := api.NewClient(nc).Ready(rctx); err != nil {
		h.t.Fatal(err)
	}
	// Ready may have been answered by another runner: wait for this one's
	// own liveness key too, so that a test that goes on to break the
	// runners bucket does not do it while this runner still starts.
	kv, err := js.KeyValue(rctx, runner.RunnersBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	for {
		if _, err := kv.Get(rctx, r.ID()); err == nil {
			break
		}
		if rctx.Err() != nil {
			h.t.Fatalf("runner %s never heartbeated", r.ID())
		}
		// wall clock: a poll, within rctx, of the runner's first beat, put as it starts (not on a tick of ownership's clock)
		time.Sleep(10 * time.Millisecond)
	}
	h.mu.Lock()
	if h.running == nil {
		h.running = map[*runner.Runner]bool{}
	}
	h.running[r] = true
	h.mu.Unlock()
	h.waitBalanced()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			delete(h.running, r)
			h.stopping++
			h.mu.Unlock()
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("runner: %v", err)
			}
			h.mu.Lock()
			h.stopping--
			h.mu.Unlock()
		})
	}
	h.t.Cleanup(stop)
	return r, stop
}

// waitBalanced waits (up to 20 s) until the running runners own the
// partitions as the assignment (partition.Owner) gives them, every one
// owned by exactly one, so that a test's commands find the owners settled
// (while a partition moves, commands for its runs are answered
// runner_busy). It logs instead of failing: a test may break liveness.
// While a runner drains its partitions move when its work is done: then
// it does not wait.
func (h *harness) waitBalanced() {
	h.t.Helper()
	h.mu.Lock()
	if h.stopping > 0 || h.unbalanced {
		h.mu.Unlock()
		return
	}
	n := h.partitions
	if n == 0 {
		n = runner.DefaultPartitions
	}
	var rs []*runner.Runner
	var ids []string
	for r := range h.running {
		rs = append(rs, r)
		ids = append(ids, r.ID())
	}
	h.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for !assignedOf(n, rs...) {
		if time.Now().After(deadline) {
			h.t.Logf("the partitions are not balanced among %v after 20 s", ids)
			return
		}
		// wall clock: a poll, bounded, for runners on the wall clock's ownership clock; a test on an ownClock sets h.unbalanced and steps (balance)
		time.Sleep(10 * time.Millisecond)
	}
}

// keeping returns two runner ids such that run's partition stays with the
// first when the second joins (partition.Owner), for a test about a run
// the first keeps driving.
func keeping(run string) (first, second string) {
	p := partition.Of(run, runner.DefaultPartitions)
	for i := 0; ; i++ {
		a, b := fmt.Sprint("ra-", i), fmt.Sprint("rb-", i)
		if partition.Owner(p, []string{a, b}) == a {
			return a, b
		}
	}
}

// owns makes runner id (a test's stand-in, heartbeating with h.heartbeat)
// the owner of the partitions of runs in weft_partitions, so that
// commands for them are forwarded to it.
func (h *harness) owns(id string, runs ...string) {
	h.t.Helper()
	kv, err := h.srv.JS.KeyValue(ctx(h.t), runner.PartitionsBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, run := range runs {
		if _, err := kv.Put(ctx(h.t), fmt.Sprintf("p.%04d", partition.Of(run, runner.DefaultPartitions)), []byte(id)); err != nil {
			h.t.Fatal(err)
		}
	}
}

// retrying calls f until it returns nil or a definite answer: a command
// that was not applied in time (runner_busy, contended, conflict,
// unavailable) or whose forward got no answer (outcome_unknown) is sent
// again — with the same command id, so never applied twice — until ctx
// ends.
func retrying(ctx context.Context, f func() error) error {
	for {
		err := f()
		switch weft.ErrorCode(err) {
		case weft.CodeRunnerBusy, weft.CodeContended, weft.CodeConflict, weft.CodeUnavailable, weft.CodeOutcomeUnknown:
			if ctx.Err() != nil {
				return err
			}
			// wall clock: a retry of a command that was not applied in time
			time.Sleep(50 * time.Millisecond)
			continue
		}
		return err
	}
}

// state folds run from the log.
func (h *harness) state(run string) aggregate.State {
	h.t.Helper()
	envs, _, err := h.srv.Log.Load(context.Background(), run)
	if err != nil {
		h.t.Fatal(err)
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			h.t.Fatal(err)
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return aggregate.Fold(recs)
}

// waitFor polls run's state until cond holds.
func (h *harness) waitFor(run, what string, cond func(aggregate.State) bool) aggregate.State {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := h.state(run)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			st := aggregate.Status(s)
			h.t.Fatalf("run %s: timed out waiting for %s; status %s %+v, actions %+v", run, what, st.Kind, st, s.Actions())
		}
		// wall clock: a poll of run's log
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) waitStatus(run string, kind aggregate.StatusKind) aggregate.State {
	h.t.Helper()
	return h.waitFor(run, string(kind), func(s aggregate.State) bool { return aggregate.Status(s).Kind == kind && s.Exists() })
}

// The test tool: "pay" records every body start and answers or hangs as
// its arguments say.
type payIn struct {
	Amount int64  `json:"amount"`
	Mode   string `json:"mode,omitempty" enum:"ok,hang,uncertain,slow,big"`
}

type payOut struct {
	ID string `json:"id"`
}

var payDef = tools.Define[payIn, payOut]("pay", "Pay an amount.")

type bodies struct {
	starts atomic.Int64
}

func (b *bodies) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		b.starts.Add(1)
		switch in.Mode {
		case "hang":
			<-ctx.Done()
			return payOut{}, ctx.Err()
		case "uncertain":
			return payOut{}, errUncertain
		case "slow":
			// wall clock: the "slow" body's own duration
			time.Sleep(time.Duration(50/max(in.Amount, 1)) * time.Millisecond)
		case "big":
			return payOut{ID: string(make([]byte, 0)) + longID}, nil
		}
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

var longID = func() string {
	b := make([]byte, 300)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}()

type uncertainErr struct{}

func (uncertainErr) Error() string { return "gateway timed out" }

var errUncertain = uncertainErr{}

// approvalAbove requires approval "finance" v1 for amounts over 100.
func approvalAbove(_ context.Context, a policy.Action) (policy.Decision, error) {
	in, matched, err := tools.Input(payDef, a)
	if err != nil {
		return policy.Decision{}, err
	}
	if matched && in.Amount > 100 {
		return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
	}
	return policy.Allow(), nil
}

func build(t *testing.T, m model.Model, ts []tools.Tool, p policy.Policy, opts ...agent.Option) *agent.Agent {
	t.Helper()
	opts = append([]agent.Option{agent.WithApprovers(approvers.Trusting("desk"))}, opts...)
	a, err := agent.New("desk", m, ts, p, opts...).Build()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func payCall(amount int64, mode string) model.ToolCall {
	b, _ := json.Marshal(payIn{Amount: amount, Mode: mode})
	return model.Call("pay", string(b))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func jetstreamWait(d time.Duration) jetstream.FetchOpt { return jetstream.FetchMaxWait(d) }
