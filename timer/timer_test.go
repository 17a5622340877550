package timer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/timer"
)

// startServer starts a real in-process nats-server with JetStream on a random
// loopback port and t.TempDir() storage.
func startServer(t testing.TB, dir string) (*server.Server, jetstream.JetStream) {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close(); s.Shutdown(); s.WaitForShutdown() })
	return s, js
}

func TestTimerFiresAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, js := startServer(t, dir)
	if err := timer.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	tm := timer.New(js)
	at := time.Now().Add(1500 * time.Millisecond)
	if err := tm.Arm(ctx, "run-1", "expiry-1", at); err != nil {
		t.Fatal(err)
	}
	// Re-arming the same key replaces it; a second key fires on its own.
	if err := tm.Arm(ctx, "run-1", "expiry-1", at.Add(100*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := tm.Arm(ctx, "run-2", "timeout-1_c", at); err != nil {
		t.Fatal(err)
	}
	if err := tm.Arm(ctx, "bad.run", "k", at); err == nil {
		t.Fatal("Arm accepted a run id that is not one subject token")
	}
	// Restart the server before the timers are due: nothing is lost.
	s.Shutdown()
	s.WaitForShutdown()
	_, js = startServer(t, dir)
	tm = timer.New(js)

	got := make(chan timer.Fired, 10)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		_ = tm.Consume(cctx, func(_ context.Context, f timer.Fired) error { got <- f; return nil })
	}()
	seen := map[string]timer.Fired{}
	for len(seen) < 2 {
		select {
		case f := <-got:
			if _, dup := seen[f.Run+"/"+f.Key]; dup {
				t.Fatalf("timer %s/%s fired twice", f.Run, f.Key)
			}
			seen[f.Run+"/"+f.Key] = f
		case <-ctx.Done():
			t.Fatalf("timers did not fire after a restart; got %v", seen)
		}
	}
	if f := seen["run-1/expiry-1"]; !f.At.Equal(at.Add(100 * time.Millisecond).UTC()) {
		t.Fatalf("re-armed timer fired with at %v, want the replacement %v", f.At, at.Add(100*time.Millisecond))
	}
	if time.Now().Before(at) {
		t.Fatal("a timer fired before its time")
	}
	select {
	case f := <-got:
		t.Fatalf("unexpected extra firing %+v", f)
	case <-time.After(600 * time.Millisecond):
	}
}
