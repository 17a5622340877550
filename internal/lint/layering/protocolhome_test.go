package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// reExportFree are the packages that build on the wire protocol and name
// it where it is declared, never re-exporting it (docs/adr/0034): a caller
// of client or worker imports api (and projections, projector, proof,
// events) for the types, constants and helpers those packages hold.
var reExportFree = []string{"client", "worker"}

// weftImports returns the names f's imports of Weft packages are known by.
func weftImports(f *ast.File) map[string]bool {
	out := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if !strings.HasPrefix(p, "github.com/weftrun/weft/") {
			continue
		}
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		out[name] = true
	}
	return out
}

// reExports describes each re-export in f of another Weft package's name
// under an exported one: a type alias (type X = pkg.Y), a constant or
// variable that is the other package's name (X = pkg.Y), and a function
// that only returns the other package's function called with its own
// parameters in order.
func reExports(f *ast.File) []string {
	imported := weftImports(f)
	other := func(e ast.Expr) (string, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", false
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok || !imported[id.Name] {
			return "", false
		}
		return id.Name + "." + sel.Sel.Name, true
	}
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			for _, sp := range d.Specs {
				switch sp := sp.(type) {
				case *ast.TypeSpec:
					if name, ok := other(sp.Type); ok && sp.Assign.IsValid() && sp.Name.IsExported() {
						out = append(out, "type "+sp.Name.Name+" = "+name)
					}
				case *ast.ValueSpec:
					for i, v := range sp.Values {
						if name, ok := other(v); ok && sp.Names[i].IsExported() {
							out = append(out, sp.Names[i].Name+" = "+name)
						}
					}
				}
			}
		case *ast.FuncDecl:
			if d.Recv != nil || !d.Name.IsExported() || d.Body == nil || len(d.Body.List) != 1 {
				continue
			}
			ret, ok := d.Body.List[0].(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			call, ok := ret.Results[0].(*ast.CallExpr)
			if !ok {
				continue
			}
			name, ok := other(call.Fun)
			if !ok {
				continue
			}
			var params, args []string
			for _, p := range d.Type.Params.List {
				for _, n := range p.Names {
					params = append(params, n.Name)
				}
			}
			for _, a := range call.Args {
				if id, ok := a.(*ast.Ident); ok {
					args = append(args, id.Name)
				} else {
					args = append(args, "")
				}
			}
			if slices.Equal(params, args) {
				out = append(out, "func "+d.Name.Name+" forwards to "+name)
			}
		}
	}
	return out
}

// TestClientAndWorkerReExportNothing: the wire protocol has one home
// (docs/adr/0034): package api declares the wire types, subjects,
// outcomes, claims and the error envelope, package protocol the asset
// names; client and worker name them there and declare no alias of them
// (nor of projections', projector's, proof's or events'), so that every
// wire type has one name a reader can find.
func TestClientAndWorkerReExportNothing(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	for _, pkg := range reExportFree {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			n++
			for _, r := range reExports(f) {
				t.Errorf("%s/%s re-exports: %s; callers name the home package (docs/adr/0034)", pkg, filepath.Base(path), r)
			}
		}
		if n == 0 {
			t.Fatalf("no Go files in %s: the scan would pass vacuously", pkg)
		}
	}
}

// TestReExportsFindsEachForm keeps the scan honest: it finds a type alias,
// a constant and a variable that name another Weft package's, and a
// function that only forwards, and not a package's own declarations, an
// unexported name, a standard library value, nor a function that does more
// than forward.
func TestReExportsFindsEachForm(t *testing.T) {
	const src = `package p

import (
	"time"

	"github.com/weftrun/weft/api"
)

type Task = api.Task

type Own struct{ T api.Task }

const TaskStream = api.TaskStream

const own = "x"

const bucket = api.ClaimsBucket

var Wait = time.Second

var Subject = api.ReportSubject

func QueueOf(agent, version, tool string) api.Queue { return api.QueueOf(agent, version, tool) }

func Swapped(agent, version, tool string) api.Queue { return api.QueueOf(version, agent, tool) }

func Key(run string) string { return api.ClaimKey(run, "a", 1, 1) }
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"type Task = api.Task",
		"TaskStream = api.TaskStream",
		"Subject = api.ReportSubject",
		"func QueueOf forwards to api.QueueOf",
	}
	if got := reExports(f); !reflect.DeepEqual(got, want) {
		t.Errorf("reExports found %q, want %q", got, want)
	}
}

// envelopes describes each struct type in f shaped like the error
// envelope: a *weft.Error field tagged "error", and no field but it and
// one tagged "schema".
func envelopes(f *ast.File) []string {
	weftName := ""
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == "github.com/weftrun/weft" {
			weftName = "weft"
			if im.Name != nil {
				weftName = im.Name.Name
			}
		}
	}
	if weftName == "" {
		return nil
	}
	jsonName := func(fl *ast.Field) string {
		if fl.Tag == nil {
			return ""
		}
		tag, _ := strconv.Unquote(fl.Tag.Value)
		name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
		return name
	}
	isWeftError := func(e ast.Expr) bool {
		star, ok := e.(*ast.StarExpr)
		if !ok {
			return false
		}
		sel, ok := star.X.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == weftName && sel.Sel.Name == "Error"
	}
	var out []string
	fset := token.NewFileSet()
	ast.Inspect(f, func(n ast.Node) bool {
		st, ok := n.(*ast.StructType)
		if !ok {
			return true
		}
		envelope, other := false, false
		for _, fl := range st.Fields.List {
			switch name := jsonName(fl); {
			case name == "error" && isWeftError(fl.Type):
				envelope = true
			case name == "schema":
			default:
				other = true
			}
		}
		if envelope && !other {
			out = append(out, fset.Position(st.Pos()).String())
		}
		return true
	})
	return out
}

// TestOneErrorEnvelope: every Weft service answers a refusal with one
// envelope, api.ErrorReply ({"schema":1,"error":{…}}, docs/protocol.md),
// and every requester reads it with api.ReplyError; a second struct of
// that shape outside package api (a service's or a client's own copy)
// fails (docs/adr/0034).
func TestOneErrorEnvelope(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	inAPI := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) {
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
		found := envelopes(f)
		if strings.HasPrefix(rel, "api/") && !strings.Contains(rel[len("api/"):], "/") {
			inAPI += len(found)
			return nil
		}
		for range found {
			t.Errorf("%s declares its own error envelope: use api.ErrorReply and api.ReplyError (docs/adr/0034)", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if inAPI != 1 {
		t.Errorf("package api declares %d error envelopes, want 1 (api.ErrorReply): the scan would pass vacuously", inAPI)
	}
}
