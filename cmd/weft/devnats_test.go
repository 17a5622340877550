package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/internal/syncbuf"
)

// The first hour, on a fresh clone with Go's build cache in a folder of
// its own (GOCACHE set, as many CI systems and Nix do): go run runs the
// binary it caches under that GOCACHE, whose path has nothing of
// "go-build" in it; weft dev must still say to use go run in the
// checkout. The test binary, copied to where go run caches a binary (a
// folder of the cache, whatever its name), is the weft dev of that run.
func TestFirstHour_GoRunUnderACustomGOCACHEPrintsGoRunSteps(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("go is not on PATH: go run's cache is where go env says")
	}
	cache := filepath.Join(t.TempDir(), "cache") // any name
	exe := filepath.Join(cache, "3f", "3f0c9d2e-d", "weft")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "dev", "--listen", "0", "--data", t.TempDir(), "--console", "")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "WEFT_TEST_AS_WEFT=1", "GOCACHE="+cache, "NATS_URL=", "WEFT_MODEL=", "WEFT_LISTEN=")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
	})
	for deadline := time.Now().Add(90 * time.Second); !strings.Contains(out.String(), "What the runs do is printed here"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("weft dev did not print its steps:\n%s", out)
		}
	}
	run := "go run ./cmd/weft"
	if tags := buildTags(); tags != "" {
		run = "go run -tags " + tags + " ./cmd/weft"
	}
	s := out.String()
	for _, want := range []string{"Try it (another terminal, in " + root + "):", "\n  " + run + " start payment-desk \"pay invoice INV-7\" --run pay-7 "} {
		if !strings.Contains(s, want) {
			t.Errorf("weft dev run from go run's cache under GOCACHE=%s does not print %q:\n%s", cache, want, s)
		}
	}
}

// The first hour, second terminal: the printed steps export NATS_URL
// there; a weft dev started in that terminal still runs its own embedded
// server, on the --listen it was given, and says at once that it does not
// use NATS_URL (docs/cli.md: only --nats runs the demo on another server).
func TestFirstHour_DevWithNATS_URLExportedStartsItsOwnServerAndSaysSo(t *testing.T) {
	other := natstest.Start(t)
	t.Setenv("NATS_URL", other.URL)
	t.Setenv("WEFT_MODEL", "")
	out, url := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir(), "--console", "")
	s := out.String()
	if url == other.URL || !strings.Contains(s, "Weft dev is running: embedded NATS at ") {
		t.Errorf("weft dev with NATS_URL=%s exported did not start its own server:\n%s", other.URL, s)
	}
	if want := "NATS_URL=" + other.URL + " is set: weft dev starts its own server all the same (--nats " + other.URL + " runs the demo against that one instead).\n"; !strings.Contains(s, want) {
		t.Errorf("weft dev does not say it leaves NATS_URL alone (%q):\n%s", want, s)
	}
}

// With --nats, the server flags of the embedded one are a bad command line
// (exit 2), not silently ignored; and a --nats server that does not answer
// is exit 3 (NATS unavailable, as the help says), at once, before anything
// starts.
func TestFirstHour_DevNATSFlagSaysWhatItCannotDo(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("WEFT_MODEL", "")
	gone := natstest.Start(t)
	gone.Stop()
	code, out, errs := cli(t, "--nats", gone.URL, "dev", "--listen", "4223")
	if code != exitUsage || !strings.Contains(errs, "--listen, --data and --secure set up the embedded server; --nats "+gone.URL) {
		t.Errorf("dev --nats with --listen: exit %d, want %d:\n%s%s", code, exitUsage, out, errs)
	}
	code, out, errs = cli(t, "dev", "--nats", gone.URL, "--console", "", "--timeout", "2s")
	if code != exitUnavailable || !strings.Contains(errs, "connect to "+gone.URL) || strings.Contains(out, "Weft dev is running") {
		t.Errorf("dev --nats to a server that is gone: exit %d, want %d:\n%s%s", code, exitUnavailable, out, errs)
	}
}

// The first hour, in a folder whose go.mod asks for a Go newer than the
// one on PATH (GOTOOLCHAIN=auto, the default): weft dev asks go env where
// go run caches binaries with GOTOOLCHAIN=local, so that it neither
// downloads a toolchain before printing anything nor, when none can be
// had, misses that it was started by go run. Before, go env tried to
// download go1.99.0 and failed, and weft dev printed this binary's path
// instead of the go run steps.
func TestFirstHour_GoRunBuiltAsksGoEnvWithTheLocalToolchain(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatal("go is not on PATH: go run's cache is where go env says")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module x\n\ngo 1.99\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cache := filepath.Join(t.TempDir(), "cache")
	t.Setenv("GOCACHE", cache)
	t.Setenv("GOTOOLCHAIN", "auto")
	t.Setenv("GOPROXY", "off") // no toolchain can be downloaded
	if !goRunBuilt(filepath.Join(cache, "3f", "3f0c9d2e-d", "weft")) {
		t.Fatal("a binary under GOCACHE was not seen as go run's")
	}
}
