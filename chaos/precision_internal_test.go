package chaos

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/weftrun/weft/runner"
)

// TestSemantics8_ClosingAnAttemptUnknownClosesAreReadFromTheRunnersLogs:
// the precision check (uncertain_without_start_or_claim) excuses exactly
// the actions a runner logged a close of with no known outcome, read from
// the parts' logs as a runner part writes them (slog's text format).
func TestSemantics8_ClosingAnAttemptUnknownClosesAreReadFromTheRunnersLogs(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "r1.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn})).With("runner", "r1-1")
	log.Warn(runner.CloseUnknown, "run", "c-7", "action", "1/call_1_1", "attempt", 1, "err", "context deadline exceeded")
	log.Warn("something else", "run", "c-8", "action", "1/call_1_1")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got := unknownCloses(dir)
	if len(got) != 1 || !got["c-7 1/call_1_1"] {
		t.Fatalf("unknown closes %v, want exactly c-7 1/call_1_1", got)
	}
}
