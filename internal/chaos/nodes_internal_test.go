package chaos

import (
	"errors"
	"net/url"
	"strings"
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
