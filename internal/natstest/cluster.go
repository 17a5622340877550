package natstest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StartCluster starts n real in-process nats-servers with JetStream on
// random loopback ports, routed into one cluster named "weft", each with its
// store in t.TempDir(), stopped on t.Cleanup. It returns once the JetStream
// meta leader answers (so a placement of n replicas can succeed), with the
// client URLs joined by commas, ready for nats.Connect.
func StartCluster(t testing.TB, n int) string {
	t.Helper()
	// Route ports are picked up front (a listener on port 0, closed again)
	// so that every server can name all routes: a clustered JetStream
	// server opens its route listener only after it has started.
	routes := make([]int, n)
	var seeds []string
	for i := range routes {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		routes[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
		seeds = append(seeds, fmt.Sprintf("nats://127.0.0.1:%d", routes[i]))
	}
	servers := make([]*server.Server, n)
	for i := range servers {
		o := &server.Options{
			ServerName: fmt.Sprintf("weft-%d", i+1),
			Host:       "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
			Cluster: server.ClusterOpts{Name: "weft", Host: "127.0.0.1", Port: routes[i]},
			Routes:  server.RoutesFromStr(strings.Join(seeds, ",")),
		}
		srv, err := server.NewServer(o)
		if err != nil {
			t.Fatal(err)
		}
		go srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		servers[i] = srv
	}
	var urls []string
	for i, srv := range servers {
		if !srv.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %d not ready", i+1)
		}
		urls = append(urls, srv.ClientURL())
	}
	// Ready when the meta leader sees every peer online with JetStream (a
	// placement of n replicas before that fails with "peer offline").
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready := false
		for _, srv := range servers {
			if len(srv.JetStreamClusterPeers()) == n {
				ready = true
			}
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the JetStream cluster never saw its %d peers", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	url := strings.Join(urls, ",")
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		// Each try has its own deadline: a request sent before the
		// cluster is ready may get no reply at all.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster JetStream never ready: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
