// Package tempdirs checks that the code that makes a temporary directory
// or file removes it: a Go function that calls os.MkdirTemp or
// os.CreateTemp (or ioutil's TempDir, TempFile) also calls os.RemoveAll or
// os.Remove, and a JavaScript file of the TypeScript SDK's or the MCP
// peers' that calls mkdtemp also calls rm. It is a cheap guard, not a
// proof that every way out removes it (the test task's leftover check,
// internal/tmpcheck, is that, for the tests): a function that makes a
// directory and leaves its removal to nobody — consolestack.WeftBinary
// left 127 MB in /tmp a run — fails it. Tests prefer t.TempDir, which
// needs neither.
package tempdirs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// kept lists the functions ("file:Func") that make a temporary directory
// and leave it on purpose, each with why and where its path is printed.
// Keep it short; an entry that no longer applies fails the test.
var kept = map[string]string{}

// TestTemporaryDirectoriesAreRemoved walks the repository's Go files
// (both modules; not node_modules, testdata, devtools/ or hidden
// directories) and the JavaScript of sdk/typescript and
// internal/mcptest/node.
func TestTemporaryDirectoriesAreRemoved(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	var bad []string
	used := map[string]bool{}
	goFiles, jsFiles, makers := 0, 0, 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "node_modules" || d.Name() == "testdata" || rel == "devtools" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".go"):
			goFiles++
			for _, fn := range leaky(t, path, &makers) {
				key := rel + ":" + fn
				if kept[key] != "" {
					used[key] = true
					continue
				}
				bad = append(bad, key+" makes a temporary directory or file and never removes it (os.RemoveAll, os.Remove; in a test, t.TempDir)")
			}
		case (strings.HasPrefix(rel, "sdk/typescript/") || strings.HasPrefix(rel, "internal/mcptest/node/")) &&
			(strings.HasSuffix(path, ".js") || strings.HasSuffix(path, ".mjs") || strings.HasSuffix(path, ".ts")):
			jsFiles++
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if s := string(b); strings.Contains(s, "mkdtemp") {
				makers++
				if !strings.Contains(s, "rmSync(") && !strings.Contains(s, "rm(") {
					bad = append(bad, rel+" calls mkdtemp and never rm or rmSync")
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if goFiles < 500 || jsFiles < 5 || makers < 10 {
		t.Fatalf("read %d Go files, %d JavaScript files, %d that make temporary directories: expected the whole repository", goFiles, jsFiles, makers)
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
	for k := range kept {
		if !used[k] {
			t.Errorf("kept lists %s, which makes no temporary directory any more: drop it", k)
		}
	}
}

// leaky returns the functions of the file at path that call a maker of
// temporary directories or files and no remover, counting the makers.
func leaky(t *testing.T, path string, makers *int) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		makes, removes := false, false
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch pkg.Name + "." + sel.Sel.Name {
			case "os.MkdirTemp", "os.CreateTemp", "ioutil.TempDir", "ioutil.TempFile":
				makes = true
			case "os.RemoveAll", "os.Remove":
				removes = true
			}
			return true
		})
		if makes {
			*makers++
			if !removes {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = recv(fd.Recv.List[0].Type) + "." + name
				}
				out = append(out, name)
			}
		}
	}
	return out
}

func recv(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recv(e.X)
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return recv(e.X)
	}
	return "?"
}
