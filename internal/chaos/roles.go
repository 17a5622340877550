package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/worker"
)

// EnvRole names the environment variable that turns a process started by
// the harness into one of its parts: "nats", "runner", "worker" or
// "projector". A binary that embeds the harness (weft chaos, a test
// binary) calls RoleMain first thing when it is set.
const EnvRole = "WEFT_CHAOS_ROLE"

// The rest of a part's environment.
const (
	envID       = "WEFT_CHAOS_ID"       // the part's name (runner and worker id)
	envConf     = "WEFT_CHAOS_CONF"     // nats: the server's configuration file
	envLedger   = "WEFT_CHAOS_LEDGER"   // runner, worker: the body-start ledger
	envAcks     = "WEFT_CHAOS_ACKS"     // runner: this incarnation's ack ledger
	envLease    = "WEFT_CHAOS_LEASE"    // runner: the liveness lease
	envReplicas = "WEFT_CHAOS_REPLICAS" // runner, projector: asset replicas
	envAckWait  = "WEFT_CHAOS_ACK_WAIT" // runner, worker: task ack wait
)

// RoleMain runs the part of the harness that EnvRole names and returns
// the process's exit code. It returns handled false when EnvRole is unset.
//
// The runner part is test-only instrumentation around the public runner:
// SIGUSR1 makes it SIGKILL itself right after its next acknowledged append
// to the event log, and SIGUSR2 makes it SIGSTOP itself there, so the
// harness can stop a runner between an append and the effect the append
// calls for (a dispatch, a model call, a timer). Nothing else in Weft
// reacts to these signals.
func RoleMain() (handled bool, code int) {
	role := os.Getenv(EnvRole)
	if role == "" {
		return false, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var err error
	switch role {
	case "nats":
		err = natsMain(ctx)
	case "runner":
		err = runnerMain(ctx, logger)
	case "worker":
		err = workerMain(ctx, logger)
	case "projector":
		err = projectorMain(ctx, logger)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "chaos %s %s: %v\n", role, os.Getenv(envID), err)
		return true, 1
	}
	return true, 0
}

