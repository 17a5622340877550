// Package host runs Weft's server side in one process, for an application
// that embeds the runtime with its own agents: it provisions the streams
// and buckets, then runs a runner (with its in-process tool worker)
// serving the command API weft.api.*, the projector keeping the read
// models, the query service weft.api.query.* and the catalog, until ctx
// ends, when the runner drains and hands its runs off.
//
// The same parts run as separate processes, any number of each, on one
// NATS server or cluster: runners (runner.New, then Run; cmd/runner) and
// projectors with their query service (projector.RunAll; cmd/projector).
// Run is what they are in one process:
//
//	err := host.Run(ctx, node.Conn(), node.JetStream(), []*agent.Agent{desk})
//
// Clients use package client.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
)

// Option configures Run.
type Option func(*config)

type config struct {
	logger     *slog.Logger
	lease      time.Duration
	replicas   int
	runnerOpts []runner.Option
	queries    bool
	qnc        *nats.Conn
	qjs        jetstream.JetStream
	catalog    bool
	ready      func()
}

// WithLogger logs the runner's and the projector's records through l
// (default: discard).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithLease sets the runner's liveness lease, the one provisioning gives
// the weft_runners bucket (default runner.DefaultLease).
func WithLease(d time.Duration) Option { return func(c *config) { c.lease = d } }

// WithReplicas provisions every stream and bucket with n replicas (1 on a
// single server, 3 on a cluster; an existing asset's higher count is
// kept).
func WithReplicas(n int) Option { return func(c *config) { c.replicas = n } }

// WithRunnerOptions passes options to runner.New (its id, drain window,
// external tools, telemetry, …). WithLogger and WithLease are applied
// before them.
func WithRunnerOptions(opts ...runner.Option) Option {
	return func(c *config) { c.runnerOpts = append(c.runnerOpts, opts...) }
}

// WithoutQueries runs no projector and no query service in this process
// (another process runs them: cmd/projector).
func WithoutQueries() Option { return func(c *config) { c.queries = false } }

// WithQueriesOn runs the projector and the query service on a connection
// of their own, nc and js (one with the projector's credentials, package
// roles: docs/security.md), instead of the runner's. Their buckets are
// provisioned on it, as cmd/projector provisions them, and the runner's
// provisioning leaves them out (with roles, only the projector may create
// them). They keep an existing higher replica count, as the runner's
// assets do (WithReplicas). WithoutQueries overrides it.
func WithQueriesOn(nc *nats.Conn, js jetstream.JetStream) Option {
	return func(c *config) { c.qnc, c.qjs = nc, js }
}

// WithoutCatalog serves no catalog (docs/protocol/45-catalog.md).
func WithoutCatalog() Option { return func(c *config) { c.catalog = false } }

// WithReady calls ready once the command API and (unless WithoutQueries)
// the query service answer every endpoint. Run returns only after ready
// returned.
func WithReady(ready func()) Option { return func(c *config) { c.ready = ready } }

// Run provisions the assets and runs a runner for agents, the projector,
// the query service and the catalog on nc (the projector and the query
// service on WithQueriesOn's connection) until ctx ends. It returns nil
// after a clean stop (ctx ended, the runner drained), else the first
// failure.
func Run(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, agents []*agent.Agent, opts ...Option) error {
	c := config{lease: runner.DefaultLease, replicas: 1, queries: true, catalog: true}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	qnc, qjs := nc, js
	if c.qnc != nil {
		qnc, qjs = c.qnc, c.qjs
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	popts := []runner.ProvisionOption{runner.WithReplicas(c.replicas)}
	if c.queries && c.qnc == nil {
		popts = append(popts, runner.WithAssets(projector.Assets()...))
	}
	err := runner.Provision(pctx, js, c.lease, popts...)
	if err == nil && c.queries && c.qnc != nil {
		err = provision.EnsureOnly(pctx, qjs, projector.Assets(), provision.WithReplicas(c.replicas), provision.KeepHigherReplicas())
	}
	cancel()
	if err != nil {
		return fmt.Errorf("host: provision: %w", err)
	}
	rn, err := runner.New(nc, js, agents, append([]runner.Option{runner.WithLogger(c.logger), runner.WithLease(c.lease)}, c.runnerOpts...)...)
	if err != nil {
		return fmt.Errorf("host: %w", err)
	}
	if c.catalog {
		cat, err := catalog.Serve(nc, agents)
		if err != nil {
			return fmt.Errorf("host: catalog: %w", err)
		}
		defer cat.Stop()
	}
	// One group owns the parts and the readiness check: Run returns once
	// all of them did (STYLE.md principle 9). The check ends with the
	// runner: a runner that stopped (or failed) never becomes ready.
	var g errgroup.Group
	errs := make(chan error, 2)
	readyCtx, stopReady := context.WithCancel(ctx)
	defer stopReady()
	g.Go(func() error {
		defer stopReady()
		errs <- rn.Run(ctx)
		return nil
	})
	if c.queries {
		g.Go(func() error {
			errs <- projector.RunAll(ctx, qnc, qjs, eventlog.New(qjs), c.logger)
			return nil
		})
	}
	if c.ready != nil {
		g.Go(func() error {
			if ready(readyCtx, nc, c.queries) == nil {
				c.ready()
			}
			return nil
		})
	}
	_ = g.Wait() // every part reports on errs
	close(errs)
	var all []error
	for e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
}

// ready waits until the command API and, with queries, the query service
// answer every endpoint.
func ready(ctx context.Context, nc *nats.Conn, queries bool) error {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := api.NewClient(nc).Ready(rctx); err != nil {
		return err
	}
	if queries {
		return projector.NewClient(nc).Ready(rctx)
	}
	return nil
}
