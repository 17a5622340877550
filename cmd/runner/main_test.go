package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
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
