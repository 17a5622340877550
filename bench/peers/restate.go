package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	restate "github.com/restatedev/sdk-go"
	"github.com/restatedev/sdk-go/server"
)

// restateSystem is a Restate server (the npm package's binary, default
// durability: RocksDB WAL fsync on) and a Go SDK service in this process.
type restateSystem struct {
	cmd     *exec.Cmd
	cancel  context.CancelFunc
	ingress string
	http    *http.Client
}

// Bench is the Restate service: Run does steps durable steps.
type Bench struct{}

// Run runs steps instant functions, each journaled with restate.Run.
func (Bench) Run(ctx restate.Context, steps int) (string, error) {
	for i := range steps {
		if _, err := restate.Run(ctx, func(restate.RunContext) (int, error) { return i, nil }); err != nil {
			return "", err
		}
	}
	return "done", nil
}

func restateBinary() (string, error) {
	p := filepath.Join("node", "node_modules", "@restatedev", "restate-server-linux-x64", "bin", "restate-server")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("restate-server %w: run npm ci in bench/peers/node", errNotFound)
	}
	return filepath.Abs(p)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startRestate(ctx context.Context, dir string) (system, error) {
	bin, err := restateBinary()
	if err != nil {
		return nil, err
	}
	var ports [4]int
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf("bind-address = \"127.0.0.1:%d\"\nadvertised-address = \"http://127.0.0.1:%d\"\nbase-dir = %q\ndisable-telemetry = true\nlog-filter = \"warn\"\n\n[admin]\nbind-address = \"127.0.0.1:%d\"\ndisable-web-ui = true\n\n[ingress]\nbind-address = \"127.0.0.1:%d\"\n",
		ports[0], ports[0], filepath.Join(dir, "data"), ports[1], ports[2])
	if peerOpts.restatePartitions > 0 {
		conf = fmt.Sprintf("default-num-partitions = %d\n", peerOpts.restatePartitions) + conf
	}
	cfg := filepath.Join(dir, "restate.toml")
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 128}
	if peerOpts.restateH2C {
		// HTTP/2 without TLS (prior knowledge): the 64 clients' calls
		// share one connection instead of one connection each.
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	s := &restateSystem{ingress: fmt.Sprintf("http://127.0.0.1:%d", ports[2]), http: &http.Client{Transport: tr}}
	s.cmd = exec.Command(bin, "--config-file", cfg, "--no-logo", "--listen-mode", "tcp")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the measurement
	// restate-server leaves a directory per partition invoker
	// (invoker-<ULID>) in its TMPDIR: give it one inside dir, removed with
	// it, not the machine's.
	tmp := filepath.Join(dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return nil, err
	}
	s.cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	log, _ := os.Create(filepath.Join(dir, "restate.log"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	svc := fmt.Sprintf("127.0.0.1:%d", ports[3])
	go func() {
		_ = server.NewRestate().WithLogger(slog.DiscardHandler, true).Bind(restate.Reflect(Bench{})).Start(sctx, svc)
	}()
	admin := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	deadline := time.Now().Add(2 * time.Minute)
	for {
		body := []byte(`{"uri":"http://` + svc + `"}`)
		resp, err := s.http.Post(admin+"/deployments", "application/json", bytes.NewReader(body))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				break
			}
			err = fmt.Errorf("register deployment: %s %s", resp.Status, b)
		}
		if time.Now().After(deadline) {
			s.close()
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Wait until the ingress serves the service.
	for {
		if err := s.run(ctx, "probe", 0); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.close()
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *restateSystem) run(ctx context.Context, _ string, steps int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.ingress+"/Bench/Run", bytes.NewReader([]byte(strconv.Itoa(steps))))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("restate: %s %s", resp.Status, b)
	}
	return nil
}

func (s *restateSystem) pids() []int {
	if s.cmd.Process == nil {
		return nil
	}
	return []int{s.cmd.Process.Pid}
}

func (s *restateSystem) close() {
	s.cancel()
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}
