package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// serve runs the payment desk with host.Run on a test server and returns
// a client.
func serve(t *testing.T) *client.Client {
	t.Helper()
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	_, c := serveAgent(t, desk)
	return c
}

// serveAgent runs desk with host.Run (runner, projector and queries) on a
// new test server until the test ends, and returns the server and a
// client once it is ready.
func serveAgent(t *testing.T, desk *agent.Agent) (*natstest.Server, *client.Client) {
	t.Helper()
	s := natstest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(ctx, s.Conn, s.JS, []*agent.Agent{desk}, host.WithReady(func() { close(ready) }))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("host.Run: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host.Run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("host never ready")
	}
	c, err := client.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// Wait returns the run's view once the
// condition holds for the run as it is (not for a state it passed
// through), watching the log; a predicate works as well as the named
// conditions; an unknown run is unknown_run at once.
func TestWaitWatchesARunUntilItsState(t *testing.T) {
	c := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Wait(ctx, "nobody", client.Finished); !errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) {
		t.Fatalf("Wait on an unknown run: %v, want unknown_run", err)
	}
	if _, err := c.Start(ctx, api.StartRequest{Run: "w-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	awaiting := func(v projections.RunView) bool {
		a, ok := v.Action("2/call_2_1")
		return ok && a.Pending != nil
	}
	v, err := c.Wait(ctx, "w-7", awaiting)
	if err != nil || v.Status != projections.StatusSuspended {
		t.Fatalf("Wait for the approval request: %v, status %s", err, v.Status)
	}
	a, _ := v.Action("2/call_2_1")
	if _, err := c.Approve(ctx, api.ApproveRequest{CommandID: "a-1", Run: "w-7", Action: a.ID, Revision: a.Pending.Revision, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	v, err = c.Wait(ctx, "w-7", client.Finished)
	if err != nil || v.Outcome == nil || v.Outcome.Kind != "completed" {
		t.Fatalf("Wait finished: %v %+v", err, v.Outcome)
	}
	// Finished already: at once.
	if v, err := c.Wait(ctx, "w-7", client.Settled); err != nil || v.Status != projections.StatusFinished {
		t.Fatalf("Wait settled on a finished run: %v %s", err, v.Status)
	}
	// It was suspended once, but is not any more: the condition is asked
	// about the run as it is (finished), never about a state it passed
	// through, so Suspended never holds and Wait watches on until ctx
	// ends, returning the view as it is. The condition itself ends ctx
	// once it has seen the finished run: no deadline to guess.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	var asked []string
	v, err = c.Wait(sctx, "w-7", func(v projections.RunView) bool {
		asked = append(asked, v.Status)
		scancel()
		return client.Suspended(v)
	})
	if !errors.Is(err, context.Canceled) || v.Status != projections.StatusFinished || len(asked) != 1 || asked[0] != projections.StatusFinished {
		t.Fatalf("Wait suspended on a finished run: %v, status %s, asked about %v; want canceled, finished, asked once about finished", err, v.Status, asked)
	}
}

// Wait reads the log, not the read models: it works without a projector
// (host.WithoutQueries), where every query is unavailable.
func TestWaitNeedsNoProjector(t *testing.T) {
	s := natstest.Start(t)
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(rctx, s.Conn, s.JS, []*agent.Agent{desk}, host.WithoutQueries(), host.WithReady(func() { close(ready) }))
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("host.Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host.Run: %v", err)
	}
	c, err := client.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(ctx, api.StartRequest{Run: "np-8", Agent: demo.AgentName, Input: "pay invoice INV-8"}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Wait(ctx, "np-8", client.Finished)
	if err != nil || v.Outcome == nil || v.Outcome.Kind != "completed" {
		t.Fatalf("Wait without a projector: %v %+v", err, v.Outcome)
	}
	qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
	defer qcancel()
	if _, err := c.Run(qctx, "np-8"); err == nil {
		t.Fatal("a query answered without a projector: the test does not test what it says")
	}
}

// The client's queries and commands reach the services host.Run starts:
// the open question an unconfirmed reconciliation leaves, and its
// resolution.
func TestClientQueriesAndResolve(t *testing.T) {
	c := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.Start(ctx, api.StartRequest{Run: "w-13", Agent: demo.AgentName, Input: "pay invoice INV-13"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "w-13", client.Suspended); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reconcile(ctx, api.ReconcileRequest{CommandID: "r-1", Run: "w-13", Action: "2/call_2_1", Content: []byte(`{"unconfirmed":"asking"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "w-13", client.Finished); err != nil {
		t.Fatal(err)
	}
	var qs []projections.QuestionItem
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if qs, _ = c.Questions(ctx, projector.InboxRequest{Run: "w-13"}); len(qs) == 1 {
			break
		}
	}
	if len(qs) != 1 || qs[0].Note != "asking" {
		t.Fatalf("open questions %+v", qs)
	}
	if _, err := c.Resolve(ctx, api.ResolveRequest{CommandID: "q-1", Run: "w-13", Action: "2/call_2_1", Content: []byte(`{"error":"never sent"}`)}); err != nil {
		t.Fatal(err)
	}
	v, err := c.Wait(ctx, "w-13", func(v projections.RunView) bool {
		a, _ := v.Action("2/call_2_1")
		return a.Question != nil && a.Question.Resolution != nil
	})
	if err != nil || v.Status != projections.StatusFinished {
		t.Fatalf("after resolve: %v %s", err, v.Status)
	}
}
