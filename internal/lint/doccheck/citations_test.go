package doccheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/lint/doccheck"
)

// trackerAllowed lists, per file, the phrases whose "issue" is no tracker
// entry. Keep it tiny.
var trackerAllowed = map[string][]string{}

// TestSemanticsCitationsExist keeps every citation of the rules pointing
// at them: each "docs/semantics.md §N" in a Go, Markdown, script or
// JavaScript file names a
// section docs/semantics.md has (a text quoted after it is in that
// section), and nothing cites the design notes outside the repository or a
// tracker entry. After a merge, `go run ./internal/lint/doccheck/testdata/citations`
// rewrites what it can (docs/semantics.md, "Where the rules are cited").
func TestSemanticsCitationsExist(t *testing.T) {
	problems, err := doccheck.Citations(filepath.Join("..", "..", ".."), trackerAllowed)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCitationsFindProblems keeps the citation check honest: in a small
// tree, a missing section, a quote its section does not hold, a scenario
// §12 does not list, a test or script named after either, a citation of
// the design notes and each form of tracker reference are found, and
// nothing else is.
func TestCitationsFindProblems(t *testing.T) {
	got, err := doccheck.Citations(filepath.Join("testdata", "citations", "tree"), map[string][]string{"a/a.go": {"nats.go's issue 42"}})
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	want := []string{
		`a/a.go:2: cites docs/semantics.md §9, which has no such section`,
		`a/a.go:4: quotes "rule two", which docs/semantics.md §1 does not say`,
		`a/a.go:9: cites docs/semantics.md §11, which has no such section`,
		`a/a.go:8: cites scenario 3, which docs/semantics.md §12 does not list`,
		`a/a.go:10: is named after docs/semantics.md §9, which has no such section`,
		`a/a.go:11: is named after scenario 3, which docs/semantics.md §12 does not list`,
		`a/a.go:6: cites the design notes (SEMANTICS…), a file outside the repository: cite docs/semantics.md`,
		`a/a.go:6: cites a tracker entry ("issue 17"): cite the file that holds the rule or decision`,
		`a/a.go:7: cites a tracker entry ("reviewer F4"): cite the file that holds the rule or decision`,
		`b.md:1: cites docs/semantics.md §13, which has no such section`,
		`b.md:1: cites the design notes (SEMANTICS…), a file outside the repository: cite docs/semantics.md`,
		`b.md:1: cites a tracker entry ("review r3"): cite the file that holds the rule or decision`,
		`c.txt:1: cites docs/semantics.md §7, which has no such section`,
		`scenario07_unlisted.txt:1: is named after scenario 7, which docs/semantics.md §12 does not list`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestRewriteCitations checks the rewrite on a fixed text: the table's
// rules for every file (and not another file's), the design notes' name,
// and tracker references in parentheses, beside another reference, across
// a comment's lines and opening a sentence; and that a second run changes
// nothing.
func TestRewriteCitations(t *testing.T) {
	dir := filepath.Join("testdata", "citations")
	rules, err := doccheck.ReadRewrites(filepath.Join(dir, "rewrite_rules.txt"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.ReadFile(filepath.Join(dir, "rewrite_in.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "rewrite_want.txt"))
	if err != nil {
		t.Fatal(err)
	}
	got := doccheck.RewriteCitations("x.go", string(in), rules)
	if got != string(want) {
		t.Errorf("rewrite:\n%s\nwant:\n%s", got, want)
	}
	if again := doccheck.RewriteCitations("x.go", got, rules); again != got {
		t.Errorf("a second rewrite changed:\n%s\ninto:\n%s", got, again)
	}
}
