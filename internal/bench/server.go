package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// server is the NATS server a Run measures, and the process's connection.
type server struct {
	srv *natsserver.Server // nil for an external server
	dir string
	url string // for subprocesses
	nc  *nats.Conn
	js  jetstream.JetStream
	// sync: the embedded server syncs always (Config.SyncInterval 0);
	// every is its interval otherwise.
	sync  bool
	every time.Duration
}

// benchLease is the liveness lease of every runner of the bench.
const benchLease = time.Second

func startServer(ctx context.Context, cfg Config) (*server, error) {
	s := &server{sync: cfg.URL == "" && cfg.SyncInterval <= 0, every: cfg.SyncInterval}
	var opts []nats.Option
	if cfg.URL == "" {
		dir, err := os.MkdirTemp("", "weft-bench-")
		if err != nil {
			return nil, err
		}
		s.dir = dir
		srv, err := natsserver.NewServer(&natsserver.Options{
			Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: dir,
			MaxPayload: natsnode.MaxPayload, SyncAlways: s.sync, SyncInterval: s.every, NoSigs: true, NoLog: true,
		})
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("bench: embedded server: %w", err)
		}
		go srv.Start()
		if !srv.ReadyForConnections(10 * time.Second) {
			srv.Shutdown()
			os.RemoveAll(dir)
			return nil, errors.New("bench: embedded server not ready")
		}
		s.srv, s.url = srv, srv.ClientURL()
		opts = append(opts, nats.InProcessServer(srv))
	} else {
		s.url = cfg.URL
	}
	nc, err := s.connect(opts...)
	if err != nil {
		s.close()
		return nil, err
	}
	s.nc = nc
	s.js, _ = jetstream.New(nc)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := runner.Provision(pctx, s.js, benchLease, runner.WithAssets(projector.Assets()...)); err != nil {
		s.close()
		return nil, fmt.Errorf("bench: provision: %w", err)
	}
	return s, nil
}

// connect opens a connection to the server (in-process for the embedded
// one unless opts say otherwise).
func (s *server) connect(opts ...nats.Option) (*nats.Conn, error) {
	opts = append([]nats.Option{nats.Name("weft-bench"), nats.MaxReconnects(-1)}, opts...)
	nc, err := nats.Connect(s.url, opts...)
	if err != nil {
		return nil, &connectError{url: s.url, err: err}
	}
	return nc, nil
}

type connectError struct {
	url string
	err error
}

func (e *connectError) Error() string { return fmt.Sprintf("bench: connect to %s: %v", e.url, e.err) }
func (e *connectError) Unwrap() error { return e.err }

func (s *server) describe() string {
	if s.srv == nil {
		return "external " + s.url
	}
	d := "embedded nats-server " + natsserver.VERSION + ", file storage"
	if s.sync {
		return d + ", sync_interval always"
	}
	return d + ", sync_interval " + s.every.String() + " (not durable)"
}

func (s *server) close() {
	if s.nc != nil {
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// purge removes the messages of subject from stream.
func (s *server) purge(ctx context.Context, stream, subject string) error {
	st, err := s.js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	return st.Purge(ctx, jetstream.WithPurgeSubject(subject))
}
