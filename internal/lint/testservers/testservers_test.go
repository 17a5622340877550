// Package testservers checks that the tests start their NATS servers
// through internal/natstest, whose servers require a token of their own
// (see its package doc), or are listed here with why their own server is
// safe: a client that reconnects to a stopped server's port, or dials a
// port read free before its server bound it, may find another test's
// server there and must be refused, never work against it.
package testservers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// direct lists the test files outside internal/natstest and natsnode (the
// two that start servers for the others) that start a nats-server
// themselves (server.NewServer), a listening natsnode on a port they
// chose (natsnode.WithListen with a port other than 0) or weft dev on one
// (--listen with a port other than "0"). token marks a file whose server
// requires a token its clients present (server.Options.Authorization or
// an authorization block in its configuration): the file must say
// "Authorization" or "authorization". An entry whose file starts no such
// server any more fails the test: drop it.
var direct = map[string]struct {
	token bool
	why   string
}{
	"worker/rebind_test.go":                 {true, "restarts its server on the same port with a memory task stream (the server loses the consumer), which natstest's provisioning of the base assets would make durable"},
	"worker/worker_test.go":                 {true, "startServerHandle: a test shuts its server down while the worker's connection still reconnects"},
	"timer/lost_test.go":                    {true, "restarts its server on the same port with a memory timer stream (the server loses the consumer)"},
	"timer/timer_test.go":                   {true, "startServer: a test restarts on the same store (on a new port, with a new connection)"},
	"natsnode/connect_test.go":              {true, "the client dials a port read free a second before its server binds it"},
	"retention/retention_test.go":           {false, "a server without JetStream on port 0, never stopped before the test ends"},
	"partition/partition_test.go":           {false, "port 0 (listen 127.0.0.1:-1), never restarted"},
	"internal/demo/maxpayload_test.go":      {false, "port 0, never restarted"},
	"roles/authority_test.go":               {false, "port 0, reloaded, never restarted; its clients present the roles' credentials"},
	"roles/bench_test.go":                   {false, "port 0 (listen 127.0.0.1:-1), never restarted; its clients present the roles' credentials"},
	"internal/chaos/nodes_internal_test.go": {true, "the chaos nodes' own configurations, with their per-node token: the test puts a foreign node on a node's port on purpose"},
	"cmd/weft/firsthour_test.go":            {false, "weft dev --listen on a port the test holds itself: it proves the refusal 'port in use'"},
	"cmd/weft/devnats_test.go":              {false, "weft dev --nats with --listen 4223: refused as usage, starts nothing"},
}

// serverPkg is the import path of the nats-server package.
const serverPkg = "github.com/nats-io/nats-server/v2/server"

// TestTestsStartTheirServersThroughNatstest walks every test file of the
// module (not node_modules, testdata or devtools/, its own module) and
// finds the servers started outside natstest; each is in direct with its
// reason.
func TestTestsStartTheirServersThroughNatstest(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	found := map[string][]string{} // file -> what it starts
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != ".",
				rel == "devtools", rel == "internal/natstest":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		if what := starts(t, path); len(what) > 0 {
			found[rel] = what
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d test files, expected the whole module", files)
	}
	var names []string
	for f := range found {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		e, ok := direct[f]
		if !ok {
			t.Errorf("%s starts its own server (%s): use internal/natstest (Start, Stop, StartAgain, Restart keep the port and require the server's token), or give the server a token its clients present and list the file in direct with why", f, strings.Join(found[f], ", "))
			continue
		}
		if e.token {
			b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(strings.ToLower(string(b)), "authorization") {
				t.Errorf("%s is listed with a token, yet it says nothing of its server's authorization", f)
			}
		}
	}
	for f := range direct {
		if _, ok := found[f]; !ok {
			t.Errorf("direct lists %s, which starts no server of its own any more: drop the entry", f)
		}
	}
}

// starts returns what the test file at path starts outside natstest:
// server.NewServer calls, natsnode.WithListen with anything but a
// literal 0, and a "--listen" argument (in a call or a slice) followed by
// anything but "0" or an address ending in ":0" (the console's).
func starts(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // local name -> import path
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		names[name] = p
	}
	var what []string
	ast.Inspect(f, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if pkg, fn := callee(call, names); pkg == serverPkg && fn == "NewServer" {
				what = append(what, "server.NewServer")
			} else if pkg == "github.com/weftrun/weft/natsnode" && fn == "WithListen" && len(call.Args) == 1 && !isZero(call.Args[0]) {
				what = append(what, "natsnode.WithListen on a port of its own")
			}
		}
		var list []ast.Expr
		switch n := n.(type) {
		case *ast.CallExpr:
			list = n.Args
		case *ast.CompositeLit:
			list = n.Elts
		}
		for i, e := range list {
			if s, ok := e.(*ast.BasicLit); ok && s.Value == `"--listen"` && i+1 < len(list) {
				v, ok := list[i+1].(*ast.BasicLit)
				if !ok || v.Value != `"0"` && !strings.HasSuffix(v.Value, `:0"`) {
					what = append(what, "weft --listen on a port of its own")
				}
			}
		}
		return true
	})
	return what
}

// callee returns the import path and the name of the package-level
// function call calls (pkg.Fn(...)), or "", "".
func callee(call *ast.CallExpr, names map[string]string) (pkg, fn string) {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return "", ""
	}
	return names[x.Name], sel.Sel.Name
}

// isZero reports whether e is the literal 0.
func isZero(e ast.Expr) bool {
	l, ok := e.(*ast.BasicLit)
	return ok && l.Value == "0"
}
