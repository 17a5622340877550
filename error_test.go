package weft_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/weftrun/weft"
)

// TestEveryCodeIsDocumented fails when a protocol error code in error.go is
// missing from the error-code table of docs/protocol.md.
func TestEveryCodeIsDocumented(t *testing.T) {
	doc, err := os.ReadFile("docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "error.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
			return true
		}
		lit := vs.Values[0].(*ast.BasicLit).Value
		code := strings.Trim(lit, `"`)
		n++
		if !strings.Contains(string(doc), "| `"+code+"` |") {
			t.Errorf("code %s (%s) has no row in docs/protocol.md", code, vs.Names[0].Name)
		}
		return true
	})
	if n < 20 {
		t.Fatalf("found only %d codes in error.go; the parser walk is broken", n)
	}
}

func TestErrorIsMatchesCodeAndReason(t *testing.T) {
	err := error(&weft.Error{Code: weft.CodeProofRefused, Reason: "proof_expired", Message: "late"})
	if !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused}) {
		t.Error("same code without reason must match")
	}
	if !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: "proof_expired"}) {
		t.Error("same code and reason must match")
	}
	if errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: "no_approvers"}) {
		t.Error("another reason must not match")
	}
	if errors.Is(err, &weft.Error{Code: weft.CodeRunEnded}) {
		t.Error("another code must not match")
	}
	if got := weft.ErrorCode(errors.New("plain")); got != weft.CodeInternal {
		t.Errorf("ErrorCode(plain) = %s, want internal", got)
	}
	if got := weft.ErrorCode(nil); got != "" {
		t.Errorf("ErrorCode(nil) = %q", got)
	}
	if got := err.Error(); got != "proof_refused(proof_expired): late" {
		t.Errorf("Error() = %q", got)
	}
}
