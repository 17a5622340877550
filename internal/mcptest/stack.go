package mcptest

import (
	"context"
	"errors"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// Stack is a real Weft deployment in the test process: an in-process
// nats-server, a runner (with its in-process worker) serving the agents,
// and a projector answering queries.
type Stack struct {
	// Server is the NATS server; Server.URL is what other processes
	// connect to.
	Server *natstest.Server
	// API is a command API client; Query a query client.
	API   *api.Client
	Query *projector.Client
}

// StartStack starts a Stack serving agents; t.Cleanup stops it.
func StartStack(t testing.TB, agents ...*agent.Agent) *Stack {
	t.Helper()
	return start(t, true, agents)
}

// StartWithoutProjector starts a Stack whose query service is missing: the
// runner serves agents, nobody answers queries.
func StartWithoutProjector(t testing.TB, agents ...*agent.Agent) *Stack {
	t.Helper()
	return start(t, false, agents)
}

func start(t testing.TB, withProjector bool, agents []*agent.Agent) *Stack {
	t.Helper()
	const lease = time.Second
	s := natstest.Start(t, natstest.WithAssets(append(runner.Assets(lease), projector.Assets()...)...))
	ctx, cancel := context.WithCancel(context.Background())
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := runner.Provision(pctx, s.JS, lease); err != nil {
		cancel()
		t.Fatal(err)
	}
	r, err := runner.New(s.Conn, s.JS, agents, runner.WithLease(lease))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	rdone, pdone := make(chan error, 1), make(chan error, 1)
	go func() { rdone <- r.Run(ctx) }()
	go func() {
		if !withProjector {
			pdone <- nil
			return
		}
		pdone <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil)
	}()
	t.Cleanup(func() { cancel(); <-rdone; <-pdone })
	st := &Stack{Server: s, API: api.NewClient(s.Conn), Query: projector.NewClient(s.Conn)}
	if err := st.API.Ready(pctx); err != nil {
		t.Fatal(err)
	}
	if !withProjector {
		return st
	}
	// The query service is ready once it answers (unknown_run for a run
	// that does not exist).
	for {
		_, err := st.Query.Run(pctx, "mcptest-probe")
		if errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) {
			break
		}
		if pctx.Err() != nil {
			t.Fatalf("mcptest: the query service did not answer: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return st
}

// Wait polls the run's view until done reports true for it, failing t after
// a generous deadline (the machine may be loaded).
func (st *Stack) Wait(t testing.TB, run string, done func(projections.RunView) bool) projections.RunView {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last projections.RunView
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := st.Query.Run(ctx, run)
		cancel()
		if err == nil {
			last = v
			if done(v) {
				return v
			}
		}
		lastErr = err
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("mcptest: run %s never reached the awaited state; last view status %q (outcome %v), actions %+v, last error %v", run, last.Status, last.Outcome, last.Actions, lastErr)
	return last
}
