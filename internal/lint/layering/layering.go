// Package layering holds the test that enforces Weft's layering rule
// (ARCHITECTURE.md, "Determinism rules"; STYLE.md principle 10): the pure
// packages (events, aggregate, projections and proof) import nothing from
// NATS, net, os or log, never read the clock (time.Now, time.Since,
// time.Until), never wait on it (time.Sleep, time.After, time.AfterFunc,
// time.Tick, timers and tickers) and start no goroutine. A decision that depended on when it ran, on a log line being
// written or on a goroutine being scheduled could not be refolded from the
// log to the same state (determinism rule 4).
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

// pure lists the packages (directories relative to the module root) that
// must stay free of I/O and clocks. It is unexported: no other package may
// change the list the check runs over.
var pure = []string{"events", "aggregate", "projections", "proof"}

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
	case path == "log" || strings.HasPrefix(path, "log/"):
		return "logging"
	}
	return ""
}

// clockUses are the functions of package time that read the clock or wait
// on it. Durations, time.Time values and their methods stay allowed: time
// arrives on events as data.
var clockUses = map[string]bool{
	"Now": true, "Since": true, "Until": true,
	"Sleep": true, "After": true, "AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

// Check parses the non-test .go files in dir and returns one line per
// violation, sorted: "file:line: imports os (os)", "file:line: uses
// time.Now" or "file:line: starts a goroutine".
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
			switch n := node.(type) {
			case *ast.GoStmt:
				out = append(out, fmt.Sprintf("%s: starts a goroutine", fset.Position(n.Pos())))
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && timeNames[x.Name] && clockUses[n.Sel.Name] {
					out = append(out, fmt.Sprintf("%s: uses time.%s", fset.Position(n.Pos()), n.Sel.Name))
				}
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
