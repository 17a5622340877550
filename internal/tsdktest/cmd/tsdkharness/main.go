// Command tsdkharness starts what the TypeScript SDK's Node tests run
// against (sdk/typescript/test): an embedded nats-server listening on a
// free loopback port, with its store in the directory given by -data, and
// a real runner serving agent "tsdk" version "1", all of whose tools are
// left to external workers (runner.WithExternalTools): the TypeScript
// worker under test serves them; with the projector, the query service
// and the catalog (host.Run).
//
// It prints "NATS_URL=<url>" on stdout once the runner and the queries
// answer, then serves until SIGTERM or SIGINT (a graceful drain) or until its stdin
// closes (the test process that spawned it ended).
//
// The agent is tsdktest.Build's, with -approver-key as the key of its
// approver of signed proofs.
//
// Besides the runtime's own subjects it answers two of its own for the
// tests: tsdktest.check with a task as its body replies with the Go
// worker's attempt check of it (worker.LogCheck), {"current"} or
// {"error"}, for the Node tests to compare theirs with; and
// tsdktest.state with body {"run":"<id>"} replies with the run
// folded from its log (tsdktest.State), or {"error"}.
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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/tsdktest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/worker"
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
	approverKey := flag.String("approver-key", "", "a public user nkey whose signed proofs the agent's approver \"keys\" accepts (reviewer carol)")
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
	var keys []string
	if *approverKey != "" {
		keys = append(keys, *approverKey)
	}
	a, err := tsdktest.Build(keys...)
	if err != nil {
		return err
	}
	sub, err := node.Conn().Subscribe("tsdktest.state", func(m *nats.Msg) { answerState(node.JetStream(), m) })
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
		host.WithRunnerOptions(runner.WithExternalTools(tsdktest.ToolNames()...), runner.WithDrainWindow(5*time.Second)),
		host.WithReady(func() { fmt.Printf("NATS_URL=%s\n", node.URL()) }))
}

// answerCheck replies to tsdktest.check: the Go worker's attempt check of
// the task in m's body.
func answerCheck(check worker.AttemptCheck, m *nats.Msg) {
	var reply struct {
		Current bool   `json:"current"`
		Error   string `json:"error,omitempty"`
	}
	var t api.Task
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

// answerState replies to tsdktest.state: the run named in m's body, as
// tsdktest.State folds it.
func answerState(js jetstream.JetStream, m *nats.Msg) {
	var (
		req struct {
			Run string `json:"run"`
		}
		reply struct {
			tsdktest.RunState
			Error string `json:"error,omitempty"`
		}
	)
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Run == "" {
		reply.Error = "the body is not {\"run\":\"<id>\"}"
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		reply.RunState, err = tsdktest.State(ctx, js, req.Run)
		cancel()
		if err != nil {
			reply.Error = err.Error()
		}
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}
