package globalcheck_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/weftrun/weft/internal/lint/globalcheck"
)

// allowed lists the exported package-level variables that are no error
// sentinel and stay all the same, each with why it cannot be a function or
// a constant. Keep it short; an entry whose variable is gone fails the test.
var allowed = map[string]string{}

// TestNoExportedMutableGlobals checks "no exported mutable globals" (STYLE.md),
// over every package of the module (go list ./...;
// the developer tools' own module, devtools/, is not part of it, and test
// files are not read): an exported package-level variable is an error
// sentinel, or it is in allowed with its reason. A table or a default is a
// function returning a fresh copy, or a constant.
func TestNoExportedMutableGlobals(t *testing.T) {
	vars, packages, err := globalcheck.Exported(filepath.Join("..", "..", ".."), "./...")
	if err != nil {
		t.Fatal(err)
	}
	if packages < 40 {
		t.Fatalf("checked %d packages, expected the whole module", packages)
	}
	seen := map[string]bool{}
	sentinels := 0
	for _, v := range vars {
		key := v.Pkg + "." + v.Name
		seen[key] = true
		switch {
		case v.Error:
			sentinels++
		case allowed[key] != "":
		default:
			t.Errorf("%s is an exported mutable global: make it a function returning a fresh copy, a constant, or unexported", v)
		}
	}
	for key := range allowed {
		if !seen[key] {
			t.Errorf("allowed lists %s, which is no exported variable any more: drop the entry", key)
		}
	}
	if sentinels == 0 {
		t.Error("found no error sentinel at all: the check reads nothing")
	}
}

// TestExportedTellsSentinelsApart keeps the check honest on a package
// with sentinels of every form (errors.New, fmt.Errorf, a pointer to an
// error type, the error interface) and three mutable globals: a slice, a
// time.Time and a value of a type whose pointer is the error.
func TestExportedTellsSentinelsApart(t *testing.T) {
	vars, packages, err := globalcheck.Exported(".", "./testdata/bad")
	if err != nil {
		t.Fatal(err)
	}
	if packages != 1 {
		t.Fatalf("checked %d packages, want 1", packages)
	}
	var got []string
	for _, v := range vars {
		kind := "mutable"
		if v.Error {
			kind = "sentinel"
		}
		got = append(got, v.Name+" "+v.Type+" "+kind)
	}
	want := []string{
		"Coded bad.codedError mutable",
		"Epoch time.Time mutable",
		"ErrCoded *bad.codedError sentinel",
		"ErrPlain error sentinel",
		"ErrTyped error sentinel",
		"ErrWrapped error sentinel",
		"Table []string mutable",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.HasPrefix(vars[0].Pos, "testdata/bad/bad.go:") {
		t.Errorf("position %q, want one relative to the directory checked", vars[0].Pos)
	}
}
