package doccheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// WalkHeading opens the section of docs/architecture.md that follows one
// command through the code, one table row per function it passes.
const WalkHeading = "## The walk of one command"

// walkFile is a table cell naming a Go file by its path from the module
// root ("api/api.go"); walkFunc one naming a function ("Decide") or a
// method by its receiver's type ("Runner.Approve").
var (
	walkFile = regexp.MustCompile("^`([a-z0-9_./-]+\\.go)`$")
	walkFunc = regexp.MustCompile("^`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?)`$")
)

// WalkStep is one row of the walk: its line in the document, the file and
// the function it names.
type WalkStep struct {
	Line int
	File string
	Func string
}

// Walk reads the walk's table (the section under WalkHeading of the
// Markdown file doc, under root) and checks every step: its file exists
// under root and defines its function. A row's cells are the step, the
// file (`path.go`), the function (`Func` or `Type.Method`) and what
// happens there; the header and separator rows are skipped. It returns
// the steps, in order, and the problems as "doc:line: reason", a section
// without steps among them.
func Walk(root, doc string) ([]WalkStep, []string, error) {
	f, err := os.Open(filepath.Join(root, doc))
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	var steps []WalkStep
	var problems []string
	bad := func(line int, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s:%d: %s", doc, line, fmt.Sprintf(format, args...)))
	}
	in, found, header := false, false, false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := strings.TrimSpace(sc.Text())
		switch {
		case text == WalkHeading:
			in, found = true, true
			continue
		case in && strings.HasPrefix(text, "## "):
			in = false
		}
		if !in || !strings.HasPrefix(text, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if !header {
			header = true // the header row
			continue
		}
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // the separator row
		}
		if len(cells) < 4 {
			bad(n, "a step has the cells step | file | function | what happens")
			continue
		}
		fm, gm := walkFile.FindStringSubmatch(cells[1]), walkFunc.FindStringSubmatch(cells[2])
		if fm == nil || gm == nil {
			bad(n, "a step names one file (`path.go`) and one function (`Func` or `Type.Method`), not %s and %s", cells[1], cells[2])
			continue
		}
		steps = append(steps, WalkStep{Line: n, File: fm[1], Func: gm[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	if !found || len(steps) == 0 {
		bad(0, "no steps under %q", WalkHeading)
		return steps, problems, nil
	}
	defined := map[string]map[string]bool{}
	for _, s := range steps {
		funcs, ok := defined[s.File]
		if !ok {
			funcs, err = funcsOf(filepath.Join(root, filepath.FromSlash(s.File)))
			if err != nil && !os.IsNotExist(err) {
				return nil, nil, err
			}
			defined[s.File] = funcs
		}
		switch {
		case funcs == nil:
			bad(s.Line, "%s does not exist", s.File)
		case !funcs[s.Func]:
			bad(s.Line, "%s defines no %s", s.File, s.Func)
		}
	}
	return steps, problems, nil
}

// funcsOf returns the functions a Go file defines: "Name", and a method as
// "Type.Name" (the receiver's type without its pointer or type
// parameters). A file that does not exist returns nil and its error.
func funcsOf(path string) (map[string]bool, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	file, err := parser.ParseFile(token.NewFileSet(), path, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range file.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = recvType(fd.Recv.List[0].Type) + "." + name
		}
		out[name] = true
	}
	return out, nil
}

// recvType is the name of a receiver's type: T of T, *T, T[P] and *T[P].
func recvType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
