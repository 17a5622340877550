package weft_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/projector"
)

// catalogEndpoint names every endpoint of the catalog (one per agent) in
// the "sent by" column.
const catalogEndpoint = "catalog.<agent>"

// errorRow is one row of docs/protocol.md's error-code table.
type errorRow struct {
	code    weft.Code
	number  int
	meaning string
	reasons []string // the backquoted reasons
	sentBy  []string // expanded endpoint names ("approve", "query.run")
}

var backquoted = regexp.MustCompile("`([^`]+)`")

// commandEndpoints and queryEndpoints name every endpoint as the table's
// "sent by" column does.
func commandEndpoints() []string { return api.Endpoints() }

func queryEndpoints() []string {
	var out []string
	for _, e := range slices.Sorted(maps.Keys(projector.Refusals())) {
		out = append(out, "query."+e)
	}
	return out
}

// expandSentBy turns a "sent by" cell into endpoint names.
func expandSentBy(t *testing.T, cell string) []string {
	t.Helper()
	if cell == "—" {
		return nil
	}
	var out []string
	for _, part := range strings.Split(cell, ", ") {
		switch part {
		case "every command":
			out = append(out, commandEndpoints()...)
		case "every run command":
			for _, e := range commandEndpoints() {
				if e != api.EndpointStart {
					out = append(out, e)
				}
			}
		case "every query":
			out = append(out, queryEndpoints()...)
		default:
			if !slices.Contains(commandEndpoints(), part) && !slices.Contains(queryEndpoints(), part) && part != catalogEndpoint {
				t.Errorf("sent by %q: not an endpoint", part)
			}
			out = append(out, part)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func errorTable(t *testing.T) []errorRow {
	t.Helper()
	doc, err := os.ReadFile("docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	const header = "| code | number | meaning | reason | sent by | nothing written? |"
	_, rest, ok := strings.Cut(string(doc), header+"\n")
	if !ok {
		t.Fatalf("docs/protocol.md has no error table with the header %s", header)
	}
	var rows []errorRow
	for _, line := range strings.Split(rest, "\n")[1:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 6 {
			t.Fatalf("row with %d cells: %s", len(cells), line)
		}
		n, err := strconv.Atoi(strings.TrimSpace(cells[1]))
		if err != nil {
			t.Fatalf("row %s: number: %v", line, err)
		}
		r := errorRow{code: weft.Code(strings.Trim(strings.TrimSpace(cells[0]), "`")), number: n, meaning: cells[2], sentBy: expandSentBy(t, strings.TrimSpace(cells[4]))}
		for _, m := range backquoted.FindAllStringSubmatch(cells[3], -1) {
			r.reasons = append(r.reasons, m[1])
		}
		rows = append(rows, r)
	}
	if len(rows) < 20 {
		t.Fatalf("the error table has only %d rows", len(rows))
	}
	return rows
}

// declared inverts api.Refusals, projector.Refusals and catalog.Refusals:
// code -> sorted
// endpoint names.
func declared() map[weft.Code][]string {
	out := map[weft.Code][]string{}
	for e, codes := range api.Refusals() {
		for _, c := range codes {
			out[c] = append(out[c], e)
		}
	}
	for e, codes := range projector.Refusals() {
		for _, c := range codes {
			out[c] = append(out[c], "query."+e)
		}
	}
	for _, c := range catalog.Refusals() {
		out[c] = append(out[c], catalogEndpoint)
	}
	for c := range out {
		slices.Sort(out[c])
		out[c] = slices.Compact(out[c])
	}
	return out
}

// goFiles parses the module's non-test Go files under the given
// directories (relative to the module root), all of them when none.
func goFiles(t *testing.T, dirs ...string) map[string]*ast.File {
	t.Helper()
	out := map[string]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if len(dirs) > 0 && !slices.Contains(dirs, filepath.Dir(path)) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		out[path] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// codeNames maps the Go names of error.go's Code constants to their values.
func codeNames(t *testing.T) map[string]weft.Code {
	t.Helper()
	out := map[string]weft.Code{}
	for _, f := range goFiles(t, ".") {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				out[vs.Names[0].Name] = weft.Code(strings.Trim(vs.Values[0].(*ast.BasicLit).Value, `"`))
			}
		}
	}
	return out
}

// usedCodes returns the codes the files refer to as weft.CodeX.
func usedCodes(files map[string]*ast.File, names map[string]weft.Code) map[weft.Code][]string {
	out := map[weft.Code][]string{}
	for path, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "weft" {
				if c, ok := names[sel.Sel.Name]; ok && !slices.Contains(out[c], path) {
					out[c] = append(out[c], path)
				}
			}
			return true
		})
	}
	return out
}

