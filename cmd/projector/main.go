// Command projector keeps Weft's read models up to date and answers queries:
// it consumes the event log from its checkpoint into the weft_* KV buckets
// and serves the weft-query micro service (weft.api.query.*) until SIGTERM.
//
//	projector --nats nats://127.0.0.1:4222
//	projector --rebuild   # recompute every read model from sequence 1 first
//
// Without --nats or NATS_URL it runs an embedded server (WEFT_DATA).
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

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "projector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("projector", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats", getenv(natsnode.EnvURL), "NATS server URL (default $NATS_URL; empty: embedded server)")
	rebuild := fs.Bool("rebuild", false, "recompute every read model from sequence 1 before projecting")
	replicas := fs.Int("replicas", 1, "replicas of the KV buckets (3 on a cluster)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	opts := natsnode.FromEnv(getenv)
	if *url != "" {
		opts = append(opts, natsnode.WithURL(*url))
	}
	node, err := natsnode.Start(ctx, opts...)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		node.Close(cctx)
	}()
	js := node.JetStream()
	if err := provision.Ensure(ctx, js, provision.Options{Replicas: *replicas}, projector.Assets()...); err != nil {
		return err
	}
	log := eventlog.New(js)
	if *rebuild {
		cp, err := projector.Rebuild(ctx, js, log, func(phase string, done, total uint64) {
			fmt.Fprintf(stderr, "rebuild %s %d/%d\n", phase, done, total)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rebuilt up to sequence %d\n", cp.Seq)
	}
	logger.Info("projector running", "nats", node.URL())
	return projector.RunAll(ctx, node.Conn(), js, log, logger)
}