// natsMain is a nats-server process: the server of the nats-server module
// in go.mod, started from the configuration file the harness wrote, until
// SIGTERM (a clean shutdown) or SIGKILL. A cluster node does not wait for
// its JetStream to answer: that needs a quorum of the other nodes.
func natsMain(ctx context.Context) error {
	opts, err := server.ProcessConfigFile(os.Getenv(envConf))
	if err != nil {
		return err
	}
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	srv.ConfigureLogger()
	go srv.Start()
	if !srv.ReadyForConnections(time.Minute) {
		return errors.New("nats-server not ready for connections")
	}
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

// connect connects to the harness's server, retrying while it is down (a
// part may be restarted while the server is), until ctx ends.
func connect(ctx context.Context, name string) (*natsnode.Node, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := natsnode.Start(cctx, natsnode.WithURL(os.Getenv(natsnode.EnvURL)), natsnode.WithName(name),
			natsnode.WithNATSOptions(nats.ReconnectWait(100*time.Millisecond), nats.ReconnectJitter(50*time.Millisecond, 50*time.Millisecond),
				// Refused by another harness's server on a node's port: keep
				// trying the harness's own nodes (the refusal is logged, and
				// the harness reports it, checkForeignServers).
				nats.IgnoreAuthErrorAbort()))
		cancel()
		if err == nil {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// retry calls f until it succeeds or ctx ends.
func retry(ctx context.Context, f func(ctx context.Context) error) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(cctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// partAgent is the harness's agent for a part process, whose bodies write
// the ledger with the last look of lk's check.
func partAgent(lk *looks) (*agent.Agent, error) {
	return Agent(&Ledger{path: os.Getenv(envLedger), process: fmt.Sprintf("%s.%d", os.Getenv(envID), os.Getpid()), looks: lk}, partAgentOptions()...)
}

func runnerMain(ctx context.Context, logger *slog.Logger) error {
	// First thing: SIGUSR1 and SIGUSR2 must never take their default
	// action (ending the process) once the harness may send them.
	usr := make(chan os.Signal, 4)
	signal.Notify(usr, syscall.SIGUSR1, syscall.SIGUSR2)
	id := os.Getenv(envID)
	lease := envDuration(envLease, time.Second)
	// The ack ledger exists once the handler above is installed: the
	// harness sends SIGUSR1/SIGUSR2 only to a runner whose ledger exists.
	acks, err := os.OpenFile(os.Getenv(envAcks), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer acks.Close()
	node, err := connect(ctx, id)
	if err != nil {
		return err
	}
	defer node.Close(context.Background())
	js := &recordingJS{JetStream: node.JetStream(), acks: acks}
	go func() {
		for s := range usr {
			sig := syscall.SIGSTOP
			if s == syscall.SIGUSR1 {
				sig = syscall.SIGKILL
			}
			js.arm(sig)
		}
	}()
	if err := retry(ctx, func(ctx context.Context) error {
		return runner.Provision(ctx, node.JetStream(), lease, runner.WithReplicas(envInt(envReplicas, 1)), runner.WithAssets(projector.Assets()...))
	}); err != nil {
		return err
	}
	lk := newLooks()
	a, err := partAgent(lk)
	if err != nil {
		return err
	}
	opts := []runner.Option{runner.WithID(id), runner.WithLease(lease),
		runner.WithDrainWindow(5 * time.Second), runner.WithLogger(logger.With("runner", id)),
		runner.WithExternalTools(externalTools...),
		runner.WithWorkerOptions(worker.WithAckWait(envDuration(envAckWait, time.Second)), worker.WithID(id+"-w"),
			worker.WithAttemptCheck(lk.check(worker.LogCheck(node.JetStream()))))}
	if path := os.Getenv(runner.EnvHeadKey); path != "" {
		kp, err := runner.ReadHeadKey(path)
		if err != nil {
			return err
		}
		opts = append(opts, runner.WithHeadKey(kp))
	}
	r, err := runner.New(node.Conn(), js, []*agent.Agent{a}, opts...)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// recordingJS is the runner part's JetStream: every append to the event log
// the server acknowledged is written to the ack ledger (one line per
// message: "ack <seq> <run> <first version> <first event id>") before the
// runner sees the acknowledgement, so the harness can check that no
// acknowledged event is missing after the server restarts. A plain write
// is enough: the ledger must survive a SIGKILL of this process (the page
// cache does), not a power loss, which the harness does not simulate.
type recordingJS struct {
	jetstream.JetStream
	mu    sync.Mutex
	acks  *os.File
	after syscall.Signal // a signal to send itself after the next append
	until time.Time      // ... if it comes before then
}

// armWindow is how long an armed signal waits for an append; the harness
// continues a runner it asked to stop itself after armWindow plus the
// pause.
const armWindow = 2 * time.Second

func (j *recordingJS) arm(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.after, j.until = sig, time.Now().Add(armWindow)
}

// PublishMsg publishes m and records an acknowledged event-log append.
func (j *recordingJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := j.JetStream.PublishMsg(ctx, m, opts...)
	if err != nil || !strings.HasPrefix(m.Subject, eventlog.SubjectPrefix) {
		return ack, err
	}
	var body struct {
		Events []struct {
			ID      string `json:"id"`
			Run     string `json:"run"`
			Version uint64 `json:"version"`
		} `json:"events"`
	}
	if json.Unmarshal(m.Data, &body) != nil || len(body.Events) == 0 {
		return ack, nil
	}
	e := body.Events[0]
	j.mu.Lock()
	fmt.Fprintf(j.acks, "ack %d %s %d %s %d %d\n", ack.Sequence, e.Run, e.Version, e.ID, len(body.Events), time.Now().UnixNano())
	sig := j.after
	if sig != 0 && time.Now().Before(j.until) {
		j.after = 0
		name := "SIGSTOP"
		if sig == syscall.SIGKILL {
			name = "SIGKILL"
		}
		fmt.Fprintf(j.acks, "self %s %s %d\n", name, e.Run, e.Version)
		_ = syscall.Kill(os.Getpid(), sig)
	}
	j.mu.Unlock()
	return ack, nil
}

func workerMain(ctx context.Context, logger *slog.Logger) error {
	id := os.Getenv(envID)
	node, err := connect(ctx, id)
	if err != nil {
		return err
	}
	defer node.Close(context.Background())
	lk := newLooks()
	a, err := partAgent(lk)
	if err != nil {
		return err
	}
	w := worker.New(node.Conn(), node.JetStream(), worker.WithID(id), worker.WithAckWait(envDuration(envAckWait, time.Second)), worker.WithLogger(logger.With("worker", id)),
		worker.WithAttemptCheck(lk.check(worker.LogCheck(node.JetStream()))))
	for _, t := range a.Tools() {
		for _, ext := range externalTools {
			if t.Name() == ext && !servedByTypeScript(ext) {
				w.Handle(api.Queue{Agent: a.Name(), Version: a.Version(), Tool: t.Name()}, runner.ToolHandler(t, nil))
			}
		}
	}
	return w.Run(ctx)
}

func projectorMain(ctx context.Context, logger *slog.Logger) error {
	id := os.Getenv(envID)
	node, err := connect(ctx, id)
	if err != nil {
		return err
	}
	defer node.Close(context.Background())
	js := node.JetStream()
	if err := retry(ctx, func(ctx context.Context) error {
		return provision.Ensure(ctx, js, projector.Assets(), provision.WithReplicas(envInt(envReplicas, 1)))
	}); err != nil {
		return err
	}
	// A projector that stops on its own (a server outage it could not ride
	// out) exits; the harness starts it again, as a service manager would.
	return projector.RunAll(ctx, node.Conn(), js, eventlog.New(js), logger.With("projector", id))
}
