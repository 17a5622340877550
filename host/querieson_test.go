package host_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
)

// WithQueriesOn runs the projector and the query service on the
// connection it is given (a projector's credentials, docs/security.md),
// not the runner's: once that connection closes the query service no
// longer answers (unavailable, docs/protocol.md), while the command API,
// on the runner's connection, still does.
func TestQueriesOnTheirOwnConnection(t *testing.T) {
	s := natstest.Start(t)
	qnc, err := nats.Connect(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer qnc.Close()
	qjs, err := jetstream.New(qnc)
	if err != nil {
		t.Fatal(err)
	}
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(ctx, s.Conn, s.JS, []*agent.Agent{desk}, host.WithQueriesOn(qnc, qjs), host.WithReady(func() { close(ready) }))
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host.Run: %v", err)
	case <-time.After(45 * time.Second): // host's readiness wait is 30 s
		t.Fatal("host never ready: the query service did not serve on its connection")
	}
	c, err := client.New(s.Conn, client.WithoutRetry())
	if err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
	defer qcancel()
	if _, err := c.Run(qctx, "no-such-run"); weft.ErrorCode(err) != weft.CodeUnknownRun {
		t.Fatalf("a query while the query service serves: %v, want unknown_run", err)
	}
	qnc.Close()
	gone, gcancel := context.WithTimeout(ctx, 2*time.Second)
	defer gcancel()
	if _, err := c.Run(gone, "no-such-run"); weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Fatalf("a query once the queries' connection closed: %v, want unavailable (the query service served on it)", err)
	}
	if err := c.Ready(qctx); err != nil {
		t.Fatalf("the command API, on the runner's connection: %v", err)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Logf("host.Run after its queries' connection closed: %v", err)
	}
}

// WithQueriesOn keeps an existing higher replica count of the projector's
// buckets, as the runner's provisioning keeps its assets' (host.WithReplicas:
// "an existing asset's higher count is kept"): on a real 3-node cluster
// whose projector buckets have 3 replicas, a host started with the default
// and WithQueriesOn leaves them at 3.
func TestQueriesOnKeepTheirBucketsReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	url := natstest.StartCluster(t, 3)
	conn := func() (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	nc, js := conn()
	qnc, qjs := conn()
	if err := provision.EnsureOnly(ctx, qjs, projector.Assets(), provision.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(hctx, nc, js, []*agent.Agent{desk}, host.WithQueriesOn(qnc, qjs), host.WithReady(func() { close(ready) }))
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host.Run: %v", err)
	case <-ctx.Done():
		t.Fatal("host never ready")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("host.Run: %v", err)
	}
	for _, a := range projector.Assets() {
		st, err := js.Stream(ctx, a.StreamName())
		if err != nil {
			t.Fatalf("%s: %v", a.StreamName(), err)
		}
		if n := st.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s has %d replicas after host.Run with the default, want 3 (kept)", a.StreamName(), n)
		}
	}
}
