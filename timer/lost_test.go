package timer_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/timer"
)

// docs/semantics.md §8 (recovery: pending work is retried, never dropped):
// a server that restarts without the shared timer consumer (WEFT_TIMERS
// in memory here, its stream made again by its operator) says nothing to
// a running Consume, which pulled from nothing for ever: no firing
// reached a runner again, and the runs waiting on a timer waited for
// ever. Consume now finds the consumer gone and returns, and its caller
// (as runner's consumeTimers) starts it again, which makes the consumer.
func TestSemantics8_ConsumeEndsWhenTheServerLostItsConsumer(t *testing.T) {
	// The restarted server is on the same port, which another test's
	// server may take while it is down: the token makes nc refused there.
	token := natstest.Token(t)
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true, Authorization: token}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(s.ClientURL(), nats.Token(token), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ensure := func() error {
		cfg := timer.StreamConfig()
		cfg.Storage = jetstream.MemoryStorage
		st, err := js.CreateOrUpdateStream(context.Background(), cfg)
		if err != nil {
			return err
		}
		_, err = st.CreateOrUpdateConsumer(context.Background(), timer.ConsumerConfig())
		return err
	}
	if err := ensure(); err != nil {
		t.Fatal(err)
	}
	tm := timer.New(js)
	fired := make(chan timer.Fired, 10)
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan struct{})
	var (
		mu    sync.Mutex
		ended []error // what each Consume returned
	)
	go func() { // as runner's consumeTimers: started again when it returns
		defer close(consumed)
		for ctx.Err() == nil {
			err := tm.Consume(ctx, func(_ context.Context, f timer.Fired) error { fired <- f; return nil })
			mu.Lock()
			ended = append(ended, err)
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	if err := tm.Arm(context.Background(), "run-1", "k", time.Now()); err != nil {
		t.Fatal(err)
	}
	<-fired

	opts2 := *opts
	opts2.Port = s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	s2, err := server.NewServer(&opts2)
	if err != nil {
		t.Fatal(err)
	}
	go s2.Start()
	if !s2.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready after the restart")
	}
	defer func() { cancel(); <-consumed; nc.Close(); s2.Shutdown(); s2.WaitForShutdown() }()
	// The operator makes the stream again, not its consumer: the runners'
	// Consume does.
	for {
		cfg := timer.StreamConfig()
		cfg.Storage = jetstream.MemoryStorage
		if _, err := js.CreateOrUpdateStream(context.Background(), cfg); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for tm.Arm(context.Background(), "run-2", "k", time.Now()) != nil {
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case f := <-fired:
		if f.Run != "run-2" {
			t.Fatalf("fired %+v, want run-2", f)
		}
	case <-time.After(90 * time.Second): // a bound on a hang, not a timing assertion
		t.Fatal("a timer armed after the server lost the timer consumer never fired")
	}
	// The consume stopped for the loss says why (its caller logs it).
	mu.Lock()
	defer mu.Unlock()
	for _, err := range ended {
		if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, nats.ErrNoResponders) {
			return
		}
	}
	t.Fatalf("Consume returned %v: none names the missed heartbeat or the unanswered pull that found the consumer gone", ended)
}

// docs/semantics.md §8 (recovery): a timer consumer deleted while runners
// consume it (an operator) ends their Consume; started again, Consume
// bound the consumer only, failed for ever, and no timer fired until the
// next provisioning. It now makes the consumer again.
func TestSemantics8_ConsumeMakesADeletedConsumerAgain(t *testing.T) {
	_, js := startServer(t, t.TempDir())
	if err := timer.Ensure(context.Background(), js); err != nil {
		t.Fatal(err)
	}
	tm := timer.New(js)
	fired := make(chan timer.Fired, 10)
	ctx, cancel := context.WithCancel(context.Background())
	consumed := make(chan struct{})
	go func() { // as runner's consumeTimers: started again when it returns
		defer close(consumed)
		for ctx.Err() == nil {
			_ = tm.Consume(ctx, func(_ context.Context, f timer.Fired) error { fired <- f; return nil })
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	defer func() { cancel(); <-consumed }()
	if err := tm.Arm(context.Background(), "run-1", "k", time.Now()); err != nil {
		t.Fatal(err)
	}
	<-fired
	if err := js.DeleteConsumer(context.Background(), timer.Stream, timer.Consumer); err != nil {
		t.Fatal(err)
	}
	if err := tm.Arm(context.Background(), "run-2", "k", time.Now()); err != nil {
		t.Fatal(err)
	}
	// The consumer made again delivers the stream's firings from the
	// first (run-1's again: harmless, a timer is a wake-up).
	hang := time.After(60 * time.Second) // a bound on a hang, not a timing assertion
	for {
		select {
		case f := <-fired:
			if f.Run == "run-2" {
				return
			}
		case <-hang:
			t.Fatal("a timer armed after the timer consumer was deleted never fired")
		}
	}
}
