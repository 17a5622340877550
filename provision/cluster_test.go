package provision_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// TestEnsureThreeReplicasOnACluster: on a real 3-node cluster,
// Options{Replicas: 3} gives every base asset and extra three replicas
// (one leader, two followers), and the event log works on top.
func TestEnsureThreeReplicasOnACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := nats.Connect(natstest.StartCluster(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv := provision.KV(jetstream.KeyValueConfig{Bucket: "weft_r3"})
	for i := range 2 { // idempotent on a cluster too
		if err := provision.Ensure(ctx, js, []provision.Asset{kv}, provision.WithReplicas(3)); err != nil {
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
