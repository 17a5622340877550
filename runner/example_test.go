package runner_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/runner"
)

// Example embeds a runner with an application's agent: provision the
// assets once, then Run until SIGTERM, which drains and hands runs off.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	node, err := natsnode.Start(ctx, natsnode.WithURL("nats://127.0.0.1:4222"))
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close(context.Background())
	if err := runner.Provision(ctx, node.JetStream(), runner.DefaultLease); err != nil {
		log.Fatal(err)
	}
	desk, err := demo.Agent(nil) // your agent.New(...).Build()
	if err != nil {
		log.Fatal(err)
	}
	r, err := runner.New(node.Conn(), node.JetStream(), []*agent.Agent{desk})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
