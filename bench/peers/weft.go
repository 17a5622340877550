package main

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/bench"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/runner"
)

// weftSystem is Weft with its server embedded in this process (file
// storage), one runner with its in-process worker.
type weftSystem struct {
	srv    *natsserver.Server
	nc     *nats.Conn // the clients' connection
	rnc    *nats.Conn // the runner's
	cancel context.CancelFunc
	done   chan error
	client *api.Client

	mu    sync.Mutex
	waits map[string]chan struct{}
}

func startWeft(ctx context.Context, dir string, syncAlways bool) (system, error) {
	srv, err := natsserver.NewServer(&natsserver.Options{JetStream: true, StoreDir: dir, DontListen: true, NoSigs: true, NoLog: true,
		MaxPayload: natsnode.MaxPayload, SyncAlways: syncAlways})
	if err != nil {
		return nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("nats-server not ready")
	}
	w := &weftSystem{srv: srv, waits: map[string]chan struct{}{}}
	if w.nc, err = nats.Connect("", nats.InProcessServer(srv)); err != nil {
		return nil, err
	}
	if w.rnc, err = nats.Connect("", nats.InProcessServer(srv)); err != nil {
		return nil, err
	}
	js, _ := jetstream.New(w.rnc)
	if err := runner.Provision(ctx, js, runner.DefaultLease); err != nil {
		return nil, err
	}
	a, err := bench.StepsAgent("peers-steps")
	if err != nil {
		return nil, err
	}
	r, err := runner.New(w.rnc, js, []*agent.Agent{a})
	if err != nil {
		return nil, err
	}
	if _, err := w.nc.Subscribe("weft.ev.*.events", w.on); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(context.Background())
	w.cancel, w.done = cancel, make(chan error, 1)
	go func() { w.done <- r.Run(rctx) }()
	w.client = api.NewClient(w.nc)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	return w, w.client.Ready(wctx)
}

func (w *weftSystem) on(m *nats.Msg) {
	if !bytes.Contains(m.Data, []byte(`"type":"run_finished"`)) {
		return
	}
	run := m.Header.Get("Weft-Run")
	w.mu.Lock()
	ch := w.waits[run]
	delete(w.waits, run)
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (w *weftSystem) run(ctx context.Context, id string, steps int) error {
	ch := make(chan struct{})
	w.mu.Lock()
	w.waits[id] = ch
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := w.client.Start(ctx, api.StartRequest{Run: id, Agent: "peers-steps", Input: fmt.Sprintf("steps=%d", steps)}); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("weft run %s not finished: %w", id, ctx.Err())
	}
}

func (w *weftSystem) pids() []int { return nil }

func (w *weftSystem) close() {
	w.cancel()
	<-w.done
	w.nc.Close()
	w.rnc.Close()
	w.srv.Shutdown()
	w.srv.WaitForShutdown()
}
