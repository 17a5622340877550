package natsnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// DefaultDrainWindow is how long Run lets Close drain the connection after
// a shutdown signal when WithDrainWindow is not given.
const DefaultDrainWindow = 10 * time.Second

// ShutdownSignals returns the signals NotifyShutdown and Run treat as a
// request to stop cleanly: SIGTERM (what process supervisors and container
// runtimes send) and the interrupt of Ctrl-C. Each call returns a new
// slice.
func ShutdownSignals() []os.Signal { return []os.Signal{syscall.SIGTERM, os.Interrupt} }

// WithDrainWindow bounds how long Run's Close may spend draining the
// connection once the work function has returned; zero or less keeps
// DefaultDrainWindow. The embedded server is shut down and waited for
// whether or not the drain finished in time.
func WithDrainWindow(d time.Duration) Option { return func(c *config) { c.drainWindow = d } }

// NotifyShutdown returns a copy of ctx that is cancelled when the process
// receives one of ShutdownSignals, and a stop function that cancels it and
// stops listening for them (call it when done, typically deferred). It is
// signal.NotifyContext with Weft's signal set, for mains that own the
// node's lifetime themselves and call Close after their work has stopped.
func NotifyShutdown(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, ShutdownSignals()...)
}

// Run is the shutdown sequence a main needs around a node, in one call. It
// starts a node as Start does, then calls work with a context that ends
// when ctx ends or the process receives SIGTERM or an interrupt, and with
// the node. When work returns, for whatever reason, Run closes the node:
// it drains the connection (pending publishes are flushed and subscription
// handlers already running finish), shuts an embedded server down and waits
// for it, the drain bounded by the drain window (WithDrainWindow). The
// store lock is released only after the server has stopped.
//
// Run returns work's error, except context.Canceled caused by the signal
// or by ctx, which is the normal way to stop; joined with a Close error if
// the drain did not finish in time. A typical main:
//
//	err := natsnode.Run(context.Background(), func(ctx context.Context, n *natsnode.Node) error {
//		g, ctx := errgroup.WithContext(ctx)
//		g.Go(func() error { return rn.Run(ctx) })
//		return g.Wait()
//	}, natsnode.FromEnv(os.Getenv)...)
func Run(ctx context.Context, work func(ctx context.Context, n *Node) error, opts ...Option) error {
	ctx, stop := NotifyShutdown(ctx)
	defer stop()
	var c config
	for _, o := range opts {
		o(&c)
	}
	n, err := Start(ctx, opts...)
	if err != nil {
		return err
	}
	werr := work(ctx, n)
	if werr != nil && errors.Is(werr, context.Canceled) && ctx.Err() != nil {
		werr = nil
	}
	window := c.drainWindow
	if window <= 0 {
		window = DefaultDrainWindow
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), window)
	defer cancel()
	if cerr := n.Close(cctx); cerr != nil {
		return errors.Join(werr, fmt.Errorf("natsnode: shutdown: %w", cerr))
	}
	return werr
}
