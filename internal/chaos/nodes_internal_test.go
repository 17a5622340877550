package chaos

import (
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Two chaos runs in parallel once had their nodes on one port (a node
// keeps its port across its restarts, and another run's node took it
// while it was down): each run's runners, workers and workload reconnected
// to the other run's server, with the same stream names, and each run
// reported acknowledged commands lost from its own log. Every node of a
// harness requires the harness's own token, and the URLs the harness
// connects with and hands its child processes (NATS_URL) carry it: a
// client with another harness's URL at this node's port is refused
// (authorization violation); one with this harness's URL works.
func TestNodesServeOnlyTheirOwnHarnessesClients(t *testing.T) {
	h := &harness{cfg: Config{Nodes: 1}, dir: t.TempDir()}
	other := &harness{cfg: Config{Nodes: 1}, dir: t.TempDir()}
	for _, x := range []*harness{h, other} {
		if err := x.writeNodes(); err != nil {
			t.Fatal(err)
		}
	}
	if h.token == "" || h.token == other.token {
		t.Fatalf("tokens %q and %q: each harness needs its own", h.token, other.token)
	}
	conf := strings.TrimPrefix(h.nodes[0].env[0], envConf+"=")
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("node not ready")
	}
	own, err := nats.Connect(h.urls, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("this harness's URL %s at its node: %v", h.urls, err)
	}
	own.Close()
	mine, err := url.Parse(h.urls)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := url.Parse(other.urls)
	if err != nil {
		t.Fatal(err)
	}
	foreign.Host = mine.Host // the other harness's node was on this port
	nc, err := nats.Connect(foreign.String(), nats.MaxReconnects(0))
	if err == nil {
		nc.Close()
		t.Fatal("a client of the other harness was served by this harness's node")
	}
	if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a client of the other harness at this node: %v, want an authorization violation", err)
	}
}

// The routes between a harness's nodes carry no token, and a node keeps
// its route port across its restarts as it keeps its client port: while
// it is down another harness's node can take that port, and the surviving
// nodes route to it. nats-server refuses a route whose cluster name
// differs, so each harness's cluster has its own name; with one name for
// all ("chaos") such a route merged the two harnesses' clusters and their
// streams, token or not.
func TestHarnessesHaveTheirOwnClusterNames(t *testing.T) {
	names := map[string]bool{}
	for range 2 {
		h := &harness{cfg: Config{Nodes: 3}, dir: t.TempDir()}
		if err := h.writeNodes(); err != nil {
			t.Fatal(err)
		}
		own := map[string]bool{}
		for _, p := range h.nodes {
			opts, err := server.ProcessConfigFile(strings.TrimPrefix(p.env[0], envConf+"="))
			if err != nil {
				t.Fatal(err)
			}
			own[opts.Cluster.Name] = true
		}
		if len(own) != 1 {
			t.Fatalf("one harness's nodes name clusters %v, want one name", own)
		}
		for name := range own {
			if name == "" || names[name] {
				t.Fatalf("cluster name %q: each harness needs its own", name)
			}
			names[name] = true
		}
	}
}

// A harness whose node's port another harness's node took while it was
// down (the parallel chaos runs that reported acknowledged commands lost)
// must neither work against that server (the token refuses it) nor end
// its own connection there: nats.go closes a connection for good after
// the second refusal by one server, and every later check would then
// fail on "connection closed", naming no cause. The harness's connection
// keeps trying (IgnoreAuthErrorAbort), the run gets one foreign_server
// violation naming the cause, and once its own node is back on the port
// the connection works again.
func TestAHarnessRefusedByAForeignServerKeepsTryingAndSaysSo(t *testing.T) {
	log := &refusals{}
	h := &harness{cfg: Config{Nodes: 1, Log: log}, dir: t.TempDir()}
	other := &harness{cfg: Config{Nodes: 1, Log: io.Discard}, dir: t.TempDir()}
	for _, x := range []*harness{h, other} {
		if err := x.writeNodes(); err != nil {
			t.Fatal(err)
		}
	}
	conf := func(x *harness) string { return strings.TrimPrefix(x.nodes[0].env[0], envConf+"=") }
	own := startNode(t, conf(h), 0)
	port := own.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(h.urls, h.natsOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	stopNode(own)
	foreign := startNode(t, conf(other), port) // the other harness's node, on this one's port
	deadline := time.Now().Add(30 * time.Second)
	for log.count() < 3 {
		if nc.IsClosed() {
			t.Fatalf("the harness's connection closed after %d refusals by the foreign server", log.count())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d refusals by the foreign server, want 3", log.count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if nc.IsClosed() || nc.IsConnected() {
		t.Fatalf("after 3 refusals: closed %v, connected %v; want reconnecting", nc.IsClosed(), nc.IsConnected())
	}
	h.mu.Lock()
	vs := slices.Clone(h.violations)
	h.mu.Unlock()
	if len(vs) != 1 || vs[0].Check != checkForeignServer {
		t.Fatalf("violations %v, want one %s", vs, checkForeignServer)
	}
	stopNode(foreign)
	startNode(t, conf(h), port)
	if _, err := nc.Request("$JS.API.INFO", nil, 30*time.Second); err != nil {
		t.Fatalf("the harness's connection once its node is back: %v", err)
	}
}

// refusals is a harness log that counts the authorization violations
// logged.
type refusals struct {
	mu sync.Mutex
	n  int
}

func (r *refusals) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n += strings.Count(string(p), nats.ErrAuthorization.Error())
	return len(p), nil
}

func (r *refusals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// startNode starts a node in process from its configuration file, on port
// instead of the file's when port is not 0, stopped on t.Cleanup.
func startNode(t *testing.T, conf string, port int) *server.Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if port != 0 {
		opts.Port = port
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { stopNode(srv) })
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("node not ready")
	}
	return srv
}

func stopNode(srv *server.Server) {
	srv.Shutdown()
	srv.WaitForShutdown()
}

// A Go part (runner, worker, projector) refused by a server on one of the
// harness's nodes' ports keeps trying (roles.go, connect) and logs the
// refusal (nats.go's default error handler): the run reports it as
// foreign_server, once. A node's own log is not a part's: a refusal there
// is another harness's client at this harness's node.
func TestAPartRefusedByAForeignServerIsReported(t *testing.T) {
	h := &harness{dir: t.TempDir()}
	logs := filepath.Join(h.dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	line := nats.ErrAuthorization.Error() + " on connection [7]\n"
	for name, text := range map[string]string{"nats-1.log": line, "worker-1.log": "started\n", "runner-2.log": "started\n" + line, "runner-1.log": line} {
		if err := os.WriteFile(filepath.Join(logs, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.checkForeignServers()
	if len(h.violations) != 1 || h.violations[0].Check != checkForeignServer || !strings.Contains(h.violations[0].Detail, "runner-1.log") {
		t.Fatalf("violations %v, want one %s naming runner-1.log", h.violations, checkForeignServer)
	}
	h = &harness{dir: t.TempDir()}
	h.checkForeignServers()
	if len(h.violations) != 0 {
		t.Fatalf("violations %v without a refusal, want none", h.violations)
	}
}
