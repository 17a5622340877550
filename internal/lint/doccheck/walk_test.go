package doccheck_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/lint/doccheck"
)

// TestArchitectureWalkIsTrue keeps docs/architecture.md's "The walk of one
// command" true to the code: every file a step names exists and defines
// the function the step names, so that a rename or a move fails here
// until the walk follows it.
func TestArchitectureWalkIsTrue(t *testing.T) {
	steps, problems, err := doccheck.Walk(filepath.Join("..", "..", ".."), "docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	// The walk goes from the request to the view: the console's form,
	// the command service, the runner, the decision, the append, the act,
	// the projector, the projection and the console's read.
	files := map[string]bool{}
	for _, s := range steps {
		files[s.File] = true
	}
	for _, want := range []string{"console/act.go", "api/api.go", "runner/backend.go", "runner/answers.go", "aggregate/decide.go", "eventlog/eventlog.go",
		"internal/groupcommit/groupcommit.go", "runner/command.go", "aggregate/pending.go", "projector/batch.go", "projections/view.go", "projector/query.go", "console/run.go"} {
		if !files[want] {
			t.Errorf("the walk passes no function of %s", want)
		}
	}
}

// TestWalkFindsProblems keeps the walk's check honest: in a small tree, a
// function, a method of a pointer receiver and one of a generic type are
// found; a missing function, a missing file, a method named without its
// type and a cell that is not a file are reported; a table after the
// walk's section is not read.
func TestWalkFindsProblems(t *testing.T) {
	steps, problems, err := doccheck.Walk(filepath.Join("testdata", "walk", "tree"), "doc.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 6 {
		t.Errorf("read %d steps, want 6: %v", len(steps), steps)
	}
	want := []string{
		"doc.md:13: a step names one file (`path.go`) and one function (`Func` or `Type.Method`), not a/a.go and `Top`",
		"doc.md:10: a/a.go defines no Missing",
		"doc.md:11: a/gone.go does not exist",
		"doc.md:12: a/a.go defines no Method",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}
