package doccheck_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/doccheck"
)

// packages are those of issues 01 (foundation), 03 (the application API)
// and 06 (model adapters), relative to the module root.
var packages = []string{
	"natsnode", "provision", "eventlog", "internal/natstest", "internal/layering", "internal/doccheck",
	"tools", "agent", "policy", "approvers", "model", "mcptools", "mcpserve", "internal/mcptest",
	"model/openai", "model/openai/openaitest", "model/anthropic", "model/anthropic/anthropictest", "model/provider",
	"model/internal/adaptertest", "model/internal/adaptere2e", "model/internal/answer", "model/internal/fakeserver", "model/internal/httperr",
	"chaos", "bench",
}

// TestEveryExportedNameIsDocumented is the `go doc` check of issue 03's
// Done-when list: a package doc and a full-sentence doc starting with the
// name on every exported name.
func TestEveryExportedNameIsDocumented(t *testing.T) {
	for _, p := range packages {
		t.Run(strings.ReplaceAll(p, "/", "_"), func(t *testing.T) {
			problems, err := doccheck.Dir(filepath.Join("..", "..", filepath.FromSlash(p)))
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

// apiPackages are the packages applications write handlers, policies and
// approvers against (issue 03).
var apiPackages = []string{"tools", "agent", "policy", "approvers", "model"}

// TestNoAnyInHandlerPolicyApproverAPI is issue 03's "no handler, policy or
// approver code path uses any where a type parameter fits", checked on
// their exported signatures.
func TestNoAnyInHandlerPolicyApproverAPI(t *testing.T) {
	for _, p := range apiPackages {
		problems, err := doccheck.AnyInAPI(filepath.Join("..", "..", p))
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
