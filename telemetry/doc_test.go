package telemetry

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Every span name, span attribute,
// telemetry name and name attribute the code emits is in
// docs/observability.md, and the docs name nothing the code does not emit.
// The code side is read from the source: the spans from this package's
// tracer.Start calls (with the attributes of their Start and End
// functions), the names and their weft.<key> attributes from every Emit
// call in the module.
func TestObservabilityDocMatchesCode(t *testing.T) {
	md, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(md)

	spans := codeSpans(t)
	if len(spans) < 6 || spans["weft.approval_wait"] == nil {
		t.Fatalf("found spans %v in telemetry.go: the reader is broken", spans)
	}
	docSpans := map[string]*span{}
	for _, row := range table(t, doc, "## Spans", "span") {
		name := strings.Trim(row[0], "`")
		if len(row) < 3 {
			t.Fatalf("spans row %q: want span | kind | attributes", row)
		}
		docSpans[name] = &span{kind: row[1], attrs: keys(row[2])}
	}
	for name, s := range spans {
		d, ok := docSpans[docName(name, docSpans)]
		if !ok {
			t.Errorf("span %q (%s) is not in docs/observability.md's Spans table", name, s.kind)
			continue
		}
		if d.kind != s.kind {
			t.Errorf("span %q: kind %q in the docs, %q in the code", name, d.kind, s.kind)
		}
		if !slices.Equal(d.attrs, s.attrs) {
			t.Errorf("span %q: attributes in the docs %v, in the code %v", name, d.attrs, s.attrs)
		}
	}
	for name := range docSpans {
		found := false
		for c := range spans {
			found = found || docName(c, docSpans) == name
		}
		if !found {
			t.Errorf("docs/observability.md documents span %q, which the code does not start", name)
		}
	}

	metrics := codeMetrics(t)
	if len(metrics) == 0 {
		t.Fatal("found no metric in counters.go: the reader is broken")
	}
	docMetrics := map[string][]string{}
	for _, row := range table(t, doc, "## Metrics", "metric") {
		if len(row) < 2 {
			t.Fatalf("metrics row %q: want metric | attributes", row)
		}
		docMetrics[strings.Trim(row[0], "`")] = keys(row[1])
	}
	if !reflect.DeepEqual(metrics, docMetrics) {
		t.Errorf("metrics in the docs %v, in counters.go %v", docMetrics, metrics)
	}

	names := codeNames(t)
	if len(names) < 17 || !slices.Contains(names["settlement_refused"], "weft.summary") {
		t.Fatalf("found names %v in the module's Emit calls: the reader is broken", names)
	}
	docNames := map[string][]string{}
	for _, row := range table(t, doc, "## Telemetry names", "name") {
		if len(row) < 2 {
			t.Fatalf("names row %q: want name | attributes", row)
		}
		docNames[strings.Trim(row[0], "`")] = keys(row[1])
	}
	for name, attrs := range names {
		d, ok := docNames[name]
		if !ok {
			t.Errorf("name %q (%v) is not in docs/observability.md's names table", name, attrs)
			continue
		}
		if !slices.Equal(d, attrs) {
			t.Errorf("name %q: attributes in the docs %v, in the code %v", name, d, attrs)
		}
	}
	for name := range docNames {
		if _, ok := names[name]; !ok {
			t.Errorf("docs/observability.md documents name %q, which nothing emits", name)
		}
	}
}

// span is one span as the code starts it or the docs describe it.
type span struct {
	kind  string
	attrs []string // sorted keys
}

// docName maps a span name of the code ("chat " + a variable becomes
// "chat …") to the docs' row whose name starts with the code's constant
// part followed by a <placeholder>.
func docName(code string, doc map[string]*span) string {
	prefix, dynamic := strings.CutSuffix(code, "…")
	if !dynamic {
		return code
	}
	for name := range doc {
		if i := strings.Index(name, "<"); i >= 0 && strings.HasPrefix(name[:i], prefix) {
			return name
		}
	}
	return code
}

// codeSpans reads telemetry.go: every function calling t.tracer.Start
// starts a span named by its second argument (a literal, or a literal
// plus a variable, written "literal…"), of the kind its WithSpanKind
// option says (internal without one), with the attribute keys of every
// attribute.X("key", …) call in the function and in its End function
// (StartModel's is EndModel).
func codeSpans(t *testing.T) map[string]*span {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "telemetry.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	attrsOf := map[string][]string{}
	startOf := map[string]*span{}
	nameOf := map[string]string{}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		fn := fd.Name.Name
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch x := sel.X.(type) {
			case *ast.Ident:
				if x.Name == "attribute" && len(call.Args) > 0 {
					if lit, ok := call.Args[0].(*ast.BasicLit); ok {
						k, _ := strconv.Unquote(lit.Value)
						attrsOf[fn] = append(attrsOf[fn], k)
					}
				}
				if x.Name == "trace" && sel.Sel.Name == "WithSpanKind" && len(call.Args) == 1 {
					if startOf[fn] == nil {
						startOf[fn] = &span{}
					}
					k := call.Args[0].(*ast.SelectorExpr).Sel.Name
					startOf[fn].kind = strings.ToLower(strings.TrimPrefix(k, "SpanKind"))
				}
			case *ast.SelectorExpr:
				if x.Sel.Name == "tracer" && sel.Sel.Name == "Start" && len(call.Args) >= 2 {
					if startOf[fn] == nil {
						startOf[fn] = &span{}
					}
					nameOf[fn] = spanName(t, call.Args[1])
				}
			}
			return true
		})
	}
	spans := map[string]*span{}
	for fn, name := range nameOf {
		s := startOf[fn]
		if s.kind == "" {
			s.kind = "internal"
		}
		s.attrs = sorted(append(attrsOf[fn], attrsOf["End"+strings.TrimPrefix(fn, "Start")]...))
		spans[name] = s
	}
	return spans
}

