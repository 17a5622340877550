package runner

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/clock"
)

// TestSemantics8_ATakeoverThatKeepsFailingIsSaidAtWarn (docs/semantics.md
// §8: pending work is retried, never dropped — and a run whose takeover
// keeps failing is a stalled run an operator must see): the failed wakes of
// a run's driver entry are logged at Debug until they have kept failing
// for orphanWarnAfter, then at Warn with the entry's driver, how long and
// the last error, once per orphanWarnAfter; a wake that succeeds forgets
// the failures. On the ownership clock, a fake one here.
func TestSemantics8_ATakeoverThatKeepsFailingIsSaidAtWarn(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var buf bytes.Buffer
	r := &Runner{id: "me", lease: time.Second, log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})),
		partitionOwnership: partitionOwnership{clk: clk}}
	k := driverKey{driver: "runner-dead", revision: 7}
	cause := errors.New("run r1 is driven by runner runner-dead, which is alive; retry")
	warns := func() int { return strings.Count(buf.String(), "keeps failing") }

	r.noteOrphanFailing("r1", k, cause)
	clk.Advance(r.orphanWarnAfter() - time.Nanosecond)
	r.noteOrphanFailing("r1", k, cause)
	if n := warns(); n != 0 {
		t.Fatalf("%d warnings before the takeover kept failing for %s: %s", n, r.orphanWarnAfter(), buf.String())
	}
	clk.Advance(time.Nanosecond)
	r.noteOrphanFailing("r1", k, cause)
	if n := warns(); n != 1 || !strings.Contains(buf.String(), "driver=runner-dead") || !strings.Contains(buf.String(), "alive; retry") {
		t.Fatalf("after %s of failures: %d warnings, want 1 naming the driver and the error: %s", r.orphanWarnAfter(), n, buf.String())
	}
	clk.Advance(time.Second)
	r.noteOrphanFailing("r1", k, cause)
	if n := warns(); n != 1 {
		t.Fatalf("a second warning a second after the first: %s", buf.String())
	}
	clk.Advance(r.orphanWarnAfter())
	r.noteOrphanFailing("r1", k, cause)
	if n := warns(); n != 2 {
		t.Fatalf("%d warnings, want the second one orphanWarnAfter after the first: %s", n, buf.String())
	}
	// A wake that succeeded forgets the failures (takeOrphans deletes the
	// run's entry): the next failure starts a new count.
	r.orphanFail.Delete("r1")
	clk.Advance(r.orphanWarnAfter())
	r.noteOrphanFailing("r1", k, cause)
	if n := warns(); n != 2 {
		t.Fatalf("a first failure after a success warned: %s", buf.String())
	}
}