// TestErrorTableMatchesCode keeps docs/protocol.md's error table honest:
// every row is a code of error.go with its api.Status number; every code
// of error.go has a row; the endpoints of the "sent by" column are exactly
// the ones api.Refusals and projector.Refusals declare; every code the
// command side's packages (the runner and what it calls) refer to is
// declared for some command endpoint and every code the query side's
// refer to for some query endpoint; and every backquoted reason exists as
// a string in the code.
func TestErrorTableMatchesCode(t *testing.T) {
	rows := errorTable(t)
	names := codeNames(t)
	consts := slices.Collect(maps.Values(names))
	decl := declared()
	var documented []weft.Code
	for _, r := range rows {
		documented = append(documented, r.code)
		if !slices.Contains(consts, r.code) {
			t.Errorf("%s: documented, but error.go has no such code", r.code)
			continue
		}
		if got := api.Status(r.code); got != r.number {
			t.Errorf("%s: documented number %d, api.Status has %d", r.code, r.number, got)
		}
		if want := decl[r.code]; !slices.Equal(r.sentBy, want) {
			t.Errorf("%s: sent by %v in docs/protocol.md, but the code declares %v (api.Refusals, projector.Refusals)", r.code, r.sentBy, want)
		}
	}
	for _, c := range consts {
		if !slices.Contains(documented, c) {
			t.Errorf("code %s has no row in docs/protocol.md's error table", c)
		}
	}
	for c := range decl {
		if !slices.Contains(consts, c) {
			t.Errorf("an endpoint declares %q, which is no code of error.go", c)
		}
	}

	// What each side can send.
	sides := []struct {
		name      string
		dirs      []string
		endpoints []string
	}{
		{"command", []string{"api", "runner", "aggregate", "approvers", "eventlog", "tools", "policy", "agent"}, commandEndpoints()},
		{"query", []string{"projector", "projections"}, queryEndpoints()},
		{"catalog", []string{"catalog"}, []string{catalogEndpoint}},
	}
	for _, side := range sides {
		files := goFiles(t, side.dirs...)
		delete(files, filepath.Join("api", "wire.go"))          // the tables themselves
		delete(files, filepath.Join("catalog", "client.go"))    // the Go client's own answers (no answer: unavailable)
		delete(files, filepath.Join("api", "request.go"))       // the clients' own answer: the server refused the publish (permission_denied), no endpoint's
		delete(files, filepath.Join("api", "violations.go"))    // the same, for a KV or stream call (api.Violations)
		delete(files, filepath.Join("projections", "proof.go")) // RunView.ProofSubject: a client's helper over a view it holds, no endpoint's answer
		for c, paths := range usedCodes(files, names) {
			if !slices.ContainsFunc(decl[c], func(e string) bool { return slices.Contains(side.endpoints, e) }) {
				t.Errorf("%s (used in %v) is sent by no %s endpoint of api.Refusals / projector.Refusals", c, paths, side.name)
			}
		}
	}

	// Every documented reason is a string of the code.
	strs := map[string]bool{}
	for _, f := range goFiles(t) {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					strs[s] = true
				}
			}
			return true
		})
	}
	for _, r := range rows {
		for _, reason := range r.reasons {
			if !strs[reason] {
				t.Errorf("%s: reason %q appears nowhere in the code", r.code, reason)
			}
		}
	}
}

