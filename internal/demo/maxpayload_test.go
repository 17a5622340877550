package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weftrun/weft/internal/demo"
)

// weft dev on an external server left at the NATS default max_payload
// (1 MiB, below the 8 MiB weft needs) warns at startup, naming the setting.
func TestStartupWarnsAboutSmallMaxPayload(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rctx, stop := context.WithCancel(ctx)
	ready := make(chan struct{}, 1)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(rctx, demo.Options{NATSURL: s.ClientURL(), Stdout: &out, Ready: func(string) { ready <- struct{}{} }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("demo.Run: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("demo.Run: %v", err)
	}
	if o := out.String(); !strings.Contains(o, "warning:") || !strings.Contains(o, "max_payload is 1048576 bytes") {
		t.Fatalf("no max_payload warning at startup:\n%s", o)
	}
}
