package weft_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/weftrun/weft"
)

// notYetRetryable lists files allowed to spell a set of retryable codes of
// their own, each with why (none: every place asks weft.Code.Retryable). An
// entry whose file no longer spells a set fails the test, so the entry goes
// with the set.
var notYetRetryable = map[string]string{}

// TestRetryableIsTheOneTable fails when a second definition of "which
// codes are retryable" appears (docs/protocol.md, "Retry rules"): any
// non-test Go file but error.go whose switch case, || chain of
// comparisons, or composite literal (a slice or a map) names two or more
// codes that weft.Code.Retryable accepts, as Go constants or as their wire
// strings. One retryable code in a condition (errors.Is(err, unavailable))
// is a question about that code, not a table; a literal that names more
// of the other codes than of the retryable ones is a table of codes (api's
// statuses, the codes an endpoint may answer), not a set of the retryable
// ones.
func TestRetryableIsTheOneTable(t *testing.T) {
	names := codeNames(t)
	retryable, others := map[string]string{}, map[string]string{}
	for name, c := range names {
		m := others
		if c.Retryable() {
			m = retryable
		}
		m[name], m[string(c)] = string(c), string(c)
	}
	if len(retryable) < 4 {
		t.Fatalf("only %d retryable codes: the scan would find nothing", len(retryable)/2)
	}
	found := retryableSets(goFiles(t), retryable, others)
	for _, path := range slices.Sorted(maps.Keys(found)) {
		if notYetRetryable[path] == "" {
			t.Errorf("%s spells its own set of retryable codes: ask weft.Code.Retryable (error.go), the one table", path)
		}
	}
	for path := range notYetRetryable {
		if !found[path] {
			t.Errorf("notYetRetryable lists %s, which no longer spells a set of retryable codes: drop the entry", path)
		}
	}
}

// retryableSets returns the files (but error.go) with a switch case, a
// || chain, or a composite literal that names two or more of the
// retryable codes, but for a literal that names more of the other codes
// than of the retryable ones (a table of codes). retryable and others map the codes' Go
// names (written weft.CodeX or, in the root package, CodeX) and their
// wire strings ("runner_busy") to the wire string: a code named both ways
// counts once.
func retryableSets(files map[string]*ast.File, retryable, others map[string]string) map[string]bool {
	codes := func(n ast.Node) (seen, other map[string]bool) {
		seen, other = map[string]bool{}, map[string]bool{}
		name := func(s string) {
			if c, ok := retryable[s]; ok {
				seen[c] = true
			} else if c, ok := others[s]; ok {
				other[c] = true
			}
		}
		ast.Inspect(n, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "weft" {
					name(x.Sel.Name)
				}
				return false
			case *ast.Ident:
				name(x.Name)
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING {
					name(s)
				}
			}
			return true
		})
		return seen, other
	}
	count := func(n ast.Node) int {
		seen, _ := codes(n)
		return len(seen)
	}
	found := map[string]bool{}
	for path, f := range files {
		if path == "error.go" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CaseClause:
				if count(&ast.CompositeLit{Elts: x.List}) >= 2 {
					found[path] = true
				}
			case *ast.BinaryExpr:
				if x.Op == token.LOR && count(x) >= 2 {
					found[path] = true
					return false
				}
			case *ast.CompositeLit:
				if seen, other := codes(x); len(seen) >= 2 && len(other) <= len(seen) {
					found[path] = true
					return false
				}
			}
			return true
		})
	}
	return found
}

// TestRetryableSetsFindsBothForms keeps the scan honest: it finds a set
// spelt as a switch case, a || chain, a map or slice of codes and of their
// wire strings, one that mixes in a few other codes (the worker's own
// rule), and not a question about one code nor a table of codes, spelt as
// constants or as wire strings.
func TestRetryableSetsFindsBothForms(t *testing.T) {
	src := map[string]string{
		"case.go":  "package p\nfunc f(c weft.Code) bool {\n\tswitch c {\n\tcase weft.CodeRunnerBusy, weft.CodeContended:\n\t\treturn true\n\t}\n\treturn false\n}\n",
		"or.go":    "package p\nfunc f(c weft.Code) bool { return c == weft.CodeUnavailable || c == weft.CodeConflict }\n",
		"one.go":   "package p\nfunc f(c weft.Code) bool { return c == weft.CodeUnavailable || c == weft.CodeInternal }\n",
		"map.go":   "package p\nvar again = map[weft.Code]bool{weft.CodeRunnerBusy: true, weft.CodeConflict: true}\n",
		"wire.go":  "package p\nvar again = []string{\"runner_busy\", \"unavailable\"}\n",
		"all.go":   "package p\nvar status = map[weft.Code]int{weft.CodeRunnerBusy: 503, weft.CodeConflict: 409, weft.CodeInternal: 500, weft.CodeQuarantined: 409, weft.CodeRunEnded: 409}\n",
		"mixed.go": "package p\nvar again = []weft.Code{weft.CodeRunnerBusy, weft.CodeUnavailable, weft.CodeQuarantined, weft.CodeInternal}\n",
		"keys.go":  "package p\nvar status = map[string]int{\"runner_busy\": 503, \"unavailable\": 503, \"internal\": 500, \"quarantined\": 409, \"invalid_json\": 400}\n",
	}
	files := map[string]*ast.File{}
	for name, text := range src {
		f, err := parser.ParseFile(token.NewFileSet(), name, text, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	retryable := map[string]string{"CodeRunnerBusy": "runner_busy", "CodeContended": "contended", "CodeConflict": "conflict", "CodeUnavailable": "unavailable", "runner_busy": "runner_busy", "unavailable": "unavailable"}
	others := map[string]string{}
	for _, c := range []string{"internal", "quarantined", "invalid_json", "unknown_run", "run_ended"} {
		others[c] = c
	}
	others["CodeInternal"], others["CodeQuarantined"], others["CodeInvalidJSON"], others["CodeUnknownRun"], others["CodeRunEnded"] = "internal", "quarantined", "invalid_json", "unknown_run", "run_ended"
	got := retryableSets(files, retryable, others)
	want := map[string]bool{"case.go": true, "or.go": true, "map.go": true, "wire.go": true, "mixed.go": true}
	if !maps.Equal(got, want) {
		t.Fatalf("found %v, want %v", got, want)
	}
}

// TestRetryRulesDocumentTheTable keeps docs/protocol.md's "Retry rules"
// equal to weft.Code.Retryable: its "Retryable codes:" line names exactly
// the codes of error.go that Retryable accepts.
func TestRetryRulesDocumentTheTable(t *testing.T) {
	doc, err := os.ReadFile("docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Retry rules\n")
	if !ok {
		t.Fatal(`docs/protocol.md has no "## Retry rules" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, line, ok := strings.Cut(section, "Retryable codes:")
	if !ok {
		t.Fatal(`"Retry rules" has no "Retryable codes:" line`)
	}
	line, _, _ = strings.Cut(line, ".\n")
	var documented []weft.Code
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(line, -1) {
		documented = append(documented, weft.Code(m[1]))
	}
	var want []weft.Code
	for _, c := range codeNames(t) {
		if c.Retryable() {
			want = append(want, c)
		}
	}
	slices.Sort(documented)
	slices.Sort(want)
	if !slices.Equal(documented, want) {
		t.Errorf("docs/protocol.md's retryable codes are %v, weft.Code.Retryable accepts %v", documented, want)
	}
}
