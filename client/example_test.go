package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
)

// ExampleClient_Wait starts a payment that needs a finance approval, waits
// (watching the run's events, not polling) until it asks for it, approves
// it, and waits until the run has finished.
func ExampleClient_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Weft in this process: an embedded NATS server and host.Run with the
	// demo's payment desk (see package host).
	dir, _ := os.MkdirTemp("", "weft-client-example-")
	defer os.RemoveAll(dir)
	node, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close(context.Background())
	desk, err := demo.Agent(nil)
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(rctx, node.Conn(), node.JetStream(), []*agent.Agent{desk}, host.WithReady(func() { close(ready) }))
	}()
	defer func() { stop(); <-done }()
	<-ready

	c, err := client.New(node.Conn())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		log.Fatal(err)
	}
	// Any predicate on the run's view: here, its payment asks for approval.
	asking := func(v projections.RunView) bool {
		a, ok := v.Action("2/call_2_1")
		return ok && a.Pending != nil
	}
	v, err := c.Wait(ctx, "pay-7", asking)
	if err != nil {
		log.Fatal(err)
	}
	a, _ := v.Action("2/call_2_1")
	fmt.Println(v.Status, a.Tool, "waits for", a.Pending.Requirement.Name)

	if _, err := c.Approve(ctx, api.ApproveRequest{CommandID: "approve-1", Run: "pay-7", Action: a.ID,
		Revision: a.Pending.Revision, Approver: demo.Approver, Credential: "alice"}); err != nil {
		log.Fatal(err)
	}
	v, err = c.Wait(ctx, "pay-7", client.Finished)
	if err != nil {
		log.Fatal(err)
	}
	a, _ = v.Action("2/call_2_1")
	fmt.Println(v.Status, v.Outcome.Kind, a.Tool, a.State)
	// Output:
	// suspended send_payment waits for finance
	// finished completed send_payment succeeded
}
