package main

import (
	"strings"
	"testing"
)

// TestSemantics8_WeftDevSyncsEveryWriteByDefault: weft dev's embedded
// server fsyncs every write before acknowledging it unless told otherwise,
// and its startup says which durability it runs with (as the running
// server reports it) and how to choose the other (docs/semantics.md §8,
// docs/reliability.md); WEFT_SYNC_INTERVAL or --sync-interval chooses the
// non-durable mode, and a value that is neither always nor an interval is
// a bad command line.
func TestSemantics8_WeftDevSyncsEveryWriteByDefault(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	t.Setenv("WEFT_SYNC_INTERVAL", "")
	out, _ := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir(), "--console", "")
	if want := "Durability: sync_interval always: the embedded server fsyncs every write before acknowledging it"; !strings.Contains(out.String(), want) {
		t.Errorf("startup does not say %q:\n%s", want, out)
	}
	if want := "Faster but not durable: --sync-interval 2m (or WEFT_SYNC_INTERVAL=2m)."; !strings.Contains(out.String(), want) {
		t.Errorf("startup does not say %q:\n%s", want, out)
	}

	t.Run("WEFT_SYNC_INTERVAL", func(t *testing.T) {
		t.Setenv("WEFT_SYNC_INTERVAL", "2m")
		out, _ := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir(), "--console", "")
		if want := "Durability: sync_interval 2m0s, NOT durable"; !strings.Contains(out.String(), want) {
			t.Errorf("startup does not say %q:\n%s", want, out)
		}
	})
	t.Run("--sync-interval", func(t *testing.T) {
		t.Setenv("WEFT_SYNC_INTERVAL", "2m")
		out, _ := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir(), "--console", "", "--sync-interval", "always")
		if want := "Durability: sync_interval always:"; !strings.Contains(out.String(), want) {
			t.Errorf("startup does not say %q:\n%s", want, out)
		}
	})
	t.Run("with --nats", func(t *testing.T) {
		code, out, errs := cli(t, "--nats", "nats://127.0.0.1:1", "dev", "--sync-interval", "2m")
		if code != exitUsage || !strings.Contains(errs, "--sync-interval sets the embedded server's durability") {
			t.Errorf("exit %d, want %d naming --sync-interval:\n%s%s", code, exitUsage, out, errs)
		}
	})
	t.Run("bad", func(t *testing.T) {
		code, out, errs := cli(t, "dev", "--listen", "0", "--data", t.TempDir(), "--sync-interval", "sometimes")
		if code != exitUsage || !strings.Contains(errs, "--sync-interval") || strings.Contains(out, "Weft dev is running") {
			t.Errorf("exit %d, want %d naming --sync-interval:\n%s%s", code, exitUsage, out, errs)
		}
	})
}
