package provision_test

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

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/provision"
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

// TestEnsureThreeReplicasOnACluster: on a real 3-node cluster,
// Options{Replicas: 3} gives every base asset and extra three replicas
// (one leader, two followers), and the event log works on top.
func TestEnsureThreeReplicasOnACluster(t *testing.T) {
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
	// Wait until the cluster has elected its JetStream meta leader.
	for {
		// Each try has its own deadline: a request sent before the
		// cluster is ready may get no reply at all.
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
	kv := provision.KV(jetstream.KeyValueConfig{Bucket: "weft_r3"})
	for i := range 2 { // idempotent on a cluster too
		if err := provision.Ensure(ctx, js, provision.Options{Replicas: 3}, kv); err != nil {
			t.Fatalf("ensure #%d with 3 replicas: %v", i+1, err)
		}
	}
	for _, name := range []string{provision.EventsStream, provision.TasksStream, "KV_weft_r3"} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("%s: replicas %d, cluster %+v; want 3 (a leader and 2 followers)", name, info.Config.Replicas, info.Cluster)
		}
	}
	log := eventlog.New(js)
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	_, h, err := log.Append(ctx, "r3", eventlog.Head{}, at, events.ModelRequested{Turn: 1, Incarnation: 1})
	if err != nil {
		t.Fatalf("append on R3: %v", err)
	}
	envs, h2, err := log.Load(ctx, "r3")
	if err != nil || len(envs) != 1 || h2 != h {
		t.Fatalf("load on R3: %d events head %+v, %v", len(envs), h2, err)
	}
}
