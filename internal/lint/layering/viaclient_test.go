package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// wireClientHomes are the packages whose non-test files may construct the
// command API's client (api.NewClient) or the query service's
// (projector.NewClient): the packages that define them, package client,
// which holds both for every application, and package host, which waits
// for the services it starts to be ready. Every other package — the
// console, the MCP servers, the CLI, the demo — holds a *client.Client
// (docs/architecture.md, "The house plan").
var wireClientHomes = []string{"api", "projector", "client", "host"}

// wireClientHarnesses are the packages outside wireClientHomes that still
// construct api.Client or projector.Client, each with why: harnesses and
// test kits of the wire protocol itself, none of them product. A product
// package is never added here; it uses package client, which gains what it
// lacks.
var wireClientHarnesses = map[string]string{
	"internal/chaos":        "the chaos harness counts every command's answer as the runner gave it, one send each",
	"internal/bench":        "the benchmarks time the command API itself, one send each, counting runner_busy themselves",
	"internal/bench/scale":  "the scale benchmark times the command API and the query service themselves",
	"internal/busyrunner":   "a test kit that waits for a runner's and a projector's endpoints on a test server",
	"internal/consolestack": "a test kit that hands tests the raw API clients (Stack.Cmd, Stack.Query) beside the console",
	"internal/mcptest":      "a test kit that hands tests the raw API clients (Stack.API, Stack.Query) beside an MCP server",
}

// wireClientCalls returns, for one Go file's source, whether it refers to
// api.NewClient or projector.NewClient of this module (under whatever name
// the file imports them; under a dot import, as a bare NewClient).
func wireClientCalls(t *testing.T, name string, src []byte) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != "github.com/weftrun/weft/api" && p != "github.com/weftrun/weft/projector" {
			continue
		}
		n := path.Base(p)
		if imp.Name != nil {
			n = imp.Name.Name
		}
		names[n] = true
	}
	// Under a dot import the constructor is a bare identifier. The
	// identifiers named NewClient that are not a use of it — a selector's
	// name (x.NewClient), a declared function, method or field, a composite
	// literal's field key — are set aside before they are visited.
	notUse := map[*ast.Ident]bool{}
	found := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			notUse[n.Sel] = true
			if n.Sel.Name == "NewClient" {
				if id, ok := n.X.(*ast.Ident); ok && names[id.Name] {
					found = true
				}
			}
		case *ast.FuncDecl:
			notUse[n.Name] = true
		case *ast.Field:
			for _, id := range n.Names {
				notUse[id] = true
			}
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				notUse[id] = true
			}
		case *ast.Ident:
			if names["."] && n.Name == "NewClient" && !notUse[n] {
				found = true
			}
		}
		return !found
	})
	return found
}

// wireClientViolations lists the packages (by directory) of files that
// construct api.Client or projector.Client outside wireClientHomes and
// harnesses, and the harnesses listed that no longer do.
func wireClientViolations(callers []string, harnesses map[string]string) []string {
	var out []string
	for _, p := range callers {
		if !slices.Contains(wireClientHomes, p) && harnesses[p] == "" {
			out = append(out, p+" constructs api.Client or projector.Client: hold a *client.Client")
		}
	}
	var stale []string
	for p := range harnesses {
		if !slices.Contains(callers, p) {
			stale = append(stale, p+" is listed but constructs neither")
		}
	}
	slices.Sort(stale)
	return append(out, stale...)
}

// wireClientCallers scans the module's non-test Go files (testdata, other
// modules and node_modules aside) and returns the directories of those
// that construct api.Client or projector.Client, sorted, each once.
func wireClientCallers(t *testing.T) []string {
	t.Helper()
	root := filepath.Join("..", "..", "..")
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if wireClientCalls(t, rel, src) {
			seen[path.Dir(rel)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestApplicationsHoldAClient: outside the packages that define the wire
// clients, package client and package host, no package constructs
// api.Client or projector.Client in its non-test files but the harnesses
// and test kits listed: the console, the MCP servers, the CLI and the demo
// drive Weft through package client as any application does. It looks at
// the constructors only; a raw api.Request is out of its scope.
func TestApplicationsHoldAClient(t *testing.T) {
	callers := wireClientCallers(t)
	if !slices.Contains(callers, "client") {
		t.Fatalf("the scan found no api.NewClient in package client (callers %v): it does not read what it says", callers)
	}
	for _, v := range wireClientViolations(callers, wireClientHarnesses) {
		t.Error(v)
	}
}

// TestWireClientRuleFindsAHandWiredClient runs the rule on made-up files,
// so TestApplicationsHoldAClient cannot pass vacuously: a call under the
// package's own name, under another import name, under a dot import and
// as a function value is found; another package's NewClient, and a local
// name that shadows none, are not, nor, beside a dot import, a field or
// method of that name.
func TestWireClientRuleFindsAHandWiredClient(t *testing.T) {
	files := map[string]string{
		"plain":     `package p; import "github.com/weftrun/weft/api"; var c = api.NewClient(nil)`,
		"renamed":   `package p; import q "github.com/weftrun/weft/projector"; var c = q.NewClient(nil)`,
		"value":     `package p; import "github.com/weftrun/weft/api"; var f = api.NewClient`,
		"dot":       `package p; import . "github.com/weftrun/weft/api"; var c = NewClient(nil)`,
		"dotvalue":  `package p; import . "github.com/weftrun/weft/projector"; var f = NewClient`,
		"dotother":  `package p; import (. "github.com/weftrun/weft/api"; "github.com/weftrun/weft/catalog"); type T struct{ NewClient int }; func (T) NewClient() {}; var c, t = catalog.NewClient(nil), T{NewClient: 1}; var _ = Start`,
		"catalog":   `package p; import "github.com/weftrun/weft/catalog"; var c = catalog.NewClient(nil)`,
		"unrelated": `package p; import api "example.com/other/api"; var c = api.NewClient(nil)`,
	}
	var got []string
	for name, src := range files {
		if wireClientCalls(t, name+".go", []byte(src)) {
			got = append(got, name)
		}
	}
	slices.Sort(got)
	if want := []string{"dot", "dotvalue", "plain", "renamed", "value"}; !slices.Equal(got, want) {
		t.Errorf("files found %v, want %v", got, want)
	}
	v := wireClientViolations([]string{"client", "console", "host", "internal/chaos"},
		map[string]string{"internal/chaos": "a harness", "internal/gone": "left"})
	want := []string{
		"console constructs api.Client or projector.Client: hold a *client.Client",
		"internal/gone is listed but constructs neither",
	}
	if !slices.Equal(v, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(v, "\n"), strings.Join(want, "\n"))
	}
}
