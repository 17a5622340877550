package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/bench"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/runner"
)

// weftSystem is Weft: one runner with its in-process worker, and its
// clients, in this process; the server either embedded in this process
// (file storage, in-process connections) or external (a nats-server
// process on loopback, see natsMain).
type weftSystem struct {
	srv    *natsserver.Server // nil with an external server
	ext    *exec.Cmd          // the external server
	nc     *nats.Conn         // the clients' connection
	rnc    *nats.Conn         // the runner's
	cancel context.CancelFunc
	done   chan error
	client *api.Client

	mu    sync.Mutex
	waits map[string]chan struct{}
}

// startWeft starts Weft with the embedded server, or with an external one
// when external; syncAlways is the stream's sync_interval: always (an
// fsync before every ack) and the runner with group commit.
func startWeft(ctx context.Context, dir string, external, syncAlways bool) (system, error) {
	w := &weftSystem{waits: map[string]chan struct{}{}, cancel: func() {}}
	var err error
	if external {
		err = w.startExternal(ctx, dir, syncAlways)
	} else {
		err = w.startEmbedded(dir, syncAlways)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	js, _ := jetstream.New(w.rnc)
	if err := runner.Provision(ctx, js, runner.DefaultLease); err != nil {
		w.close()
		return nil, err
	}
	a, err := bench.StepsAgent("peers-steps")
	if err != nil {
		w.close()
		return nil, err
	}
	var ropts []runner.Option
	if syncAlways {
		// As weft dev and weft bench do when their server syncs always:
		// one fsync for many runs' decisions when 16 or more wait at once
		// (docs/adr/0025-group-commit.md); at an interval it costs more
		// than it saves, so weft and weft-ext run without it.
		ropts = append(ropts, runner.WithGroupCommit())
	}
	r, err := runner.New(w.rnc, js, []*agent.Agent{a}, ropts...)
	if err != nil {
		w.close()
		return nil, err
	}
	if _, err := w.nc.Subscribe("weft.ev.*.events", w.on); err != nil {
		w.close()
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

func (w *weftSystem) startEmbedded(dir string, syncAlways bool) error {
	// As weft dev and weft bench do when they embed the server
	// (docs/adr/0042-procs-for-an-embedded-server.md): this child process
	// measures only this system.
	natsnode.EmbeddedProcs()
	srv, err := natsserver.NewServer(&natsserver.Options{JetStream: true, StoreDir: dir, DontListen: true, NoSigs: true, NoLog: true,
		MaxPayload: natsnode.MaxPayload, SyncAlways: syncAlways})
	if err != nil {
		return err
	}
	w.srv = srv
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("nats-server not ready")
	}
	if w.nc, err = nats.Connect("", nats.InProcessServer(srv)); err != nil {
		return err
	}
	w.rnc, err = nats.Connect("", nats.InProcessServer(srv))
	return err
}

// envNATSConf makes this program a nats-server process (natsMain) serving
// the configuration file the variable names.
const envNATSConf = "WEFT_PEERS_NATS_CONF"

func (w *weftSystem) startExternal(ctx context.Context, dir string, syncAlways bool) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	conf := natsConf(port, filepath.Join(dir, "js"), syncAlways)
	cf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o600); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	w.ext = exec.Command(self)
	w.ext.Env = append(os.Environ(), envNATSConf+"="+cf)
	w.ext.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the measurement
	w.ext.Stdout, w.ext.Stderr = os.Stderr, os.Stderr
	if err := w.ext.Start(); err != nil {
		w.ext = nil
		return err
	}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if w.nc, err = nats.Connect(url); err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("external nats-server: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	w.rnc, err = nats.Connect(url)
	return err
}

// natsConf is the external server's configuration file.
func natsConf(port int, store string, syncAlways bool) string {
	sync := ""
	if syncAlways {
		sync = "  sync_interval: always\n"
	}
	return fmt.Sprintf("listen: 127.0.0.1:%d\nmax_payload: %d\njetstream {\n  store_dir: %q\n%s}\n", port, natsnode.MaxPayload, store, sync)
}

// natsMain runs this process as the external nats-server: the server of
// the nats-server module in go.mod, from the configuration file conf
// (what the nats-server binary of that version does with -c conf), until
// SIGTERM.
func natsMain(conf string) error {
	opts, err := natsserver.ProcessConfigFile(conf)
	if err != nil {
		return err
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		return err
	}
	go srv.Start()
	if !srv.ReadyForConnections(time.Minute) {
		return fmt.Errorf("nats-server not ready for connections")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	srv.Shutdown()
	srv.WaitForShutdown()
	return nil
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

func (w *weftSystem) pids() []int {
	if w.ext == nil {
		return nil
	}
	return []int{w.ext.Process.Pid}
}

func (w *weftSystem) close() {
	w.cancel()
	if w.done != nil {
		<-w.done
	}
	if w.nc != nil {
		w.nc.Close()
	}
	if w.rnc != nil {
		w.rnc.Close()
	}
	if w.srv != nil {
		w.srv.Shutdown()
		w.srv.WaitForShutdown()
	}
	if w.ext != nil {
		_ = w.ext.Process.Signal(syscall.SIGTERM)
		_ = w.ext.Wait()
	}
}
