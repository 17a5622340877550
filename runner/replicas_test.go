package runner_test

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

	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/timer"
)

// startCluster starts n real in-process nats-servers with JetStream on
// random loopback ports, routed into one cluster, each with its store in
// t.TempDir(); it returns the client URLs joined by commas.
func startCluster(t *testing.T, n int) string {
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
	// placement of 3 replicas before that fails with "peer offline").
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
	return strings.Join(urls, ",")
}

// TestProvisionReplicasOnACluster (issue 01: replica count configurable, 1
// embedded, 3 on a cluster): on a real 3-node cluster, Provision with
// WithReplicas(3) gives WEFT_TIMERS, the base streams and the runner's
// buckets three replicas, and a later Provision with the default (as a
// runner started without --replicas does) keeps them at three.
func TestProvisionReplicasOnACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := nats.Connect(startCluster(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for {
		tctx, tcancel := context.WithTimeout(ctx, time.Second)
		_, err = js.AccountInfo(tctx)
		tcancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("cluster JetStream never ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	names := []string{provision.EventsStream, provision.TasksStream, timer.Stream,
		"KV_" + runner.RunnersBucket, "KV_" + runner.DriversBucket, "KV_" + runner.SnapshotsBucket}
	check := func(when string) {
		t.Helper()
		for _, name := range names {
			st, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatalf("%s: %s: %v", when, name, err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.Config.Replicas != 3 {
				t.Errorf("%s: %s has %d replicas, want 3", when, name, info.Config.Replicas)
			}
		}
	}
	if err := runner.Provision(ctx, js, time.Second, runner.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	check("provisioned with 3")
	if err := runner.Provision(ctx, js, time.Second); err != nil {
		t.Fatal(err)
	}
	check("provisioned again with the default")
}