// TestRefusalsAreCopies proves the error tables are not exported mutable
// state (STYLE.md): what api.Refusals, projector.Refusals
// and catalog.Refusals return is a copy, so a caller that changes it
// changes neither the next answer nor what the endpoints declare.
func TestRefusalsAreCopies(t *testing.T) {
	a := api.Refusals()
	a[api.EndpointStart][0] = "changed"
	delete(a, api.EndpointApprove)
	if got := api.Refusals(); got[api.EndpointStart][0] == "changed" || got[api.EndpointApprove] == nil {
		t.Errorf("api.Refusals returned shared state: %v", got)
	}
	q := projector.Refusals()
	q[projector.EndpointRun][0] = "changed"
	if got := projector.Refusals(); got[projector.EndpointRun][0] == "changed" {
		t.Errorf("projector.Refusals returned shared state: %v", got)
	}
	c := catalog.Refusals()
	c[0] = "changed"
	if got := catalog.Refusals(); got[0] == "changed" {
		t.Errorf("catalog.Refusals returned shared state: %v", got)
	}
}

// TestRunnerBusyCausesAreDocumented keeps the causes of runner_busy in
// docs/protocol.md's error table as the code answers them: the message of
// every weft.Error{Code: weft.CodeRunnerBusy, ...} the runner and the API
// build — its text without the run ("run %s: "), the error it wraps
// ("(%v)") and "; retry", each formatted value matching any word — appears
// in the row's meaning.
func TestRunnerBusyCausesAreDocumented(t *testing.T) {
	var row string
	for _, r := range errorTable(t) {
		if r.code == weft.CodeRunnerBusy {
			row = strings.ReplaceAll(r.meaning, "`", "")
		}
	}
	if row == "" {
		t.Fatal("no runner_busy row")
	}
	var causes []string
	for path, f := range goFiles(t, "runner", "api") {
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			var busy bool
			var msg ast.Expr
			for _, el := range lit.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				k, _ := kv.Key.(*ast.Ident)
				switch {
				case k == nil:
				case k.Name == "Code":
					if sel, ok := kv.Value.(*ast.SelectorExpr); ok && sel.Sel.Name == "CodeRunnerBusy" {
						busy = true
					}
				case k.Name == "Message":
					msg = kv.Value
				}
			}
			if !busy || msg == nil {
				return true
			}
			text, ok := messageText(msg)
			if !ok {
				t.Errorf("%s: a runner_busy message that is no string, Sprintf or concatenation", path)
				return true
			}
			causes = append(causes, text)
			return true
		})
	}
	if len(causes) < 5 {
		t.Fatalf("found only %d runner_busy messages", len(causes))
	}
	verb := regexp.MustCompile(`%[sdv]`)
	for _, c := range causes {
		cause := strings.ReplaceAll(c, " (%v)", "")
		cause = regexp.MustCompile(`^run %s:? `).ReplaceAllString(cause, "")
		cause = strings.TrimSuffix(cause, "; retry")
		var pat []string
		for _, part := range verb.Split(cause, -1) {
			pat = append(pat, regexp.QuoteMeta(part))
		}
		if !regexp.MustCompile(strings.Join(pat, `\S+`)).MatchString(row) {
			t.Errorf("runner_busy cause %q (message %q) is not in docs/protocol.md's runner_busy row", cause, c)
		}
	}
}

// messageText is the text of a message expression: a string literal,
// fmt.Sprintf's format, or a concatenation (a part that is no literal
// counts as %s).
func messageText(e ast.Expr) (string, bool) {
	switch x := e.(type) {
	case *ast.BasicLit:
		s, err := strconv.Unquote(x.Value)
		return s, err == nil
	case *ast.CallExpr:
		if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Sprintf" && len(x.Args) > 0 {
			return messageText(x.Args[0])
		}
	case *ast.BinaryExpr:
		l, lok := messageText(x.X)
		if !lok {
			l = "%s"
		}
		r, rok := messageText(x.Y)
		if !rok {
			r = "%s"
		}
		return l + r, true
	}
	return "", false
}
