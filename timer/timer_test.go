package timer_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/timer"
)

// startServer starts a real in-process nats-server with JetStream on a random
// loopback port and t.TempDir() storage.
func startServer(t testing.TB, dir string) (*server.Server, jetstream.JetStream) {
	t.Helper()
	token := natstest.Token(t)
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true, Authorization: token})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.Token(token))
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

// TestDisarmedTimersNeverFire: a timer disarmed before it is due, and
// every timer of a run disarmed with DisarmRun, never fires; a timer of
// another run still does (docs/adr/0014: a finished run is never woken by
// the timers that guarded its work).
func TestDisarmedTimersNeverFire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, js := startServer(t, t.TempDir())
	if err := timer.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	tm := timer.New(js)
	at := time.Now().Add(700 * time.Millisecond)
	for _, a := range []struct{ run, key string }{{"run-1", "t1"}, {"run-2", "t1"}, {"run-2", "t2"}, {"run-3", "t1"}} {
		if err := tm.Arm(ctx, a.run, a.key, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := tm.Disarm(ctx, "run-1", "t1"); err != nil {
		t.Fatal(err)
	}
	if err := tm.DisarmRun(ctx, "run-2"); err != nil {
		t.Fatal(err)
	}
	if err := tm.DisarmRun(ctx, "bad.run"); err == nil {
		t.Fatal("DisarmRun accepted a run id that is not one subject token")
	}
	got := make(chan timer.Fired, 10)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() {
		_ = tm.Consume(cctx, func(_ context.Context, f timer.Fired) error { got <- f; return nil })
	}()
	select {
	case f := <-got:
		if f.Run != "run-3" {
			t.Fatalf("fired %s/%s, want only run-3's timer", f.Run, f.Key)
		}
	case <-ctx.Done():
		t.Fatal("run-3's timer never fired")
	}
	// Schedules fire every 250 ms at most; give the disarmed ones time.
	select {
	case f := <-got:
		t.Fatalf("a disarmed timer fired: %s/%s", f.Run, f.Key)
	case <-time.After(1500 * time.Millisecond):
	}
}
