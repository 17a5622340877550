package mcptools_test

import (
	"context"
	"log"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// Example gives an agent the tools of an MCP server run as a process over
// stdio: two of them, one renamed, one bounded by its own timeout, none
// replayable.
func Example() {
	ctx := context.Background()
	client := mcptools.New(mcptools.Command("npx", "-y", "@modelcontextprotocol/server-everything"))
	defer client.Close()
	list, err := client.Tools(ctx,
		mcptools.Only("echo", "trigger-long-running-operation"),
		mcptools.Rename("trigger-long-running-operation", "long_operation"),
		mcptools.Timeout("trigger-long-running-operation", tools.After(30*time.Second)))
	if err != nil {
		log.Fatal(err) // a *mcptools.BuildError lists every problem
	}
	m := model.NewScripted("example", model.Answer("done"))
	if _, err := agent.New("desk", m, list, policy.AlwaysAllow()).Build(); err != nil {
		log.Fatal(err)
	}
}
