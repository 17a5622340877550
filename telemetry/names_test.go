package telemetry

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"
)

// docs/semantics.md §11: every telemetry name is documented as live. Sub-agent
// delegation exists (aggregate/delegate.go, runner/delegate.go emit
// child_started and child_settled), so no name's doc comment — nor
// docs/observability.md — may still call it reserved or not implemented,
// and the constants are exactly §11's names.
func TestSemantics11_NamesAreDocumentedLive(t *testing.T) {
	want := []string{"run_started", "run_recovered", "run_handed_off", "run_taken_over", "lease_lost",
		"model_turn", "approval_requested", "approval_answered", "tool_dispatched", "tool_settled",
		"child_started", "child_settled", "settlement_refused", "run_cancelled", "run_finished", "drain"}
	f, err := parser.ParseFile(token.NewFileSet(), "telemetry.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			v := spec.(*ast.ValueSpec)
			if id, ok := v.Type.(*ast.Ident); !ok || id.Name != "Name" {
				continue
			}
			name := strings.Trim(v.Values[0].(*ast.BasicLit).Value, `"`)
			got = append(got, name)
			doc := strings.ToLower(v.Doc.Text())
			if !strings.Contains(doc, "is emitted") || strings.Contains(doc, "reserved") || strings.Contains(doc, "not implemented") {
				t.Errorf("%s: doc comment %q does not describe a live name", name, v.Doc.Text())
			}
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("names %v, docs/semantics.md §11 has %v", got, want)
	}
	md, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	if low := strings.ToLower(string(md)); strings.Contains(low, "reserved") || strings.Contains(low, "not implemented") {
		t.Error("docs/observability.md still calls a name reserved or not implemented")
	}
}
