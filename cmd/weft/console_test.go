package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/syncbuf"
)

var consoleURL = regexp.MustCompile(`Console: (http://[^\s]+)`)

// weft dev prints the console's address, and weft console serves the same
// pages against the dev server's NATS URL (the public APIs only).
func TestConsoleCommandServesThePages(t *testing.T) {
	out, natsURL := startDevCLI(t, "dev", "--listen", "0", "--data", t.TempDir(), "--console", "127.0.0.1:0")
	if m := consoleURL.FindStringSubmatch(out.String()); m == nil {
		t.Fatalf("weft dev printed no console address:\n%s", out)
	}
	cout, cerrs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--nats", strings.Replace(natsURL, "nats://", "nats://user:pw@", 1), "console", "--listen", "127.0.0.1:0"}, cout, cerrs)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("weft console: %v\n%s", err, cerrs)
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	var m []string
	for m == nil && time.Now().Before(deadline) {
		m = consoleURL.FindStringSubmatch(cout.String())
		time.Sleep(20 * time.Millisecond)
	}
	if m == nil {
		t.Fatalf("weft console printed no address:\n%s%s", cout, cerrs)
	}
	if strings.Contains(cout.String(), "pw@") {
		t.Errorf("the NATS password is printed: %s", cout)
	}
	for _, p := range []string{"/", "/runs"} {
		resp, err := http.Get(m[1] + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "Weft console") {
			t.Errorf("%s: status %d\n%s", p, resp.StatusCode, b)
		}
	}
}
