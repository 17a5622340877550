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
// envelope: a *weft.Error field named "error" in JSON (its tag's name, or
// its own untagged, in any case), and no field but it and one named
// "schema".
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
	// jsonName is the lower-cased JSON name of a field (encoding/json
	// matches names case-insensitively): its tag's, else its own; "" for an
	// embedded field, several names or one the tag hides ("-").
	jsonName := func(fl *ast.Field) string {
		if len(fl.Names) != 1 {
			return ""
		}
		name := fl.Names[0].Name
		if fl.Tag != nil {
			tag, _ := strconv.Unquote(fl.Tag.Value)
			if n, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ","); n == "-" {
				return ""
			} else if n != "" {
				name = n
			}
		}
		return strings.ToLower(name)
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
			out = append(out, "struct at offset "+strconv.Itoa(int(st.Pos())))
		}
		return true
	})
	return out
}

// decodesEnvelope describes each place in f that makes an api.ErrorReply
// to decode a reply into — `var x api.ErrorReply`, new(api.ErrorReply), an
// empty api.ErrorReply{} — rather than reading the reply with
// api.ReplyError. Encoding one (a literal with its fields) is not.
func decodesEnvelope(f *ast.File) []string {
	apiName := ""
	for _, im := range f.Imports {
		if p, _ := strconv.Unquote(im.Path.Value); p == "github.com/weftrun/weft/api" {
			apiName = "api"
			if im.Name != nil {
				apiName = im.Name.Name
			}
		}
	}
	if apiName == "" {
		return nil
	}
	isEnvelope := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		id, ok := sel.X.(*ast.Ident)
		return ok && id.Name == apiName && sel.Sel.Name == "ErrorReply"
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			if n.Type != nil && isEnvelope(n.Type) {
				out = append(out, "var "+n.Names[0].Name+" "+apiName+".ErrorReply")
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "new" && len(n.Args) == 1 && isEnvelope(n.Args[0]) {
				out = append(out, "new("+apiName+".ErrorReply)")
			}
		case *ast.CompositeLit:
			if isEnvelope(n.Type) && len(n.Elts) == 0 {
				out = append(out, apiName+".ErrorReply{}")
			}
		}
		return true
	})
	return out
}

// TestEnvelopeFormsAreFound: the two scans of TestOneErrorEnvelope find
// each form they look for, and nothing else.
func TestEnvelopeFormsAreFound(t *testing.T) {
	const src = `package p

import (
	"encoding/json"

	w "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
)

type tagged struct {
	Schema int      ` + "`json:\"schema\"`" + `
	Error  *w.Error ` + "`json:\"error,omitempty\"`" + `
}

type untagged struct {
	Schema int
	Error  *w.Error
}

type renamed struct {
	S int      ` + "`json:\"Schema\"`" + `
	E *w.Error ` + "`json:\"ERROR\"`" + `
}

type success struct {
	Schema int      ` + "`json:\"schema\"`" + `
	Run    string   ` + "`json:\"run\"`" + `
	Error  *w.Error ` + "`json:\"error\"`" + `
}

type hidden struct {
	Schema int
	Error  *w.Error ` + "`json:\"-\"`" + `
}

func read(b []byte) {
	var er api.ErrorReply
	_ = json.Unmarshal(b, &er)
	_ = json.Unmarshal(b, new(api.ErrorReply))
	_ = json.Unmarshal(b, &api.ErrorReply{})
	_, _ = json.Marshal(api.ErrorReply{Schema: 1})
}
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(envelopes(f)); got != 3 {
		t.Errorf("envelopes found %d structs, want 3 (tagged, untagged, renamed): %q", got, envelopes(f))
	}
	want := []string{"var er api.ErrorReply", "new(api.ErrorReply)", "api.ErrorReply{}"}
	if got := decodesEnvelope(f); !reflect.DeepEqual(got, want) {
		t.Errorf("decodesEnvelope found %q, want %q", got, want)
	}
}

// TestOneErrorEnvelope: every Weft service answers a refusal with one
// envelope, api.ErrorReply ({"schema":1,"error":{…}}, docs/protocol.md),
// and a requester reads it with api.ReplyError alone (docs/adr/0034). It
// fails on a second struct of that shape outside package api (a
// service's or a client's own copy), and on code outside package api
// that makes an api.ErrorReply to decode into (decodesEnvelope).
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
		for _, d := range decodesEnvelope(f) {
			t.Errorf("%s decodes a reply into %s: read it with api.ReplyError (docs/adr/0034)", rel, d)
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
