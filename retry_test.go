package weft_test

import (
	"go/ast"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/weftrun/weft"
)

// notYetRetryable lists the files that still spell a set of retryable codes
// of their own, each with why; they are outside this change's files and
// should ask weft.Code.Retryable (their set differs where the reason says
// so). Keep it short: an entry whose file no longer spells a set fails the
// test, so the entry goes with the set.
var notYetRetryable = map[string]string{
	filepath.Join("runner", "act.go"):              "the runner's retried work: Retryable() minus settle_unconfirmed, plus an eventlog.ConflictError",
	filepath.Join("runner", "runner.go"):           "a timer firing is redelivered on runner_busy, unavailable, contended: Retryable() minus conflict and settle_unconfirmed",
	filepath.Join("chaos", "workload.go"):          "the chaos workload resends the same command id on Retryable() plus internal and a transport failure",
	filepath.Join("worker", "worker.go"):           "a worker's report: Retryable() minus settle_unconfirmed plus quarantined (a report is never dropped: it waits for the repair)",
	filepath.Join("bench", "idle.go"):              "the benchmark's commands while partitions move: Retryable() minus conflict and settle_unconfirmed",
	filepath.Join("bench", "scale", "workload.go"): "the scale benchmark's commands while partitions move: Retryable() minus conflict and settle_unconfirmed",
}

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
	// count returns how many distinct retryable codes n names as weft.CodeX
	// (or CodeX inside the root package).
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
	for path, f := range goFiles(t) {
		if path == "error.go" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CaseClause:
				var list ast.Node = &ast.CompositeLit{Elts: x.List}
				if count(list) >= 2 {
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
