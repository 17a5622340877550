package mcpserve_test

import (
	"context"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/mcpserve"
)

// Example serves the payment-desk agent as an MCP tool over stdio, as
// `weft mcp serve --agent payment-desk` does.
func Example() {
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	srv, err := mcpserve.New(nc, mcpserve.Config{Service: "desk", Agents: []mcpserve.Agent{{Name: "payment-desk"}}})
	if err != nil {
		log.Fatal(err)
	}
	if err := srv.MCP().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
}
