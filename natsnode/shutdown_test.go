//go:build unix

package natsnode_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/natsnode"
)

// TestRunShutsDownCleanlyOnSIGTERM sends the test process a real SIGTERM
// while Run's work is serving a request: the request in flight is answered
// (drain before shutdown), work's context ends, Run returns nil, the
// acknowledged write survives and the store lock is released (a new
// embedded server starts on the same store).
func TestRunShutsDownCleanlyOnSIGTERM(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	ready := make(chan string)
	inFlight := make(chan struct{})
	var node *natsnode.Node
	done := make(chan error, 1)
	go func() {
		done <- natsnode.Run(ctx, func(ctx context.Context, n *natsnode.Node) error {
			node = n
			js := n.JetStream()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
				return err
			}
			if _, err := js.Publish(ctx, "s.1", []byte("kept")); err != nil {
				return err
			}
			// A handler that is still working when the signal arrives.
			if _, err := n.Conn().Subscribe("work", func(m *nats.Msg) {
				close(inFlight)
				<-ctx.Done()
				_ = m.Respond([]byte("finished"))
			}); err != nil {
				return err
			}
			// The server must know the subscription before the client
			// sends its request, or the request finds no responder.
			if err := n.Conn().Flush(); err != nil {
				return err
			}
			ready <- n.URL()
			<-ctx.Done()
			return ctx.Err()
		}, natsnode.WithDataDir(dir), natsnode.WithListen(0))
	}()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatalf("Run ended before work was ready: %v", err)
	}
	client, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	reply := make(chan *nats.Msg, 1)
	go func() {
		m, err := client.RequestWithContext(ctx, "work", nil)
		if err != nil {
			t.Errorf("request in flight at SIGTERM: %v", err)
		}
		reply <- m
	}()
	select {
	case <-inFlight:
	case m := <-reply:
		t.Fatalf("the request ended before the handler saw it: %v", m)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run after SIGTERM = %v, want nil", err)
	}
	if m := <-reply; m == nil || string(m.Data) != "finished" {
		t.Fatalf("reply to the request in flight = %v, want finished", m)
	}
	if !node.Conn().IsClosed() {
		t.Fatal("connection still open after Run returned")
	}

	n, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatalf("restart on the same store after SIGTERM: %v", err)
	}
	defer n.Close(ctx)
	info, err := n.JetStream().Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().State; st.Msgs != 1 {
		t.Fatalf("messages after SIGTERM and restart = %d, want 1", st.Msgs)
	}
}

// TestRunReturnsWorkError shows that an error of the work function (not a
// cancellation) is returned and the node is still closed.
func TestRunReturnsWorkError(t *testing.T) {
	ctx := ctxT(t)
	dir := t.TempDir()
	boom := errors.New("boom")
	err := natsnode.Run(ctx, func(context.Context, *natsnode.Node) error { return boom }, natsnode.WithDataDir(dir))
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	n, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		t.Fatalf("store still locked after Run returned: %v", err)
	}
	n.Close(ctx)
}

// TestNotifyShutdownEndsOnSIGTERM checks the bare signal context.
func TestNotifyShutdownEndsOnSIGTERM(t *testing.T) {
	ctx, stop := natsnode.NotifyShutdown(ctxT(t))
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) || cause.Error() != "terminated signal received" {
		t.Fatalf("cause = %v, want the SIGTERM", cause)
	}
}
