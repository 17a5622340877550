// Package mcptest finds the MCP peers the tests run against that nobody at
// Weft wrote: the reference server @modelcontextprotocol/server-everything
// and the official TypeScript SDK @modelcontextprotocol/sdk, installed from
// npm with the versions pinned in node/package.json and node/package-lock.json
// (`go tool -modfile=devtools/go.mod task mcp-peers`, which the test task
// and .ci/run run first). A test that needs them and does not find them fails, naming the
// command that installs them: it never skips.
package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Install is the command that installs the peers.
const Install = "go tool -modfile=devtools/go.mod task mcp-peers (npm ci in internal/mcptest/node)"

// Dir returns the folder holding package.json and node_modules.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "node")
}

// Node returns the path of the node binary, failing t when there is none.
func Node(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("mcptest: node is not installed (Debian: apt-get install nodejs npm), then run %s: %v", Install, err)
	}
	return p
}

// Everything returns the entry point of server-everything (run it with
// node; argument "stdio" or "streamableHttp"), failing t when the package
// is not installed.
func Everything(t testing.TB) string {
	t.Helper()
	return file(t, filepath.Join("node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
}

// SDK returns the folder of the installed TypeScript SDK, failing t when it
// is not installed. Scripts in Dir import it as "@modelcontextprotocol/sdk".
func SDK(t testing.TB) string {
	t.Helper()
	return filepath.Dir(file(t, filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json")))
}

func file(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(), rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("mcptest: %s is missing: run %s: %v", rel, Install, err)
	}
	return p
}
