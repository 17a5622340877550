package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/runner"
)

// EnvChild is the environment variable that makes a program calling Child
// a subprocess of the scale harness: a nats-server node or a runner, as
// the variable's JSON says.
const EnvChild = "WEFT_SCALE_CHILD"

// childConfig is the value of EnvChild.
type childConfig struct {
	// Role is "nats" (a nats-server from Conf) or "runner".
	Role string `json:"role"`
	Conf string `json:"conf,omitempty"`
	// URL, ID, Partitions and LeaseMS configure a runner.
	URL        string `json:"url,omitempty"`
	ID         string `json:"id,omitempty"`
	Partitions int    `json:"partitions,omitempty"`
	LeaseMS    int64  `json:"lease_ms,omitempty"`
}

// statsSubject is where a runner subprocess answers with its childStats.
func statsSubject(id string) string { return "weft.scale.child." + id + ".stats" }

// childStats is a runner subprocess's answer on statsSubject.
type childStats struct {
	// Ready is when the runner first served (its liveness key written and
	// the command API answering), Unix nanoseconds; 0 while not yet.
	Ready int64 `json:"ready"`
	// Stats is runner.Stats.
	Stats      runner.Stats `json:"stats"`
	Goroutines int          `json:"goroutines"`
	// Heap is the live heap (runtime.MemStats.HeapAlloc), bytes, without
	// a collection forced: the parent reads RSS from /proc.
	Heap int64 `json:"heap"`
}

// Child runs this process as a scale subprocess when EnvChild is set, and
// then reports true with the error it stopped with (SIGTERM drains; the
// harness may SIGKILL it). Without EnvChild it returns false at once. A main
// that runs Run must call it first (cmd/weft does; so does the package's
// TestMain).
func Child() (bool, error) {
	v := os.Getenv(EnvChild)
	if v == "" {
		return false, nil
	}
	var c childConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return true, fmt.Errorf("scale child: %s: %w", EnvChild, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	switch c.Role {
	case "nats":
		return true, natsChild(ctx, c)
	case "runner":
		return true, runnerChild(ctx, c)
	}
	return true, fmt.Errorf("scale child: unknown role %q", c.Role)
}

// natsChild is a nats-server node, from its configuration file, until
// SIGTERM (a clean shutdown) or SIGKILL.
func natsChild(ctx context.Context, c childConfig) error {
	opts, err := natsserver.ProcessConfigFile(c.Conf)
	if err != nil {
		return err
	}
	opts.NoSigs = true
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return err
	}
	srv.ConfigureLogger()
	go srv.Start()
	if !srv.ReadyForConnections(time.Minute) {
		return errors.New("nats-server not ready for connections")
	}
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
}

// runnerChild is a runner serving the scale agent, answering statsSubject.
func runnerChild(ctx context.Context, c childConfig) error {
	nc, err := nats.Connect(c.URL, nats.Name("weft-scale-"+c.ID), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("scale child: %w", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ag, err := Agent()
	if err != nil {
		return err
	}
	opts := []runner.Option{runner.WithID(c.ID), runner.WithLease(time.Duration(c.LeaseMS) * time.Millisecond), runner.WithDrainWindow(2 * time.Second)}
	opts = append(opts, partitionOptions(c.Partitions)...)
	r, err := runner.New(nc, js, []*agent.Agent{ag}, opts...)
	if err != nil {
		return err
	}
	var ready atomic.Int64
	sub, err := nc.Subscribe(statsSubject(c.ID), func(m *nats.Msg) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b, _ := json.Marshal(childStats{Ready: ready.Load(), Stats: r.Stats(), Goroutines: runtime.NumGoroutine(), Heap: int64(ms.HeapAlloc)})
		_ = m.Respond(b)
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	go func() {
		if t, err := waitServing(ctx, nc, js, c.ID); err == nil {
			ready.Store(t)
		}
	}()
	return <-done
}

// waitServing waits until runner id's liveness key is written and the
// command API answers, and returns when (Unix nanoseconds).
func waitServing(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, id string) (int64, error) {
	client := api.NewClient(nc)
	for {
		if kv, err := js.KeyValue(ctx, runner.RunnersBucket); err == nil {
			if _, err := kv.Get(ctx, id); err == nil {
				if client.Ready(ctx) == nil {
					return time.Now().UnixNano(), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
