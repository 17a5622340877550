package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// run provisions, serves the payment desk and drains on cancellation.
func TestRunServesAndDrains(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan error, 1)
	env := map[string]string{}
	go func() {
		done <- run(ctx, []string{"--nats", srv.URL, "--id", "cmd-runner", "--drain", "2s"}, func(k string) string { return env[k] }, &stderr)
	}()
	c := api.NewClient(srv.Conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Start(sctx, api.StartRequest{Run: "cmd-1", Agent: demo.AgentName, Input: "pay invoice INV-8"})
		scancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("runner never served: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	// docs/security.md, "Signed heads": a runner without a head key says
	// at start that the heads of its runs go unsigned.
	if !strings.Contains(stderr.String(), "run heads are not signed: no --head-key") {
		t.Fatalf("a runner without a head key does not say its heads go unsigned:\n%s", stderr.String())
	}
	if err := run(context.Background(), nil, func(string) string { return "" }, &stderr); err == nil {
		t.Fatal("run without a NATS URL succeeded")
	}
}

// --replicas reaches provisioning: a single server refuses three replicas,
// and run says so while provisioning instead of serving.
func TestRunReplicasFlagReachesProvisioning(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	err := run(ctx, []string{"--nats", srv.URL, "--replicas", "3"}, func(string) string { return "" }, &stderr)
	if err == nil || !strings.Contains(err.Error(), "provision") {
		t.Fatalf("run --replicas 3 on a single server: %v, want a provisioning error\n%s", err, stderr.String())
	}
}

// --partitions reaches the runner: 0 (the default) follows the
// deployment's recorded number, N > 0 is runner.WithPartitions(N) — a new
// deployment records it, and a runner started with another number than
// the recorded one refuses to start, naming both (docs/adr/0019-partitions.md).
func TestRunPartitionsFlagReachesTheRunner(t *testing.T) {
	srv := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	env := func(string) string { return "" }
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nats", srv.URL, "--id", "p-1", "--drain", "1s", "--partitions", "8"}, env, &stderr)
	}()
	func() jetstream.KeyValue {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if kv, err := srv.JS.KeyValue(context.Background(), runner.PartitionsBucket); err == nil {
				if e, err := kv.Get(context.Background(), "config"); err == nil && strings.Contains(string(e.Value()), `"partitions":8`) {
					return kv
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the deployment never recorded 8 partitions\n%s", stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	var other bytes.Buffer
	err := run(rctx, []string{"--nats", srv.URL, "--id", "p-2", "--partitions", "16"}, env, &other)
	if err == nil || !strings.Contains(err.Error(), "16") || !strings.Contains(err.Error(), "8") {
		t.Errorf("run --partitions 16 in a deployment of 8: %v, want an error naming both", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
}
