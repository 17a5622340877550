package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/internal/demo"
)

// The demo runs end to end on its embedded server, driven through
// package client as an application drives it: a small payment
// completes, a large one waits for approval and completes once approved,
// INV-13's payment is uncertain and reconciled.
func TestDemoEndToEnd(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	urlc := make(chan string, 1)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(rctx, demo.Options{DataDir: t.TempDir(), Stdout: &out, Ready: func(u string) { urlc <- u }})
	}()
	var url string
	select {
	case url = <-urlc:
	case err := <-done:
		t.Fatalf("demo.Run: %v", err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	status := func(run string, want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			view, err := c.Run(ctx, run)
			if err == nil && view.Status == want {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("run %s never reached %s", run, want)
	}
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-8", Agent: demo.AgentName, Input: "pay invoice INV-8"}); err != nil {
		t.Fatal(err)
	}
	status("pay-8", "finished")
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	status("pay-7", "suspended")
	if _, err := c.Approve(ctx, api.ApproveRequest{CommandID: "a1", Run: "pay-7", Action: "2/call_2_1", Revision: 1, Approver: demo.Approver, Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	status("pay-7", "finished")
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-13", Agent: demo.AgentName, Input: "pay invoice INV-13"}); err != nil {
		t.Fatal(err)
	}
	status("pay-13", "suspended")
	if _, err := c.Reconcile(ctx, api.ReconcileRequest{CommandID: "r1", Run: "pay-13", Action: "2/call_2_1", Content: []byte(`{"unconfirmed":"checking with the bank"}`)}); err != nil {
		t.Fatal(err)
	}
	status("pay-13", "finished")
	// The refund settles after its body was stopped at its timeout.
	if _, err := c.Start(ctx, api.StartRequest{Run: "refund-8", Agent: demo.AgentName, Input: "refund invoice INV-8"}); err != nil {
		t.Fatal(err)
	}
	status("refund-8", "finished")
	view, err := c.Run(ctx, "refund-8")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(view); !strings.Contains(string(b), "refund-INV-8") {
		t.Fatalf("refund not settled: %s", b)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	if !strings.Contains(out.String(), "weft start payment-desk") {
		t.Fatalf("instructions missing:\n%s", out.String())
	}
}
