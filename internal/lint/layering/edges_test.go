package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// deps lists the packages pkgs depend on (`go list -deps`, from the module
// root), themselves included.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "./"+p)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", pkgs, err)
	}
	return strings.Fields(string(out))
}

// TestLibraryEdges: an application importing only the runner, the client
// or the roles links no NATS server (it talks to one; only what embeds a
// server, natsnode, links it), and roles does not need the runner to learn
// asset names (package protocol names them).
func TestLibraryEdges(t *testing.T) {
	for _, pkg := range []string{"runner", "client", "roles"} {
		for _, d := range deps(t, pkg) {
			if strings.HasPrefix(d, "github.com/nats-io/nats-server") {
				t.Errorf("%s depends on %s: only what embeds a server may link it", pkg, d)
			}
			if pkg == "roles" && d == "github.com/weftrun/weft/runner" {
				t.Errorf("roles depends on the runner")
			}
		}
	}
}

// TestProtocolImportsNothing: package protocol imports nothing, not even
// the standard library, so a program that needs only a name links nothing
// else (protocol/protocol.go, docs/architecture.md).
func TestProtocolImportsNothing(t *testing.T) {
	const protocol = "github.com/weftrun/weft/protocol"
	if got := deps(t, "protocol"); len(got) != 1 || got[0] != protocol {
		t.Errorf("protocol depends on %v, want only itself", got)
	}
}

// assetNames are the string constants package protocol defines, by value.
func assetNames(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "..", "protocol", "protocol.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok {
			for i, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					names[s] = vs.Names[i].Name
				}
			}
		}
		return true
	})
	return names
}

// sameNameElsewhere are string literals equal to an asset name that name
// something else.
var sameNameElsewhere = map[string]string{
	"mcpops/mcpops.go weft_runs": "the MCP tool listing runs (mcpops.ToolRuns), not the bucket",
}

// TestOneDefinitionOfEachAssetName: each stream, consumer and bucket name
// is written once, in package protocol; every other Go file of the module
// (tests, testdata and docs aside) names it through a constant.
func TestOneDefinitionOfEachAssetName(t *testing.T) {
	names := assetNames(t)
	for _, want := range []string{"WEFT_EVENTS", "WEFT_TASKS", "weft_runners", "weft_commands"} {
		if names[want] == "" {
			t.Fatalf("package protocol does not define %s: the scan below would pass vacuously", want)
		}
	}
	root := filepath.Join("..", "..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == ".":
				return nil
			case rel == "protocol", d.Name() == "testdata", d.Name() == "node_modules", strings.HasPrefix(d.Name(), "."), rel == "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, _ := strconv.Unquote(lit.Value)
			if c, ok := names[s]; ok && sameNameElsewhere[rel+" "+s] == "" {
				t.Errorf("%s writes %q: name it protocol.%s", rel, s, c)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCoreSpeaksTheLogsTypes: the decision core (aggregate) depends on no
// model port (package model, its adapters or providers), however
// indirectly: its transcript, pending calls and commands are in the log's
// types (package events), and the runner converts at the edge where it
// calls the model (docs/adr/0037, docs/adr/0018).
func TestCoreSpeaksTheLogsTypes(t *testing.T) {
	const port = "github.com/weftrun/weft/model"
	got := deps(t, "aggregate")
	if len(got) == 0 || !strings.Contains(strings.Join(got, " "), "github.com/weftrun/weft/events") {
		t.Fatalf("go list found no dependency on events for aggregate: %v", got)
	}
	for _, d := range got {
		if d == port || strings.HasPrefix(d, port+"/") {
			t.Errorf("aggregate depends on %s: the core speaks only the log's types", d)
		}
	}
}
