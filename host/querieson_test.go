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
