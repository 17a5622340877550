// Command projector keeps Weft's read models up to date and answers queries:
// it consumes the event log from its checkpoint into the weft_* KV buckets
// and serves the weft-query micro service (weft.api.query.*) until SIGTERM
// or Ctrl-C, then drains its connection and stops.
//
//	projector --nats nats://127.0.0.1:4222
//	projector --rebuild   # recompute every read model from sequence 1 first
//
// Without --nats or NATS_URL it runs an embedded server (WEFT_DATA). Run
// `projector --help` for the flags, examples and exit codes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
)

// Exit codes.
const (
	exitOK     = 0 // stopped by SIGTERM or Ctrl-C, or --help
	exitFailed = 1 // NATS, provisioning or projecting failed
	exitUsage  = 2 // bad command line
)

const usage = `projector: keep Weft's read models up to date and answer queries.

Usage:
  projector [--nats URL] [--creds FILE] [--rebuild] [--replicas N] [-v]

It consumes the event log (weft_log) from its checkpoint into the weft_*
KV buckets and serves the weft-query micro service (weft.api.query.*,
docs/protocol/50-queries.md) until SIGTERM or Ctrl-C; then it drains its
connection and stops. Without --nats or $NATS_URL it runs an embedded
server with its store in $WEFT_DATA. Credentials: --creds / NATS_CREDS
(the projector role's, docs/security.md), --nkey / NATS_NKEY,
--user / NATS_USER with NATS_PASSWORD, or NATS_TOKEN.

Flags:
%s
Examples:
  projector --nats nats://127.0.0.1:4222          # next to runners on a shared server
  NATS_URL=nats://nats:4222 projector --replicas 3 # on a 3-node cluster
  projector --nats nats://127.0.0.1:4222 --rebuild # recompute every read model from sequence 1 first
  nats req weft.api.query.run '{"schema":1,"run":"pay-7"}'   # then ask it

Exit codes:
  0 stopped by SIGTERM or Ctrl-C (or --help), 1 NATS, provisioning or
  projecting failed, 2 bad command line.
`

func main() {
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	code := exitCode(err)
	if code != exitOK {
		fmt.Fprintln(os.Stderr, "projector:", err)
	}
	os.Exit(code)
}

// usageError is a bad command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		return exitUsage
	}
	return exitFailed
}

// run runs the projector until ctx ends or the process receives SIGTERM or
// an interrupt (natsnode.Run).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("projector", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("nats", getenv(natsnode.EnvURL), "NATS server URL (default $NATS_URL; empty: an embedded server)")
	rebuild := fs.Bool("rebuild", false, "recompute every read model from sequence 1 before projecting")
	replicas := fs.Int("replicas", 1, "replicas of the KV buckets (3 on a cluster)")
	verbose := fs.Bool("v", false, "debug logs")
	creds := natsnode.RegisterFlags(fs)
	fs.Usage = func() {
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, usage, b.String())
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q (see projector --help)", fs.Args())}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := append(natsnode.FromEnv(getenv), creds.Options()...)
	if *url != "" {
		opts = append(opts, natsnode.WithURL(*url))
	}
	return natsnode.Run(ctx, func(ctx context.Context, node *natsnode.Node) error {
		js := node.JetStream()
		// Its own buckets only: the log is the runners' (with roles, a
		// projector may not create or change it); until a runner created
		// it the projector retries every second.
		if err := provision.EnsureOnly(ctx, js, projector.Assets(), provision.WithReplicas(*replicas), provision.KeepHigherReplicas()); err != nil {
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
	}, opts...)
}
