package weft_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplicationModuleGraph builds an application module that imports only
// github.com/weftrun/weft/client and runner (with a replace directive to
// this checkout) and checks its module graph: the developer tools (go-task,
// staticcheck) and what they drag in (the AWS SDK, Google Cloud) must not be
// in it, so depending on Weft costs an application only what Weft's code
// needs (docs/adr/0012-developer-tools-module.md); and it links none of the
// modules only Weft's tests or its model SDK adapters use
// (docs/adr/0038-what-an-application-links.md). The modules only the
// browser and terminal tests need (chromedp and what it brings, creack/pty)
// are not even in its graph, nor in Weft's go.mod: those tests are in a
// module of their own, e2e/ui (docs/adr/0038, option 3).
func TestApplicationModuleGraph(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the application module: %v", err)
	}
	checkout, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	app := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/app\n\ngo 1.26\n\n"+
		"require github.com/weftrun/weft v0.0.0\n\n"+
		"replace github.com/weftrun/weft => "+checkout+"\n")
	write("main.go", "package main\n\nimport (\n\t_ \"github.com/weftrun/weft/client\"\n\t_ \"github.com/weftrun/weft/runner\"\n)\n\nfunc main() {}\n")
	// Weft's go.sum holds the hash of every module in its graph, so the
	// application needs no checksum database look-up; anything else comes
	// from GOPROXY as the environment sets it.
	sum, err := os.ReadFile(filepath.Join(checkout, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write("go.sum", string(sum))

	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = app
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}
	// Listing the application's packages resolves every import it has and
	// records the requirements it needs, as a real application's build
	// would.
	linked := run("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")
	graph := run("mod", "graph")

	// What Weft's tests and model SDK adapters need is in the graph but
	// never linked into an application that does not import an adapter
	// (docs/adr/0038-what-an-application-links.md).
	notLinked := []string{
		"github.com/chromedp/", "github.com/creack/pty", "go.uber.org/goleak", "pgregory.net/rapid",
		"github.com/cockroachdb/datadriven", "github.com/pmezard/go-difflib", "github.com/go-json-experiment/json",
		"go.yaml.in/yaml/", "github.com/nats-io/nats-server/",
		"github.com/openai/openai-go/", "github.com/anthropics/anthropic-sdk-go/", "github.com/tidwall/",
		"github.com/invopop/jsonschema", "github.com/coder/websocket", "github.com/buger/jsonparser",
		"github.com/bahlo/generic-list-go", "github.com/pb33f/ordered-map/", "github.com/standard-webhooks/",
	}
	seen := map[string]bool{}
	for _, path := range strings.Fields(linked) {
		if seen[path] {
			continue
		}
		seen[path] = true
		for _, prefix := range notLinked {
			if strings.HasPrefix(path, prefix) {
				t.Errorf("an application importing only weft/client and weft/runner links %s, a module only Weft's tests or model SDK adapters need", path)
			}
		}
	}

	// The browser and terminal tests' modules (docs/adr/0038): neither in
	// Weft's go.mod nor, through it, in the application's graph.
	e2eOnly := []string{"github.com/chromedp/", "github.com/creack/pty", "github.com/go-json-experiment/json"}
	var mod struct{ Require []struct{ Path string } }
	if err := json.Unmarshal([]byte(runIn(t, checkout, goBin, "mod", "edit", "-json")), &mod); err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	for _, r := range mod.Require {
		for _, prefix := range e2eOnly {
			if strings.HasPrefix(r.Path, prefix) {
				t.Errorf("Weft's go.mod requires %s, which only the browser and terminal tests need: they and their requirements belong in e2e/ui/go.mod (docs/adr/0038)", r.Path)
			}
		}
	}

	forbidden := []string{
		"github.com/go-task/",
		"honnef.co/go/tools",
		"github.com/aws/aws-sdk-go",
		"cloud.google.com/",
	}
	modules := map[string]bool{}
	for _, line := range strings.Split(graph, "\n") {
		for _, node := range strings.Fields(line) {
			path, _, _ := strings.Cut(node, "@")
			modules[path] = true
		}
	}
	if !modules["github.com/weftrun/weft"] {
		t.Fatalf("the application's module graph does not contain Weft:\n%s", graph)
	}
	var found []string
	for path := range modules {
		for _, prefix := range forbidden {
			if strings.HasPrefix(path, prefix) {
				found = append(found, path)
			}
		}
	}
	if len(found) > 0 {
		t.Errorf("an application importing only weft/runner has %d developer-tool modules in its graph (of %d modules), e.g. %v",
			len(found), len(modules), found[:min(len(found), 5)])
	}
	for path := range modules {
		for _, prefix := range e2eOnly {
			if strings.HasPrefix(path, prefix) {
				t.Errorf("an application importing only weft/client and weft/runner has %s in its module graph, a module only Weft's browser and terminal tests (e2e/ui) need (docs/adr/0038)", path)
			}
		}
	}
	t.Logf("the application's module graph has %d modules", len(modules))
}

// runIn runs the go command in dir and returns its standard output.
func runIn(t *testing.T, dir, goBin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
