package natsnode_test

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/loopport"
	"github.com/weftrun/weft/natsnode"
)

// The first connection to an external server is retried: a runner started while
// its server restarts waits for the
// server instead of exiting. Start is called before any server listens on
// the URL; the server comes up a second later and Start succeeds.
func TestExternalFirstConnectRetries(t *testing.T) {
	ctx := ctxT(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	// The port is free only when it is read: another test's server may
	// take it before this one does. This server requires a token and the
	// client presents it, so the client is refused there instead of
	// connecting to that server.
	token, err := loopport.Token()
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "auth.conf")
	writeFile(t, conf, fmt.Sprintf("authorization { token: %q }\n", token))

	type result struct {
		n   *natsnode.Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := natsnode.Start(ctx, natsnode.WithURL(url), natsnode.WithToken(token))
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Start returned before any server listened: %v", r.err)
	case <-time.After(time.Second):
	}
	srv, err := natsnode.Start(ctx, natsnode.WithConfigFile(conf), natsnode.WithToken(token), natsnode.WithDataDir(t.TempDir()), natsnode.WithListen(port))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(ctx)
	r := <-done
	if r.err != nil {
		t.Fatalf("Start after the server came up: %v", r.err)
	}
	defer r.n.Close(ctx)
	if !r.n.Conn().IsConnected() {
		t.Fatal("not connected")
	}
}
