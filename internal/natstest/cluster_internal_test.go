package natstest

import (
	"errors"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// A route port picked up front can be taken by someone else before its
// server listens on it (a loaded machine, a package's tests in parallel):
// that server never starts. StartCluster must notice it at once and start
// the cluster again on new ports, not wait for a readiness that cannot come
// and fail ("server 1 not ready").
func TestStartClusterStartsAgainWhenARoutePortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free, picks := pickPort, 0
	pickPort = func() (int, error) {
		picks++
		if picks == 1 {
			return taken.Addr().(*net.TCPAddr).Port, nil // server 1's route port, in use
		}
		return free()
	}
	defer func() { pickPort = free }()

	nc, err := nats.Connect(StartCluster(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if picks != 6 {
		t.Fatalf("%d route ports picked, want 6: the cluster started twice, the second time on new ports", picks)
	}
}

// A cluster's servers, as Start's, serve only clients with the cluster's
// token, which its URLs carry: a client of another test's server whose
// port a node of this cluster took is refused (authorization violation),
// not served this cluster's streams.
func TestStartClusterServesOnlyItsOwnClients(t *testing.T) {
	urls := StartCluster(t, 3)
	nc, err := nats.Connect(urls, nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("the cluster's URLs: %v", err)
	}
	nc.Close()
	for _, u := range strings.Split(urls, ",") {
		foreign, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		foreign.User = url.User("another-servers-token")
		if nc, err := nats.Connect(foreign.String(), nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Fatalf("a client with another token was served at %s", foreign.Host)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Fatalf("a client with another token at %s: %v, want an authorization violation", foreign.Host, err)
		}
	}
}

// Routes carry no token: what keeps two tests' clusters apart when a
// node of one takes a route port a node of the other keeps (across a
// restart) is the cluster name, which nats-server requires to match on a
// route. So each StartCluster has its own: without it both clusters were
// "weft" and such a route merged them, each test's clients then served
// the other's streams.
func TestStartClustersHaveTheirOwnNames(t *testing.T) {
	var names []string
	for range 2 {
		nc, err := nats.Connect(StartCluster(t, 2), nats.MaxReconnects(0))
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, nc.ConnectedClusterName())
		nc.Close()
	}
	if names[0] == "" || names[0] == names[1] {
		t.Fatalf("cluster names %q: each StartCluster needs its own", names)
	}
}
