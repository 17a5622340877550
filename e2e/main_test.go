// Package e2e_test proves the docs/semantics.md §12 recovery scenarios (30–35)
// with real runner processes: TestMain re-executes the test binary as a
// runner when WEFT_E2E_RUNNER is set, and the tests kill those processes
// with SIGKILL or SIGTERM at the named moment. A side ledger (a file each
// body start appends an fsynced line to) counts real body starts; the
// assertions are on it.
package e2e_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/worker"
)

// lease is the runners' liveness lease in these tests: 1 s (the default), or
// WEFT_E2E_LEASE (a Go duration) to measure another, such as the 1 s
// default.
var lease = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("WEFT_E2E_LEASE")); err == nil {
		return d
	}
	return time.Second
}()

func TestMain(m *testing.M) {
	if os.Getenv("WEFT_E2E_RUNNER") != "" {
		os.Exit(runnerMain())
	}
	if os.Getenv("WEFT_E2E_WORKER") != "" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// runnerMain is the runner process: the e2e agent with its in-process
// worker, on NATS_URL, until SIGTERM.
func runnerMain() int {
	var extra []runner.Option
	if os.Getenv("WEFT_E2E_NO_WORKER") != "" {
		extra = append(extra, runner.WithoutWorker())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	copts := []nats.Option{nats.MaxReconnects(-1)}
	if d, err := time.ParseDuration(os.Getenv("WEFT_E2E_RECONNECT_WAIT")); err == nil {
		copts = append(copts, nats.ReconnectWait(d))
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), copts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	js, _ := jetstreamNew(nc)
	var agents []*agent.Agent
	if os.Getenv("WEFT_E2E_CHAOS") != "" {
		agents, err = chaosAgents(os.Getenv("WEFT_E2E_LEDGER"))
	} else {
		var a *agent.Agent
		a, err = e2eAgent(os.Getenv("WEFT_E2E_LEDGER"))
		agents = []*agent.Agent{a}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	drain := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("WEFT_E2E_DRAIN")); err == nil {
		drain = d
	}
	level := slog.LevelWarn
	if os.Getenv("WEFT_E2E_QUIET") != "" {
		level = slog.LevelError + 4 // the chaos test makes errors on purpose
	}
	if l := os.Getenv("WEFT_E2E_LOG_LEVEL"); l != "" {
		_ = level.UnmarshalText([]byte(l))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	opts := append([]runner.Option{runner.WithID(os.Getenv("WEFT_E2E_RUNNER")), runner.WithLease(lease),
		runner.WithDrainWindow(drain), runner.WithLogger(logger), runner.WithWorkerOptions(worker.WithAckWait(time.Second))}, extra...)
	r, err := runner.New(nc, js, agents, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := r.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// workerMain is a standalone worker process for the e2e agent's tools
// (the chaos agents' with WEFT_E2E_CHAOS), reporting over weft.api.report.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// A worker started while the chaos schedule has the server down (a
	// crash or a restart) waits for it, as a supervised worker would,
	// instead of exiting at once with nothing said (it exited 1 "by
	// itself" in seed 2 of the chaos test).
	copts := []nats.Option{nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true)}
	if d, err := time.ParseDuration(os.Getenv("WEFT_E2E_RECONNECT_WAIT")); err == nil {
		copts = append(copts, nats.ReconnectWait(d))
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"), copts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer nc.Close()
	js, _ := jetstreamNew(nc)
	var agents []*agent.Agent
	if os.Getenv("WEFT_E2E_CHAOS") != "" {
		agents, err = chaosAgents(os.Getenv("WEFT_E2E_LEDGER"))
	} else {
		var a *agent.Agent
		a, err = e2eAgent(os.Getenv("WEFT_E2E_LEDGER"))
		agents = []*agent.Agent{a}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	level := slog.LevelWarn
	if l := os.Getenv("WEFT_E2E_LOG_LEVEL"); l != "" {
		_ = level.UnmarshalText([]byte(l))
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	w := worker.New(nc, js, worker.WithID(os.Getenv("WEFT_E2E_WORKER")), worker.WithAckWait(time.Second), worker.WithLogger(logger))
	for _, a := range agents {
		for _, t := range a.Tools() {
			w.Handle(api.Queue{Agent: a.Name(), Version: a.Version(), Tool: t.Name()}, runner.ToolHandler(t, nil))
		}
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// spawnWorker starts a standalone worker process.
func (e *env) spawnWorker(id string, extraEnv ...string) *proc {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WEFT_E2E_WORKER="+id, "NATS_URL="+e.srv.URL, "WEFT_E2E_LEDGER="+e.ledger)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = os.Stderr
	if e.logDir != "" {
		f, err := os.OpenFile(filepath.Join(e.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			e.t.Fatal(err)
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	return p
}

type env struct {
	t      testing.TB
	srv    *natstest.Server
	ledger string
	client *api.Client
	logDir string // when set, each runner process's stderr goes to <logDir>/<id>.log
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := natstest.Start(t, natstest.WithAssets(runner.Assets(lease)...))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := runner.Provision(ctx, srv.JS, lease); err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, ledger: filepath.Join(t.TempDir(), "ledger"), client: api.NewClient(srv.Conn)}
}

// proc is a runner subprocess.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// spawn starts a runner process called id and waits until it serves.
func (e *env) spawn(id string) *proc {
	e.t.Helper()
	return e.spawnWith(id)
}

// spawnWith is spawn with extra environment variables for the process.
func (e *env) spawnWith(id string, extraEnv ...string) *proc {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WEFT_E2E_RUNNER="+id, "NATS_URL="+e.srv.URL, "WEFT_E2E_LEDGER="+e.ledger)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.Stderr = os.Stderr
	if e.logDir != "" {
		f, err := os.OpenFile(filepath.Join(e.logDir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			e.t.Fatal(err)
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	// Serving once its liveness key exists and the API answers.
	deadline := time.Now().Add(20 * time.Second)
	kv, err := e.srv.JS.KeyValue(context.Background(), runner.RunnersBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	for {
		if _, err := kv.Get(context.Background(), id); err == nil {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("runner %s never served", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The liveness key is written before the command API subscribes: wait
	// until the weft service answers too.
	for {
		if _, err := e.srv.Conn.Request("$SRV.PING."+api.ServiceName, nil, time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("runner %s: the weft service never answered", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

func (p *proc) kill(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	if sig == syscall.SIGTERM {
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Fatal("runner did not drain within 20 s")
		}
	} else {
		<-p.done
	}
}

// starts counts the ledger's body starts of run's action.
func (e *env) starts(run, action string) int { return len(e.startsOf(run, action)) }

func (e *env) waitStarts(run, action string, n int) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.starts(run, action) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s %s: %d body starts, waiting for %d", run, action, e.starts(run, action), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) state(run string) aggregate.State {
	e.t.Helper()
	envs, _, err := e.srv.Log.Load(context.Background(), run)
	if err != nil {
		e.t.Fatal(err)
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			e.t.Fatal(err)
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return aggregate.Fold(recs)
}

func (e *env) waitFor(run, what string, cond func(aggregate.State) bool) aggregate.State {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := e.state(run)
		if s.Exists() && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s: timed out waiting for %s; status %+v actions %+v", run, what, aggregate.Status(s), s.Actions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) waitStatus(run string, k aggregate.StatusKind) aggregate.State {
	e.t.Helper()
	return e.waitFor(run, string(k), func(s aggregate.State) bool { return aggregate.Status(s).Kind == k })
}

func (e *env) start(run string, in input) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.client.Start(ctx, api.StartRequest{Run: run, Agent: "e2e", Input: in.String()}); err != nil {
		e.t.Fatal(err)
	}
}

func cctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

var _ = fmt.Sprint
