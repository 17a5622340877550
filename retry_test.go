package weft_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"regexp"
	"slices"
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
// non-test Go file but error.go whose switch case, or || chain of
// comparisons, names two or more codes that weft.Code.Retryable accepts.
// One retryable code in a condition (errors.Is(err, unavailable)) is a
// question about that code, not a table.
func TestRetryableIsTheOneTable(t *testing.T) {
	names := codeNames(t)
	retryable := map[string]bool{}
	for name, c := range names {
		if c.Retryable() {
			retryable[name] = true
		}
	}
	if len(retryable) < 2 {
		t.Fatalf("only %d retryable codes: the scan would find nothing", len(retryable))
	}
	found := retryableSets(goFiles(t), retryable)
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

// retryableSets returns the files (but error.go) with a switch case, or
// a || chain, that names two or more of the retryable codes (their Go
// names), as weft.CodeX or, in the root package, CodeX.
func retryableSets(files map[string]*ast.File, retryable map[string]bool) map[string]bool {
	count := func(n ast.Node) int {
		seen := map[string]bool{}
		ast.Inspect(n, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "weft" && retryable[x.Sel.Name] {
					seen[x.Sel.Name] = true
				}
			case *ast.Ident:
				if retryable[x.Name] {
					seen[x.Name] = true
				}
			}
			return true
		})
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
			}
			return true
		})
	}
	return found
}

// TestRetryableSetsFindsBothForms keeps the scan honest: it finds a set
// spelt as a switch case and as a || chain, and not a question about one
// code.
func TestRetryableSetsFindsBothForms(t *testing.T) {
	src := map[string]string{
		"case.go": "package p\nfunc f(c weft.Code) bool {\n\tswitch c {\n\tcase weft.CodeRunnerBusy, weft.CodeContended:\n\t\treturn true\n\t}\n\treturn false\n}\n",
		"or.go":   "package p\nfunc f(c weft.Code) bool { return c == weft.CodeUnavailable || c == weft.CodeConflict }\n",
		"one.go":  "package p\nfunc f(c weft.Code) bool { return c == weft.CodeUnavailable || c == weft.CodeInternal }\n",
	}
	files := map[string]*ast.File{}
	for name, text := range src {
		f, err := parser.ParseFile(token.NewFileSet(), name, text, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	retryable := map[string]bool{"CodeRunnerBusy": true, "CodeContended": true, "CodeConflict": true, "CodeUnavailable": true}
	got := retryableSets(files, retryable)
	if !got["case.go"] || !got["or.go"] || got["one.go"] {
		t.Fatalf("found %v, want case.go and or.go only", got)
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
