// Package globalcheck checks STYLE.md's "no exported mutable globals"
// mechanically: it lists every exported package-level
// variable of a set of packages and says whether its type implements error.
// An error sentinel (var ErrX = errors.New(…), var ErrY = &weft.Error{…}) is
// the one kind of exported variable Weft keeps: errors.Is compares it by
// identity, so it must be a variable. Any other exported variable is a
// table or a value a caller could change for every other caller; it belongs
// behind a function that returns a fresh copy, or in a constant.
//
// The check type-checks the packages' non-test Go files with go/types,
// reading their dependencies' export data from `go list -export`, so it
// needs the go command and nothing outside the standard library.
package globalcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

// Var is one exported package-level variable.
type Var struct {
	// Pkg is the import path of the variable's package.
	Pkg string
	// Name is the variable's name.
	Name string
	// Pos is where it is declared, as file:line with the file relative to
	// the directory the check ran in.
	Pos string
	// Type is its type, qualified by package name.
	Type string
	// Error reports whether Type implements error.
	Error bool
}

// String renders v as "pos: pkg.Name (type)".
func (v Var) String() string { return fmt.Sprintf("%s: %s.%s (%s)", v.Pos, v.Pkg, v.Name, v.Type) }

// listed is the part of `go list -json` the check reads.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Export     string
	Standard   bool
	DepOnly    bool
	Error      *struct{ Err string }
}

// Exported lists the exported package-level variables of the packages that
// patterns name (as `go list` takes them, run in dir), sorted by package
// and name, and how many packages it checked.
func Exported(dir string, patterns ...string) (vars []Var, packages int, err error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, 0, err
	}
	args := append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,CgoFiles,Export,Standard,DepOnly,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, 0, fmt.Errorf("go list: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	var targets []listed
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, 0, fmt.Errorf("go list output: %v", err)
		}
		if p.Error != nil {
			return nil, 0, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		if !p.DepOnly && !p.Standard {
			targets = append(targets, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	errType := types.Universe.Lookup("error").Type().Underlying().(*types.Interface)
	for _, p := range targets {
		if len(p.CgoFiles) > 0 {
			return nil, 0, fmt.Errorf("%s: cgo files are not supported", p.ImportPath)
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, 0, err
			}
			files = append(files, f)
		}
		if len(files) == 0 {
			continue
		}
		conf := types.Config{Importer: imp}
		pkg, err := conf.Check(p.ImportPath, fset, files, nil)
		if err != nil {
			return nil, 0, fmt.Errorf("type-check %s: %v", p.ImportPath, err)
		}
		packages++
		scope := pkg.Scope()
		for _, name := range scope.Names() {
			v, ok := scope.Lookup(name).(*types.Var)
			if !ok || !v.Exported() {
				continue
			}
			pos := fset.Position(v.Pos())
			if rel, err := filepath.Rel(root, pos.Filename); err == nil {
				pos.Filename = filepath.ToSlash(rel)
			}
			vars = append(vars, Var{
				Pkg:   p.ImportPath,
				Name:  name,
				Pos:   fmt.Sprintf("%s:%d", pos.Filename, pos.Line),
				Type:  types.TypeString(v.Type(), func(p *types.Package) string { return p.Name() }),
				Error: types.Implements(v.Type(), errType),
			})
		}
	}
	sort.Slice(vars, func(i, j int) bool {
		if vars[i].Pkg != vars[j].Pkg {
			return vars[i].Pkg < vars[j].Pkg
		}
		return vars[i].Name < vars[j].Name
	})
	return vars, packages, nil
}
