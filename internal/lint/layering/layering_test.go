package layering

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPurePackages: the pure packages import no NATS, net, os or log,
// never read the clock, never sleep or arm a timer, and start no goroutine
// (ARCHITECTURE.md, determinism rule 1; STYLE.md principles 1 and 10).
func TestPurePackages(t *testing.T) {
	for _, pkg := range pure {
		violations, err := Check(filepath.Join("..", "..", "..", pkg))
		if err != nil {
			t.Errorf("%s: %v", pkg, err)
			continue
		}
		for _, v := range violations {
			t.Errorf("%s: %s", pkg, v)
		}
	}
}

// TestCheckCatchesViolations runs the check on a package breaking every
// rule, so TestPurePackages cannot pass vacuously.
func TestCheckCatchesViolations(t *testing.T) {
	got, err := Check(filepath.Join("testdata", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"imports log (logging)", "imports log/slog (logging)", "imports net/http", "imports os", "imports github.com/nats-io/nats.go",
		"uses time.Now", "uses time.Since", "uses time.Sleep", "uses time.After", "uses time.AfterFunc",
		"starts a goroutine",
	}
	joined := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(joined, w) {
			t.Errorf("check missed %q; got:\n%s", w, joined)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d violations, want %d:\n%s", len(got), len(want), joined)
	}
	if _, err := Check(t.TempDir()); err == nil {
		t.Error("empty directory passed the check")
	}
}

// TestPurePackagesTransitively closes the gap of the direct check: nothing
// a pure package depends on, however indirectly, is NATS or net, and every
// package of this module it depends on (model, the root weft package, …)
// obeys the same direct rules, so no clock or I/O reaches the pure core
// through a helper. The dependency list comes from `go list -deps`.
func TestPurePackagesTransitively(t *testing.T) {
	args := []string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{else}}{{.ImportPath}}{{end}}"}
	for _, pkg := range pure {
		args = append(args, "./"+pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const module = "github.com/weftrun/weft"
	ownDeps := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		if why := forbiddenImport(path); why == "NATS" || why == "net" {
			t.Errorf("a pure package depends on %s (%s)", path, why)
		}
		if path != module && !strings.HasPrefix(path, module+"/") {
			continue
		}
		ownDeps++
		violations, err := Check(dir)
		if err != nil {
			t.Errorf("%s: %v", path, err)
		}
		for _, v := range violations {
			t.Errorf("%s (a dependency of a pure package): %s", path, v)
		}
	}
	if ownDeps < len(pure) {
		t.Fatalf("go list found %d packages of this module, want at least the %d pure ones:\n%s", ownDeps, len(pure), out)
	}
}
