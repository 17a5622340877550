package layering

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPurePackages: events, aggregate and projections import no NATS, net
// or os, and never read the clock.
func TestPurePackages(t *testing.T) {
	for _, pkg := range Pure {
		violations, err := Check(filepath.Join("..", "..", pkg))
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
	want := []string{"imports net/http", "imports os", "imports github.com/nats-io/nats.go", "uses time.Now", "uses time.Since"}
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
