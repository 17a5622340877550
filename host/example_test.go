package host_test

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
)

// Example embeds Weft in an application: an embedded NATS server, the
// application's agent (here the demo's payment desk), and host.Run with
// the runner, projector and query service in this process; then a
// client starts a run and waits for it without polling.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, _ := os.MkdirTemp("", "weft-host-example-")
	defer os.RemoveAll(dir)
	node, err := natsnode.Start(ctx, natsnode.WithDataDir(dir))
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close(context.Background())
	desk, err := demo.Agent(nil) // your agent.New(...).Build()
	if err != nil {
		log.Fatal(err)
	}

	rctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(rctx, node.Conn(), node.JetStream(), []*agent.Agent{desk}, host.WithReady(func() { close(ready) }))
	}()
	<-ready

	c, err := client.New(node.Conn())
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Start(ctx, api.StartRequest{Run: "pay-8", Agent: demo.AgentName, Input: "pay invoice INV-8"}); err != nil {
		log.Fatal(err)
	}
	v, err := c.Wait(ctx, "pay-8", client.Finished)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.Status, v.Outcome.Kind, len(v.Actions), "actions")
	// The query service answers too (c.Run, c.List, c.Approvals, …); its
	// read models follow the log within milliseconds.

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// finished completed 2 actions
}
