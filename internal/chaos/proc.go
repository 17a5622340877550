package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// part is one supervised process slot of the harness: a nats-server node,
// a runner, a worker or the projector. Like a service manager, the harness
// starts its process again whenever it exits (after a delay a fault may
// set), until the harness stops.
type part struct {
	h    *harness
	name string
	role string
	env  []string
	log  string

	mu       sync.Mutex
	cur      *proc
	paused   bool          // stopped with SIGSTOP by the schedule
	expected bool          // the schedule signalled the exit of cur
	delay    time.Duration // before the next start
	starts   int
	downAt   time.Time // when cur exited (zero while up)
	halted   bool      // stopped for good before the checks
}

// armed reports whether the process handles SIGUSR1 and SIGUSR2 (a runner
// whose ack ledger exists): sent earlier, they would end it.
func (pr *proc) armed() bool {
	_, err := os.Stat(pr.acks)
	return err == nil
}

// proc is one incarnation of a part.
type proc struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	done    chan struct{}
	state   *os.ProcessState
	// acks is a runner's ack ledger for this start; the runner creates it
	// once its SIGUSR1/SIGUSR2 handler is installed.
	acks string
}

// start starts the part's process: its own process group (so a signal
// reaches all of it and nothing is left behind), killed with the harness
// (Pdeathsig), output appended to the part's log.
func (p *part) start() (*proc, error) {
	f, err := os.OpenFile(p.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p.mu.Lock()
	p.starts++
	n := p.starts
	p.mu.Unlock()
	fmt.Fprintf(f, "=== %s start %d at %s\n", p.name, n, time.Now().Format(time.RFC3339Nano))
	cmd := p.command()
	cmd.Env = append(os.Environ(), p.env...)
	// Every process has its own id, as runners have by default (a random
	// one per start); with StableIDs a restarted part keeps its name.
	id := fmt.Sprintf("%s-%d", p.name, n)
	if p.h.cfg.StableIDs || p.role == "nats" {
		id = p.name
	}
	acks := filepath.Join(p.h.dir, "acks", fmt.Sprintf("%s.%d", p.name, n))
	cmd.Env = append(cmd.Env, EnvRole+"="+p.role, envID+"="+id, envAcks+"="+acks)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pr := &proc{cmd: cmd, pid: cmd.Process.Pid, started: time.Now(), done: make(chan struct{}), acks: acks}
	go func() {
		_ = cmd.Wait()
		pr.state = cmd.ProcessState
		close(pr.done)
	}()
	return pr, nil
}

// supervise keeps the part running until ctx ends, then kills its process
// group and waits for it.
func (p *part) supervise(ctx context.Context) {
	for {
		p.mu.Lock()
		halted := p.halted
		p.mu.Unlock()
		if halted {
			<-ctx.Done()
			return
		}
		pr, err := p.start()
		if err != nil {
			p.h.notef("%s: start: %v", p.name, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
				continue
			}
		}
		p.mu.Lock()
		if p.halted {
			p.mu.Unlock()
			_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
			<-pr.done
			<-ctx.Done()
			return
		}
		p.cur, p.paused, p.expected, p.downAt = pr, false, false, time.Time{}
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
			<-pr.done
			p.mu.Lock()
			p.cur = nil
			p.mu.Unlock()
			return
		case <-pr.done:
		}
		// Whatever else the process left in its group goes with it.
		_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
		p.mu.Lock()
		p.cur, p.paused, p.downAt = nil, false, time.Now()
		expected, delay, halted := p.expected, p.delay, p.halted
		p.delay = 0
		p.mu.Unlock()
		if halted {
			<-ctx.Done()
			return
		}
		if !expected {
			p.h.exited(p, pr)
		}
		if delay == 0 {
			delay = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// up reports whether the part's process runs and is not paused.
func (p *part) up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur != nil && !p.paused
}

// running returns the current process, nil while the part is down.
func (p *part) running() *proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// signal sends sig to the part's process group when it is up (and not
// paused, except for SIGKILL and SIGCONT). exits says the signal ends the
// process; restart is the delay before it is started again. It reports
// whether the signal was sent.
func (p *part) signal(sig syscall.Signal, exits bool, restart time.Duration) (*proc, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || (p.paused && sig != syscall.SIGKILL && sig != syscall.SIGCONT) {
		return nil, false
	}
	if exits {
		p.expected, p.delay = true, restart
	}
	if err := syscall.Kill(-p.cur.pid, sig); err != nil {
		return nil, false
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return p.cur, true
}

// resume continues a paused part.
func (p *part) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		_ = syscall.Kill(-p.cur.pid, syscall.SIGCONT)
	}
	p.paused = false
}

// halt stops the part for good: SIGKILL, and waits for the exit.
func (p *part) halt() {
	p.mu.Lock()
	p.halted, p.expected = true, true
	pr := p.cur
	p.mu.Unlock()
	if pr == nil {
		return
	}
	_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
	<-pr.done
}