func spanName(t *testing.T, e ast.Expr) string {
	switch x := e.(type) {
	case *ast.BasicLit:
		s, _ := strconv.Unquote(x.Value)
		return s
	case *ast.BinaryExpr:
		if lit, ok := x.X.(*ast.BasicLit); ok && x.Op == token.ADD {
			s, _ := strconv.Unquote(lit.Value)
			return s + "…"
		}
	}
	t.Fatalf("a span name the test cannot read: %T", e)
	return ""
}

// codeNames reads every non-test Go file of the module for calls
// codeMetrics reads counters.go: each string constant is a metric, and
// every attribute.String key of the file is an attribute of each (sorted).
func codeMetrics(t *testing.T) map[string][]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "counters.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names, attrs []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.ValueSpec:
			for _, v := range x.Values {
				if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					names = append(names, s)
				}
			}
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "String" && len(x.Args) == 2 {
				if lit, ok := x.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					attrs = append(attrs, s)
				}
			}
		}
		return true
	})
	slices.Sort(attrs)
	out := map[string][]string{}
	for _, n := range names {
		out[n] = attrs
	}
	return out
}

// x.Emit(ctx, name, "key", value, …): name is a constant of this package
// (telemetry.RunStarted) or a conversion (telemetry.Name("…")); the keys
// must be string literals. It returns each name's weft.<key> attributes.
func codeNames(t *testing.T) map[string][]string {
	t.Helper()
	consts := map[string]string{}
	f, err := parser.ParseFile(token.NewFileSet(), "telemetry.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, decl := range f.Decls {
		if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.CONST {
			for _, spec := range g.Specs {
				v := spec.(*ast.ValueSpec)
				if id, ok := v.Type.(*ast.Ident); ok && id.Name == "Name" {
					s, _ := strconv.Unquote(v.Values[0].(*ast.BasicLit).Value)
					consts[v.Names[0].Name] = s
				}
			}
		}
	}
	names := map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if b := d.Name(); path != ".." && (strings.HasPrefix(b, ".") || b == "node_modules" || b == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if strings.HasPrefix(imp.Path.Value, `"go.opentelemetry.io/otel/metric`) && path != filepath.Join("..", "telemetry", "counters.go") {
				t.Errorf("%s imports %s: document its instruments in docs/observability.md (it says Weft has no metrics) and check them here", path, imp.Path.Value)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Emit" || len(call.Args) < 2 {
				return true
			}
			pos := fset.Position(call.Pos())
			name := ""
			switch x := call.Args[1].(type) {
			case *ast.SelectorExpr:
				name = consts[x.Sel.Name]
			case *ast.CallExpr:
				if len(x.Args) == 1 {
					if lit, ok := x.Args[0].(*ast.BasicLit); ok {
						name, _ = strconv.Unquote(lit.Value)
					}
				}
			}
			if name == "" {
				t.Errorf("%s: an Emit whose name the test cannot read", pos)
				return true
			}
			if _, ok := names[name]; !ok {
				names[name] = nil
			}
			for i := 2; i < len(call.Args); i += 2 {
				lit, ok := call.Args[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: Emit(%s) with a key that is not a string literal", pos, name)
					continue
				}
				k, _ := strconv.Unquote(lit.Value)
				names[name] = append(names[name], "weft."+k)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, ks := range names {
		names[n] = sorted(ks)
	}
	return names
}

// table returns the rows of the first Markdown table after heading whose
// header's first cell is first, as trimmed cells.
func table(t *testing.T, doc, heading, first string) [][]string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/observability.md has no %q section", heading)
	}
	var rows [][]string
	in := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if in {
				break
			}
			if strings.HasPrefix(line, "## ") {
				break
			}
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case !in:
			if cells[0] != first {
				t.Fatalf("%s: table header %q, want %q first", heading, line, first)
			}
			in = true
		case strings.Trim(cells[0], "-: ") == "":
		default:
			rows = append(rows, cells)
		}
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table rows", heading)
	}
	return rows
}

var backticked = regexp.MustCompile("`([^`]+)`")

// keys returns the attribute keys of a table cell: each backticked word,
// without a "=value" suffix, sorted and unique ("—" for none).
func keys(cell string) []string {
	var ks []string
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		k, _, _ := strings.Cut(m[1], "=")
		ks = append(ks, k)
	}
	return sorted(ks)
}

func sorted(ks []string) []string {
	slices.Sort(ks)
	return slices.Compact(ks)
}
