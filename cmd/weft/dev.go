package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/demo"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/worker"
)

// listFlag is a repeatable (or comma-separated) string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// runDev runs the demo. With external tools it runs the same pieces as
// demo.Run — runner, projector, query service, payment desk agent — but its
// in-process worker leaves those tools' tasks to workers outside the process
// (such as the nats CLI, docs/protocol/41-tasks.md).
//
// TODO(E): replace with a demo.Options field once demo.Run can leave tools to
// external workers itself.
func runDev(ctx context.Context, o demo.Options, external []string) error {
	if len(external) == 0 {
		return demo.Run(ctx, o)
	}
	logger := o.Logger
	ag, err := demo.Agent(o.Model)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range ag.Tools() {
		names = append(names, t.Name())
	}
	for _, x := range external {
		if !slices.Contains(names, x) {
			return usagef("--external-tool %s: the demo's tools are %s", x, strings.Join(names, ", "))
		}
	}

	var nopts []natsnode.Option
	if o.NATSURL != "" {
		nopts = append(nopts, natsnode.WithURL(o.NATSURL))
	} else {
		port, err := listenPort(o.Listen)
		if err != nil {
			return err
		}
		nopts = append(nopts, natsnode.WithListen(port))
		if o.DataDir != "" {
			nopts = append(nopts, natsnode.WithDataDir(o.DataDir))
		}
	}
	node, err := natsnode.Start(ctx, nopts...)
	if err != nil {
		return fmt.Errorf("dev: nats: %w", err)
	}
	defer closeNode(node)
	js := node.JetStream()
	const lease = time.Second
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = provision.Ensure(pctx, js, provision.Options{}, append(runner.Assets(lease), projector.Assets()...)...)
	if err == nil {
		err = runner.Provision(pctx, js, lease)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("dev: provision: %w", err)
	}
	rn, err := runner.New(node.Conn(), js, []*agent.Agent{ag}, runner.WithLogger(logger), runner.WithLease(lease), runner.WithoutWorker())
	if err != nil {
		return err
	}
	w := worker.New(node.Conn(), js, worker.WithLogger(logger))
	for _, t := range ag.Tools() {
		if !slices.Contains(external, t.Name()) {
			w.Handle(t.Name(), runner.ToolHandler(t, nil))
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, f := range []func() error{
		func() error { return rn.Run(ctx) },
		func() error { return w.Run(ctx) },
		func() error { return projector.RunAll(ctx, node.Conn(), js, eventlog.New(js), logger) },
	} {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f() }()
	}
	fmt.Fprintf(o.Stdout, "Weft dev is running: embedded NATS at %s, a runner, the projector and the %s agent.\n", node.URL(), demo.AgentName)
	for _, x := range external {
		fmt.Fprintf(o.Stdout, "Tool %s is left to external workers: tasks on %s, durable consumer %s on %s, reports to %s.\n",
			x, worker.TaskSubject(x), worker.ConsumerName(x), worker.TaskStream, worker.ReportSubject)
	}
	if o.Ready != nil {
		o.Ready(node.URL())
	}
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			all = append(all, e)
		}
	}
	return errors.Join(all...)
}

func listenPort(listen string) (int, error) {
	if listen == "" {
		return 0, nil
	}
	p := listen
	if strings.Contains(listen, ":") {
		_, port, err := net.SplitHostPort(listen)
		if err != nil {
			return 0, usagef("--listen %q: %v", listen, err)
		}
		p = port
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 0 || n > 65535 {
		return 0, usagef("--listen %q: not a port", listen)
	}
	return n, nil
}
