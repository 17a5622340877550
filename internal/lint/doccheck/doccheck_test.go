package doccheck_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/lint/doccheck"
)

// packages lists every package of the module (go list ./...), relative to
// the module root: the doc rule of STYLE.md (principle 8) holds everywhere,
// not only where an issue asked for it. A directory of test files only
// (e2e) has no documented API and is not listed.
func packages(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{if .GoFiles}}{{.Dir}}{{end}}", "./...")
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs(cmd.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.ToSlash(rel))
	}
	if len(dirs) < 40 {
		t.Fatalf("go list found %d packages, expected the whole module:\n%s", len(dirs), out)
	}
	return dirs
}

// TestEveryExportedNameIsDocumented is the `go doc` check of STYLE.md principle
// 8, over every package of the module: a
// package doc and a full-sentence doc starting with the name on every
// exported name.
func TestEveryExportedNameIsDocumented(t *testing.T) {
	for _, p := range packages(t) {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			problems, err := doccheck.Dir(filepath.Join("..", "..", "..", filepath.FromSlash(p)))
			if err != nil {
				t.Fatal(err)
			}
			for _, pr := range problems {
				t.Error(pr)
			}
		})
	}
}

// TestDirFindsProblems keeps the checker honest: a package with an
// undocumented function, a doc not starting with the name, a grouped
// constant without its own doc and no package doc yields exactly those
// problems.
func TestDirFindsProblems(t *testing.T) {
	got, err := doccheck.Dir(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.Name+": "+p.Reason)
	}
	want := []string{
		`: package doc does not start "Package bad "`,
		`B: no doc comment (a grouped name needs its own)`,
		`Good: doc does not end with a period`,
		`Undocumented: no doc comment`,
		`Wrong: doc starts "Does", not with the name`,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

// TestDirAcceptsCommandDoc: a command's package doc may name the command
// ("Command cmdok …"), the form `go doc` shows for cmd/weft and
// cmd/projector; the bad package above shows a library package may not.
func TestDirAcceptsCommandDoc(t *testing.T) {
	got, err := doccheck.Dir(filepath.Join("testdata", "cmdok"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range got {
		t.Error(p)
	}
}

// apiPackages are the packages applications write handlers, policies and
// approvers against.
var apiPackages = []string{"tools", "agent", "policy", "approvers", "model"}

// TestNoAnyInHandlerPolicyApproverAPI checks that no handler, policy or
// approver code path uses any where a type parameter fits, checked on
// their exported signatures.
func TestNoAnyInHandlerPolicyApproverAPI(t *testing.T) {
	for _, p := range apiPackages {
		problems, err := doccheck.AnyInAPI(filepath.Join("..", "..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range problems {
			t.Error(pr)
		}
	}
}

// TestAnyInAPIFindsProblems keeps that check honest.
func TestAnyInAPIFindsProblems(t *testing.T) {
	got, err := doccheck.AnyInAPI(filepath.Join("testdata", "anyapi"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	if want := "Box.Value Handler Policy.Check Run"; strings.Join(names, " ") != want {
		t.Fatalf("flagged %q, want %q", strings.Join(names, " "), want)
	}
}
