package mcptools_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSDKStaysOutOfTheRuntime keeps the module graph lean: the MCP SDK is a
// dependency of the MCP packages and the weft command only; the runtime
// packages an application embeds (runner, worker, api, agent, tools,
// projector, aggregate, events) never import it, however indirectly.
func TestSDKStaysOutOfTheRuntime(t *testing.T) {
	pkgs := []string{"runner", "worker", "api", "agent", "tools", "projector", "aggregate", "events", "eventlog", "model", "policy"}
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}"}
	for _, p := range pkgs {
		args = append(args, "github.com/weftrun/weft/"+p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Fields(string(out)) {
		if strings.HasPrefix(line, "github.com/modelcontextprotocol/") {
			t.Errorf("a runtime package depends on %s", line)
		}
	}
	// The check can fail: mcptools itself depends on the SDK.
	out, err = exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/weftrun/weft/mcptools").Output()
	if err != nil || !strings.Contains(string(out), "github.com/modelcontextprotocol/go-sdk/mcp") {
		t.Fatalf("go list -deps mcptools does not list the SDK (%v): the check above proves nothing", err)
	}
}
