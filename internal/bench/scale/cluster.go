package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/loopport"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// servers is the NATS side of one phase: an embedded server (one node) or
// nats-server subprocesses routed into a cluster on loopback, every asset
// provisioned with as many replicas as nodes.
type servers struct {
	nodes []*proc
	srv   *natsserver.Server
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
}

// startServers starts n nodes under h.dir/<phase> and provisions them.
func (h *harness) startServers(ctx context.Context, phase string, n int) (*servers, error) {
	s := &servers{}
	dir := filepath.Join(h.dir, phase)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if n <= 1 {
		srv, err := natsserver.NewServer(&natsserver.Options{
			Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: dir,
			MaxPayload: natsnode.MaxPayload, NoSigs: true, NoLog: true,
		})
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			srv.Shutdown()
			return nil, errors.New("embedded server not ready")
		}
		s.srv, s.url = srv, srv.ClientURL()
	} else {
		ports, err := loopport.Free(2 * n)
		if err != nil {
			return nil, err
		}
		var urls, routes []string
		for i := range n {
			urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
		}
		s.url = strings.Join(urls, ",")
		for i := range n {
			name := fmt.Sprintf("%s-nats-%d", phase, i+1)
			var b strings.Builder
			fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nmax_payload: 8MB\n", name, ports[i])
			fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", filepath.Join(dir, name))
			fmt.Fprintf(&b, "cluster {\n  name: scale\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", ports[n+i], strings.Join(routes, ", "))
			conf := filepath.Join(dir, name+".conf")
			if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
				return nil, err
			}
			p, err := h.spawn(name, childConfig{Role: "nats", Conf: conf})
			if err != nil {
				s.close()
				return nil, err
			}
			s.nodes = append(s.nodes, p)
		}
	}
	nc, err := nats.Connect(s.url, nats.Name("weft-scale"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		s.close()
		return nil, err
	}
	s.nc = nc
	s.js, _ = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = runner.Provision(pctx, s.js, h.cfg.Lease, runner.WithReplicas(max(1, n)), runner.WithAssets(projector.Assets()...))
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			s.close()
			return nil, fmt.Errorf("provision %d node(s): %w", n, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return s, nil
}

func (s *servers) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	for _, p := range s.nodes {
		p.term(10 * time.Second)
	}
}
