package scale

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// proc is a subprocess of the harness: its own process group (a signal
// reaches all of it), SIGKILLed with the harness (Pdeathsig), output
// appended to a log file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	pid     int
	started time.Time
	done    chan struct{}
	logPath string
}

// spawn starts the harness's program as a subprocess with cfg.
func (h *harness) spawn(name string, cfg childConfig) (*proc, error) {
	b, _ := json.Marshal(cfg)
	path, args := h.cfg.Exec()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), EnvChild+"="+string(b))
	logPath := h.dir + "/" + name + ".log"
	f, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, started: time.Now(), done: make(chan struct{}), logPath: logPath}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p.pid = cmd.Process.Pid
	go func() { _ = cmd.Wait(); close(p.done) }()
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	return p, nil
}

// kill SIGKILLs the process group and waits for the exit.
func (p *proc) kill() {
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM (a drain) and waits up to d, then kills.
func (p *proc) term(d time.Duration) {
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		p.kill()
	}
	_ = syscall.Kill(-p.pid, syscall.SIGKILL) // whatever else is left in its group
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the process's log, for errors.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// rss is the process's resident set (VmRSS), bytes.
func (p *proc) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat
// (100 on Linux).
const clockTick = 100

// cpu is the process's user + system CPU time so far.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: fields after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): utime is field 14, stime 15.
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTick
}

// runnerProc is a runner subprocess.
type runnerProc struct {
	*proc
	id string
	nc *nats.Conn
}

// stats asks the runner for its childStats.
func (r *runnerProc) stats(ctx context.Context) (childStats, error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := r.nc.RequestWithContext(sctx, statsSubject(r.id), nil)
	if err != nil {
		return childStats{}, err
	}
	var s childStats
	return s, json.Unmarshal(m.Data, &s)
}

// startRunner starts a runner subprocess with id and waits until it serves
// (or limit passes); it returns how long that took from the exec.
func (h *harness) startRunner(ctx context.Context, id string, limit time.Duration) (*runnerProc, time.Duration, error) {
	p, err := h.spawn(id, childConfig{Role: "runner", URL: h.url, ID: id, Partitions: h.cfg.Partitions, LeaseMS: h.cfg.Lease.Milliseconds()})
	if err != nil {
		return nil, 0, err
	}
	r := &runnerProc{proc: p, id: id, nc: h.nc}
	deadline := time.Now().Add(limit)
	for {
		if st, err := r.stats(ctx); err == nil && st.Ready != 0 {
			return r, time.Unix(0, st.Ready).Sub(p.started), nil
		}
		if p.exited() {
			return nil, 0, fmt.Errorf("runner %s exited: %s", id, p.tail())
		}
		if ctx.Err() != nil {
			p.kill()
			return nil, 0, ctx.Err()
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, 0, fmt.Errorf("runner %s did not serve within %s", id, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopAll kills every subprocess still running.
func (h *harness) stopAll() {
	h.mu.Lock()
	ps := append([]*proc(nil), h.procs...)
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Add(1)
		go func() { defer wg.Done(); p.term(5 * time.Second) }()
	}
	wg.Wait()
}
