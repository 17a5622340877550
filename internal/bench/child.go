package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/runner"
)

// EnvChild is the environment variable that makes a program calling Child
// a bench subprocess: a runner serving the bench's agents on the server
// the variable's JSON names.
const EnvChild = "WEFT_BENCH_CHILD"

// childConfig is the value of EnvChild.
type childConfig struct {
	URL  string `json:"url"`
	ID   string `json:"id"`
	Hang bool   `json:"hang"`
	// Partitions is the deployment's number of partitions: the child
	// notes when its runner owns that many (memStats.Owned).
	Partitions int `json:"partitions,omitempty"`
}

// memSubject is where a bench subprocess answers memory questions.
func memSubject(id string) string { return "weft.bench.child." + id + ".mem" }

// memStats is a subprocess's answer on memSubject, taken after a garbage
// collection unless the request's body is noGC.
type memStats struct {
	RSS        int64 `json:"rss"`  // resident set, bytes
	HWM        int64 `json:"hwm"`  // peak resident set, bytes
	Heap       int64 `json:"heap"` // live heap (after GC unless noGC), bytes
	Goroutines int   `json:"goroutines"`
	// Serving and Owned are the times from the runner's start (Run
	// called) until it served (heartbeat and command API) and until it
	// owned childConfig.Partitions partitions; 0 until then.
	Serving time.Duration `json:"serving"`
	Owned   time.Duration `json:"owned"`
	// Stats is the runner's runner.Stats.
	Stats runner.Stats `json:"stats"`
}

// noGC is the body of a memSubject request that asks for no garbage
// collection first (a poll that must not disturb the runner).
const noGC = "nogc"

// Child runs this process as a bench subprocess when EnvChild is set, and
// then reports true with the runner's error once it stopped (SIGTERM, or
// the bench's SIGKILL). Without EnvChild it returns false at once. Mains
// that run Run must call it first (cmd/weft's bench command does).
func Child() (bool, error) {
	v := os.Getenv(EnvChild)
	if v == "" {
		return false, nil
	}
	var c childConfig
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		return true, fmt.Errorf("bench child: %s: %w", EnvChild, err)
	}
	hang.Store(c.Hang)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nc, err := nats.Connect(c.URL, nats.Name("weft-bench-"+c.ID), nats.MaxReconnects(-1))
	if err != nil {
		return true, fmt.Errorf("bench child: %w", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ags, err := agents()
	if err != nil {
		return true, err
	}
	// Warnings go to stderr, whose tail the bench keeps (tailBuffer).
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := runner.New(nc, js, ags, runner.WithID(c.ID), runner.WithLease(benchLease), runner.WithDrainWindow(childDrain), runner.WithLogger(logger), runner.WithHeadKey(headKey()))
	if err != nil {
		return true, err
	}
	done := make(chan error, 1)
	started := time.Now()
	go func() { done <- r.Run(ctx) }()
	var owned atomic.Int64
	if c.Partitions > 0 {
		go func() {
			for ctx.Err() == nil && len(r.Stats().Partitions) < c.Partitions {
				time.Sleep(2 * time.Millisecond)
			}
			owned.Store(int64(time.Since(started)))
		}()
	}
	if err := waitReady(ctx, nc, js, c.ID); err != nil {
		return true, err
	}
	serving := time.Since(started)
	sub, err := nc.Subscribe(memSubject(c.ID), func(m *nats.Msg) {
		if string(m.Data) != noGC {
			runtime.GC()
			debug.FreeOSMemory()
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		rss, hwm := procStatus()
		b, _ := json.Marshal(memStats{RSS: rss, HWM: hwm, Heap: int64(ms.HeapAlloc), Goroutines: runtime.NumGoroutine(),
			Serving: serving, Owned: time.Duration(owned.Load()), Stats: r.Stats()})
		_ = m.Respond(b)
	})
	if err != nil {
		return true, err
	}
	defer sub.Unsubscribe()
	return true, <-done
}

// procStatus reads VmRSS and VmHWM of this process (Linux).
func procStatus() (rss, hwm int64) { return procStatusOf("self") }

func procStatusOf(pid string) (rss, hwm int64) {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// child is a running bench subprocess.
type child struct {
	id     string
	cmd    *exec.Cmd
	nc     *nats.Conn
	stderr *tailBuffer
	done   chan struct{}
}

// spawn starts a bench subprocess running a runner with id and waits until
// it answers.
func (b *bencher) spawn(ctx context.Context, id string, hangBodies bool) (*child, error) {
	return b.spawnWith(ctx, childConfig{ID: id, Hang: hangBodies})
}

// spawnWith is spawn with the whole childConfig (its URL is the bench's).
func (b *bencher) spawnWith(ctx context.Context, cc childConfig) (*child, error) {
	id := cc.ID
	path, args := "", []string(nil)
	if b.cfg.Exec != nil {
		path, args = b.cfg.Exec()
	} else {
		p, err := os.Executable()
		if err != nil {
			return nil, err
		}
		path = p
	}
	cc.URL = b.srv.url
	cfg, _ := json.Marshal(cc)
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), EnvChild+"="+string(cfg))
	c := &child{id: id, cmd: cmd, stderr: &tailBuffer{max: 4096}, done: make(chan struct{}), nc: b.srv.nc}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start subprocess %s: %w", path, err)
	}
	go func() { _ = cmd.Wait(); close(c.done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := c.poll(ctx); err == nil {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("subprocess %s exited: %s", id, strings.TrimSpace(c.stderr.String()))
		case <-ctx.Done():
			c.kill()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.kill()
			return nil, fmt.Errorf("subprocess %s did not answer within 2 minutes", id)
		}
	}
}

func (c *child) mem(ctx context.Context) (memStats, error) { return c.ask(ctx, nil) }

// poll is mem without the garbage collection.
func (c *child) poll(ctx context.Context) (memStats, error) { return c.ask(ctx, []byte(noGC)) }

func (c *child) ask(ctx context.Context, body []byte) (memStats, error) {
	mctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	m, err := c.nc.RequestWithContext(mctx, memSubject(c.id), body)
	if err != nil {
		return memStats{}, err
	}
	var s memStats
	return s, json.Unmarshal(m.Data, &s)
}

// rss reads the subprocess's resident set without asking it.
func (c *child) rss() (rss, hwm int64) {
	if c.cmd.Process == nil {
		return 0, 0
	}
	return procStatusOf(strconv.Itoa(c.cmd.Process.Pid))
}

// term SIGTERMs the subprocess (its runner drains and releases its
// partitions) and waits until it is gone, SIGKILLing it after limit.
func (c *child) term(limit time.Duration) {
	c.signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(limit):
		c.kill()
	}
}

// signal sends sig to the subprocess.
func (c *child) signal(sig syscall.Signal) {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

// kill SIGKILLs the subprocess and waits until it is gone.
func (c *child) kill() {
	c.signal(syscall.SIGKILL)
	<-c.done
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// waitReady waits until the runner id heartbeats and the command API
// answers.
func waitReady(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, id string) error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if kv, err := js.KeyValue(rctx, runner.RunnersBucket); err == nil {
			if _, err := kv.Get(rctx, id); err == nil {
				if _, err := nc.RequestWithContext(rctx, "$SRV.PING.weft", nil); err == nil {
					return nil
				}
			}
		}
		select {
		case <-rctx.Done():
			return errors.New("bench child: the runner did not serve within a minute")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
