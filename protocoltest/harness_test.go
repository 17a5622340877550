package protocoltest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/syncbuf"
)

// weftBin is the weft binary TestMain builds; natsBin the official nats CLI.
var weftBin, natsBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run builds weft into a temporary directory, runs the tests and removes
// the directory on every way out (os.Exit would skip a deferred removal).
func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "weft-protocoltest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	weftBin = filepath.Join(dir, "weft")
	build := exec.Command("go", "build", "-o", weftBin, "github.com/weftrun/weft/cmd/weft")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "protocoltest: build weft:", err)
		return 1
	}
	natsBin, err = findNats()
	if err != nil {
		// Never skip: the nats CLI is part of CI (.ci/run installs it).
		fmt.Fprintln(os.Stderr, "protocoltest:", err)
		return 1
	}
	return m.Run()
}

// findNats finds the nats CLI on PATH or in the Go bin directory where
// `go install github.com/nats-io/natscli/nats@v0.5.0` puts it.
func findNats() (string, error) {
	if p, err := exec.LookPath("nats"); err == nil {
		return p, nil
	}
	var dirs []string
	if gobin := os.Getenv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	name := "nats"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("the nats CLI is not installed: go install github.com/nats-io/natscli/nats@v0.5.0")
}

// devURL finds the embedded server's URL in weft dev's startup lines.
var devURL = regexp.MustCompile(`Weft dev is running: embedded NATS at (nats://[^,\s]+),`)

// dev is a running `weft dev`.
type dev struct {
	url string
	out *syncbuf.Buffer
}

// startDev runs `weft dev args...` on a port the system picks (--listen 0)
// with its store in a temp dir, reads the server's URL from its startup
// lines and waits until its services answer; it stops it (SIGTERM) on
// cleanup. A port read free here and given to --listen could be taken by
// another test's server before weft dev bound it, and the nats CLI would
// have talked to that server until weft dev's exit was seen.
func startDev(t *testing.T, args ...string) *dev {
	t.Helper()
	d := &dev{out: &syncbuf.Buffer{}}
	cmd := exec.Command(weftBin, append([]string{"dev", "--listen", "0", "--data", t.TempDir()}, args...)...)
	cmd.Stdout, cmd.Stderr = d.out, d.out
	cmd.Env = append(os.Environ(), "NATS_URL=")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("weft dev output:\n%s", d.out)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for d.url == "" {
		select {
		case err := <-exited:
			t.Fatalf("weft dev exited: %v\n%s", err, d.out)
		default:
		}
		if m := devURL.FindStringSubmatch(d.out.String()); m != nil {
			d.url = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft dev never said where its server listens:\n%s", d.out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		select {
		case err := <-exited:
			t.Fatalf("weft dev exited: %v\n%s", err, d.out)
		default:
		}
		out, err := d.natsErr("micro", "ls")
		if err == nil && strings.Contains(out, "weft-query") && strings.Contains(out, "weft ") {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("weft dev services never answered: %s\n%s", out, d.out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// nats runs the nats CLI against the dev server and fails the test on error.
func (d *dev) nats(t *testing.T, args ...string) string {
	t.Helper()
	out, err := d.natsErr(args...)
	if err != nil {
		t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (d *dev) natsErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsBin, append([]string{"--server", d.url, "--no-context"}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	err := cmd.Run()
	return out.String(), err
}
