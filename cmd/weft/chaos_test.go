package main

import (
	"strings"
	"testing"
)

// TestChaosCommandLine: `weft chaos` refuses a bad --sync-interval or --seeds as a
// bad command line (exit 2, docs/cli.md) before it starts any process.
func TestChaosCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--sync-interval", "sometimes"},
		{"chaos", "--seeds", "1,two"},
		{"chaos", "extra"},
	} {
		code, out, errs := cli(t, args...)
		if code != exitUsage || out != "" {
			t.Errorf("weft %s: exit %d, stdout %q, stderr %q; want exit 2 and nothing run", strings.Join(args, " "), code, out, errs)
		}
	}
}
