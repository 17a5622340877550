// Package layering holds the test that enforces Weft's layering rule
// (ARCHITECTURE.md, "Determinism rules"; STYLE.md principle 10): the pure
// packages events, aggregate and projections import nothing from NATS, net
// or os, and never read the clock (time.Now, time.Since, time.Until).
//
// The check parses the packages' non-test Go files with go/parser and
// inspects their direct imports and selector expressions, so a transitive
// import (fmt imports os) does not count, but any direct use does.
package layering

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Pure lists the packages (directories relative to the module root) that
// must stay free of I/O and clocks.
var Pure = []string{"events", "aggregate", "projections", "proof"}

// forbiddenImport reports why path may not be imported by a pure package,
// or "".
func forbiddenImport(path string) string {
	switch {
	case path == "os" || strings.HasPrefix(path, "os/"):
		return "os"
	case path == "net" || strings.HasPrefix(path, "net/"):
		return "net"
	case strings.HasPrefix(path, "github.com/nats-io/"), strings.HasPrefix(path, "github.com/synadia-io/"):
		return "NATS"
	case path == "syscall", path == "io/ioutil", path == "math/rand", path == "math/rand/v2", path == "crypto/rand":
		return "I/O or randomness"
	}
	return ""
}

// clockReads are the functions of package time that read the clock.
var clockReads = map[string]bool{"Now": true, "Since": true, "Until": true}

// Check parses the non-test .go files in dir and returns one line per
// violation, sorted: "file:line: imports os" or "file:line: calls time.Now".
// It returns an error when dir holds no non-test Go files.
func Check(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	n := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		n++
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		timeNames := map[string]bool{}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if why := forbiddenImport(path); why != "" {
				out = append(out, fmt.Sprintf("%s: imports %s (%s)", fset.Position(imp.Pos()), path, why))
			}
			if path == "time" {
				local := "time"
				if imp.Name != nil {
					local = imp.Name.Name
				}
				if local == "." {
					out = append(out, fmt.Sprintf("%s: dot-imports time", fset.Position(imp.Pos())))
				}
				timeNames[local] = true
			}
		}
		ast.Inspect(f, func(node ast.Node) bool {
			sel, ok := node.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && timeNames[x.Name] && clockReads[sel.Sel.Name] {
				out = append(out, fmt.Sprintf("%s: uses time.%s", fset.Position(sel.Pos()), sel.Sel.Name))
			}
			return true
		})
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: no non-test Go files", dir)
	}
	sort.Strings(out)
	return out, nil
}
