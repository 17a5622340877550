// Package doccheck checks the documentation rule of STYLE.md mechanically:
// every package has a package doc starting "Package <name>" (a command's
// may start "Command <directory>", the form `go doc` readers expect), and every
// exported name (constant, variable, type, function, method of an exported
// type) has a full-sentence doc comment that starts with the name and ends
// with a period. It reads source with go/parser and go/doc, the same view
// `go doc` prints; its test runs it over every package of the module. AnyInAPI
// checks that the application API exposes no any outside
// type-parameter constraints, and the package's tests also check
// Taskfile.yml (TestTaskfile).
package doccheck

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Problem is one documentation defect: the package directory, the exported
// name ("" for the package doc) and what is wrong.
type Problem struct {
	Dir, Name, Reason string
}

// String renders the problem as "dir: name: reason".
func (p Problem) String() string { return fmt.Sprintf("%s: %s: %s", p.Dir, p.Name, p.Reason) }

// Dir checks the non-test Go files of one package directory and returns
// its problems in a stable order (by name, then reason).
func Dir(dir string) ([]Problem, error) {
	fset := token.NewFileSet()
	files, err := parseDir(fset, dir)
	if err != nil {
		return nil, err
	}
	p, err := doc.NewFromFiles(fset, files, "example.com/"+files[0].Name.Name)
	if err != nil {
		return nil, err
	}
	var out []Problem
	add := func(name, reason string) { out = append(out, Problem{dir, name, reason}) }
	want := "Package " + p.Name + " "
	// A command's doc names the command, as `go doc` shows it: "Command
	// weft is …" (or the package form, "Package main is …").
	command := "Command " + filepath.Base(dir) + " "
	if !strings.HasPrefix(p.Doc, want) && (p.Name != "main" || !strings.HasPrefix(p.Doc, command)) {
		add("", fmt.Sprintf("package doc does not start %q", want))
	}
	sentence := func(name, text string) {
		text = strings.TrimSpace(text)
		switch {
		case text == "":
			add(name, "no doc comment")
			return
		case !strings.HasSuffix(text, ".") && !strings.HasSuffix(text, ":") && !strings.HasSuffix(text, ")"):
			// A trailing code block or list is fine; plain prose ends with a period.
			last := text[strings.LastIndex(text, "\n")+1:]
			if !strings.HasPrefix(last, "\t") && !strings.HasPrefix(last, "  ") {
				add(name, "doc does not end with a period")
			}
		}
		words := strings.Fields(text)
		first := words[0]
		if first != name && (first == "A" || first == "An" || first == "The") && len(words) > 1 {
			first = words[1]
		}
		if bare := strings.TrimSuffix(first, "'s"); bare != name {
			add(name, fmt.Sprintf("doc starts %q, not with the name", first))
		}
	}
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, spec := range v.Decl.Specs {
				s := spec.(*ast.ValueSpec)
				for _, id := range s.Names {
					if !id.IsExported() {
						continue
					}
					switch {
					case s.Doc != nil:
						sentence(id.Name, s.Doc.Text())
					case s.Comment != nil:
						sentence(id.Name, s.Comment.Text())
					case len(v.Decl.Specs) == 1:
						sentence(id.Name, v.Doc)
					default:
						add(id.Name, "no doc comment (a grouped name needs its own)")
					}
				}
			}
		}
	}
	values(p.Consts)
	values(p.Vars)
	for _, f := range p.Funcs {
		sentence(f.Name, f.Doc)
	}
	for _, t := range p.Types {
		sentence(t.Name, t.Doc)
		values(t.Consts)
		values(t.Vars)
		for _, f := range t.Funcs {
			sentence(f.Name, f.Doc)
		}
		for _, m := range t.Methods {
			sentence(m.Name, m.Doc)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Reason < out[j].Reason
	})
	return out, nil
}

// parseDir parses the non-test Go files of dir, with comments.
func parseDir(fset *token.FileSet, dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("doccheck: no Go files in %s", dir)
	}
	return files, nil
}
