// Package main is the runner command: it runs a Weft runner with its in-process tool worker for the
// payment-desk demo agent (package internal/demo) against a NATS server.
// Applications embed package runner with their own agents instead; this
// main shows the wiring and is what the end-to-end recovery tests kill.
//
//	runner [--nats URL] [--creds FILE] [--id ID] [--lease 1s] [--drain 10s] [--partitions N] [--provision]
//
// Credentials: --creds / NATS_CREDS (the runner role's, docs/security.md),
// --nkey / NATS_NKEY, --user and NATS_PASSWORD, or NATS_TOKEN.
//
// The first connection to the server is retried for up to 30 s, and the
// runner's first requests (its buckets, its task consumers) for as long
// as the server does not answer: a runner started while its server
// restarts waits for it. After that the connection reconnects for ever.
//
// The model is the scripted one unless WEFT_MODEL names a provider
// (docs/models.md). SIGTERM or SIGINT drains: running bodies and model
// calls get the drain window less a hand-over reserve (a fifth of it, at
// most 1 s) to finish and be recorded (a body still running then is
// reported worker_lost), and the runs are handed off within the window.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/model/provider"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/telemetry/exporter"
)

// envPersonKeys names the environment variable holding the path of the
// deployment's person keys file (--person-keys).
const envPersonKeys = "WEFT_PERSON_KEYS"

// raiseProcs is natsnode.EmbeddedProcs in the runner program (main sets
// it) and nothing in tests, which call run in their own process: a runner
// that embeds the server raises GOMAXPROCS
// (docs/adr/0042-procs-for-an-embedded-server.md).
var raiseProcs func() int

func main() {
	raiseProcs = natsnode.EmbeddedProcs
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "runner:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("runner", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats", getenv("NATS_URL"), "NATS server URL (default $NATS_URL)")
	id := fs.String("id", "", "runner id (default: generated)")
	lease := fs.Duration("lease", time.Second, "liveness lease: a lost runner's runs are taken over within about 1.25x this")
	drain := fs.Duration("drain", 10*time.Second, "drain window on SIGTERM: running bodies and model calls get it less a hand-over reserve (a fifth, at most 1s); bodies still running then are reported worker_lost")
	partitions := fs.Int("partitions", 0, "the deployment's number of partitions P (1 to 1024), fixed per deployment: 0 follows the recorded number (64 for a new deployment); N > 0 records N in a new deployment and must equal the recorded number otherwise (a runner started with another refuses to start; docs/adr/0019-partitions.md)")
	prov := fs.Bool("provision", true, "create or update the streams and buckets first")
	replicas := fs.Int("replicas", 1, "replica count of the streams and buckets it provisions: 1 on a single server, 3 on a cluster (an existing asset's higher count is kept)")
	verbose := fs.Bool("v", false, "debug logs")
	headKey := fs.String("head-key", getenv(runner.EnvHeadKey), "an nkeys user seed file: sign each run's chain head with it at every person's decision and at the run's end (docs/adr/0026-signed-heads.md); env "+runner.EnvHeadKey+"; empty: nothing is signed")
	personKeys := fs.String("person-keys", getenv(envPersonKeys), "a file of the people's keys, one a line: a public nkey (U…) and the name recorded for it; a reconcile, resolve or cancel signed by one of them (weft … --signing-key) is recorded under that name, verified (docs/security.md, \"Who did it\"); env "+envPersonKeys)
	requireIdentity := fs.Bool("require-identity", false, "refuse a person's command that does not say who made it and why (identity_required): with --person-keys, one without a signed proof; without, one without a name")
	creds := natsnode.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("--nats or NATS_URL is required")
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	shutdown, err := exporter.Setup(getenv)
	if err != nil {
		return err
	}
	defer shutdown(context.Background())

	nopts := append(natsnode.FromEnv(getenv), creds.Options()...)
	if *url == "" && raiseProcs != nil {
		raiseProcs()
	}
	node, err := natsnode.Start(ctx, append(nopts, natsnode.WithURL(*url))...)
	if err != nil {
		return err
	}
	defer func() {
		// Run returned within its drain window, every command ended with
		// it: the connection drains at once (bounded all the same).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Close(ctx)
	}()
	if *prov {
		if err := runner.Provision(ctx, node.JetStream(), *lease, runner.WithReplicas(*replicas)); err != nil {
			return err
		}
	}
	var m model.Model
	if getenv(provider.EnvModel) != "" {
		if m, err = provider.FromEnv(); err != nil {
			return err
		}
	}
	ag, err := demo.Agent(m)
	if err != nil {
		return err
	}
	opts := []runner.Option{runner.WithLogger(logger), runner.WithLease(*lease), runner.WithDrainWindow(*drain)}
	if *id != "" {
		opts = append(opts, runner.WithID(*id))
	}
	if *partitions != 0 {
		opts = append(opts, runner.WithPartitions(*partitions))
	}
	if *headKey != "" {
		kp, err := runner.ReadHeadKey(*headKey)
		if err != nil {
			return err
		}
		opts = append(opts, runner.WithHeadKey(kp))
	} else {
		logger.Warn("run heads are not signed: no --head-key (" + runner.EnvHeadKey + "); `weft audit verify --trust` cannot vouch for the runs this runner drives, and a run it finishes stays unsigned (docs/adr/0026-signed-heads.md)")
	}
	people := approvers.People{Require: *requireIdentity}
	if *personKeys != "" {
		if people.Keys, err = approvers.ReadKeys(*personKeys); err != nil {
			return err
		}
	}
	opts = append(opts, runner.WithPeople(people))
	r, err := runner.New(node.Conn(), node.JetStream(), []*agent.Agent{ag}, opts...)
	if err != nil {
		return err
	}
	// The catalog (tool schemas, approvers) for clients such as the
	// operator console: docs/protocol/45-catalog.md.
	cat, err := catalog.Serve(node.Conn(), []*agent.Agent{ag})
	if err != nil {
		return err
	}
	defer cat.Stop()
	logger.Info("runner serving", "id", r.ID(), "agent", ag.Name(), "model", ag.Model().Name())
	return r.Run(ctx)
}
