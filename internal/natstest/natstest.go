// Package natstest starts a real, provisioned, in-process nats-server with
// JetStream for tests. Every Weft test that touches NATS uses it; nothing is
// mocked.
//
//	s := natstest.Start(t) // random loopback port, store in t.TempDir()
//	s.Log.Append(ctx, "r1", eventlog.Head{}, at, ev)
//	s.Restart()            // same store dir: durability tests
//	st := s.SaveDeliveryState()
//	s.CrashRestart(st)     // as a SIGKILL leaves it: deliveries since st forgotten
//
// The server has natsnode's defaults, so it fsyncs every write before it
// acknowledges it (sync_interval: always), as every server Weft starts does:
// the tests run in the durability they prove. A test or benchmark that
// compares the two modes passes natsnode.WithSyncInterval or
// natsnode.WithSyncAlways(false) through WithNodeOptions.
//
// The server is stopped by t.Cleanup. Extra assets (a package's own streams
// and KV buckets) are provisioned with WithAssets.
//
// Each server requires its own secret, a token generated when it starts
// (kept across Restart): URL carries it (nats://<token>@127.0.0.1:<port>)
// and Conn uses it. A server's port can be taken by another test's server
// while it is down (Stop, Restart, CrashRestart keep the port, so that
// clients reconnect to the address they know); a client of this server
// that reaches the other one is then refused (authorization violation)
// instead of working against a server with the same streams and another
// test's data. A nats.go client closes its connection for good after the
// second refusal by one server, unless it sets nats.IgnoreAuthErrorAbort
// (then it keeps trying its addresses): either way it fails loudly, it
// never works against the other server. A test that starts the server
// from its own configuration (WithNodeOptions with
// natsnode.WithConfigFile) gets that configuration's authorization
// instead of the token: with credentials of its own
// (natsnode.WithUserPassword and the like) Token is "" and URL carries
// none; with a configuration that has no authorization the server checks
// nothing, yet Token and URL keep the unchecked token.
package natstest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/loopport"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
)

// Server is a running test server and a connection to it. After Restart
// the fields hold the new connection; re-read them rather than keeping
// copies.
type Server struct {
	// Conn is a client connection over TCP loopback.
	Conn *nats.Conn
	// JS is the JetStream context on Conn.
	JS jetstream.JetStream
	// URL is the server's client URL with its token
	// (nats://<token>@127.0.0.1:<port>), for other connections, child
	// processes (NATS_URL) or the nats CLI: nats.go takes the token from
	// it. Without the token the server refuses a client.
	URL string
	// Token is the server's secret, carried in URL: "" when the test
	// passed credentials of its own; set but unchecked when it passed a
	// configuration file without authorization (see the package doc).
	Token string
	// Log is an event log on JS.
	Log *eventlog.Log
	// Dir is the JetStream store directory.
	Dir string

	t      testing.TB
	conf   string // the server's configuration: its token
	node   *natsnode.Node
	nodeOp []natsnode.Option
	port   int
	assets []provision.Asset
}

// Option configures Start.
type Option func(*Server)

// WithAssets provisions assets besides the base ones (and again after each
// Restart, which is idempotent).
func WithAssets(assets ...provision.Asset) Option {
	return func(s *Server) { s.assets = append(s.assets, assets...) }
}

// WithNodeOptions starts the server with these natsnode options too (for
// example natsnode.WithSyncInterval("2m") for the non-durable mode).
func WithNodeOptions(opts ...natsnode.Option) Option {
	return func(s *Server) { s.nodeOp = append(s.nodeOp, opts...) }
}

// withPort starts the server on port p instead of an ephemeral one (the
// foreign-server test puts a second server on the first one's port).
func withPort(p int) Option {
	return func(s *Server) { s.port = p }
}

// Start starts a server on a random loopback port with its store in
// t.TempDir(), provisions the base assets and opts' assets with one
// replica, and stops everything on t.Cleanup. It fails the test on error.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{t: t, Dir: t.TempDir()}
	for _, o := range opts {
		o(s)
	}
	s.Token, s.conf = secret(t)
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The test's own options come last: a configuration file and
	// credentials of its own replace the token's.
	n, err := natsnode.Start(ctx, append([]natsnode.Option{natsnode.WithConfigFile(s.conf), natsnode.WithToken(s.Token),
		natsnode.WithDataDir(s.Dir), natsnode.WithListen(s.port), natsnode.WithName("natstest")}, s.nodeOp...)...)
	if err != nil {
		s.t.Fatalf("natstest: start server: %v", err)
	}
	if err := provision.Ensure(ctx, n.JetStream(), s.assets, provision.WithReplicas(1)); err != nil {
		_ = n.Close(ctx)
		s.t.Fatalf("natstest: provision: %v", err)
	}
	s.node, s.Conn, s.JS = n, n.Conn(), n.JetStream()
	s.Log = eventlog.New(s.JS)
	u, err := url.Parse(n.URL())
	if err != nil {
		s.t.Fatalf("natstest: server URL %q: %v", n.URL(), err)
	}
	if s.port == 0 {
		s.port, _ = strconv.Atoi(u.Port())
	}
	if s.Conn.Opts.Token != s.Token {
		s.Token = "" // the test's own credentials replaced the token
	}
	if s.Token != "" {
		u.User = url.User(s.Token)
	}
	s.URL = u.String()
}

// newToken returns a new random token for a server.
func newToken(t testing.TB) string {
	t.Helper()
	token, err := loopport.Token()
	if err != nil {
		t.Fatalf("natstest: token: %v", err)
	}
	return token
}

// secret returns a new token and the path of a server configuration that
// requires it, in t.TempDir().
func secret(t testing.TB) (token, conf string) {
	t.Helper()
	token = newToken(t)
	conf = filepath.Join(t.TempDir(), "natstest.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("authorization { token: %q }\n", token)), 0o600); err != nil {
		t.Fatalf("natstest: server configuration: %v", err)
	}
	return token, conf
}

func (s *Server) stop() {
	if s.node == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.node.Close(ctx); err != nil {
		s.t.Errorf("natstest: stop server: %v", err)
	}
	s.node = nil
}

// Stop stops the server (the first half of Restart) until StartAgain: for
// a test of what happens while the server is down.
func (s *Server) Stop() {
	s.t.Helper()
	s.stop()
}

// StartAgain starts a stopped server on the same store directory and port
// and provisions again (the second half of Restart); Conn, JS and Log
// belong to the new server.
func (s *Server) StartAgain() {
	s.t.Helper()
	s.start()
}

// Restart stops the server (draining the connection) and starts a new one
// on the same store directory and port, then provisions again. Fields are
// replaced: Conn, JS and Log belong to the new server.
func (s *Server) Restart() {
	s.t.Helper()
	s.stop()
	s.start()
}

// Connect opens another connection to the server, closed on t.Cleanup.
func (s *Server) Connect(opts ...nats.Option) *nats.Conn {
	s.t.Helper()
	nc, err := nats.Connect(s.URL, opts...)
	if err != nil {
		s.t.Fatalf("natstest: connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// Token is a new secret for a test's own server started without this
// package (a server.Options with Authorization: Token(t), whose clients
// present it with nats.Token): like the token of a server of this
// package, it makes a client that reconnects to the server's port after
// the server stopped, and finds there another test's server that took
// the port meanwhile, refused instead of working against that server.
func Token(t testing.TB) string {
	t.Helper()
	token, err := loopport.Token()
	if err != nil {
		t.Fatal(err)
	}
	return token
}
