package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckListsWhatIsLeftAndRemovesTheDirectory: what a run left in its
// temporary directory is listed with its size, a documented exception is
// not, and the directory is gone afterwards (the test task's leftover
// check, Taskfile.yml); a documented exception (a chaos seed's evidence)
// is moved out of it.
func TestCheckListsWhatIsLeftAndRemovesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	leak := filepath.Join(dir, "weft-console-bin-123")
	if err := os.MkdirAll(leak, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leak, "weft"), make([]byte, 3<<20), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "ok-1", "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A read-only directory, as Go's module cache leaves them.
	ro := filepath.Join(dir, "gomod", "x")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "f"), []byte("x"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	left, err := check(dir, map[string]string{"ok-*": "the test's reason"}, outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || !strings.HasPrefix(left[0], "gomod ") || !strings.HasPrefix(left[1], "weft-console-bin-123 ") || !strings.Contains(left[1], "3.0 MB (directory, 1 files)") {
		t.Errorf("left = %q, want gomod and weft-console-bin-123 (3.0 MB, 1 file)", left)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there (%v)", dir, err)
	}
	// The documented exception is moved out, whole, not removed.
	if _, err := os.Stat(filepath.Join(outside, "ok-1", "logs")); err != nil {
		t.Errorf("the kept entry was not moved out: %v", err)
	}
	// Checked again (the task's deferred check after its last command's):
	// nothing.
	if left, err := check(dir, nil, outside); err != nil || len(left) != 0 {
		t.Errorf("check of a removed directory: %q, %v", left, err)
	}
}
