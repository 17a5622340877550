package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/timer"
)

// TestProvisionReplicasOnACluster (replica count configurable, 1 embedded, 3 on
// a cluster): on a real 3-node cluster, Provision with
// WithReplicas(3) gives WEFT_TIMERS, the base streams and the runner's
// buckets three replicas, and a later Provision with the default (as a
// runner started without --replicas does) keeps them at three.
func TestProvisionReplicasOnACluster(t *testing.T) {
	t.Parallel()
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
