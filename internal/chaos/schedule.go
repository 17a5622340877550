package chaos

import (
	"context"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/weftrun/weft/eventlog"
)

// A fault is one kind of injected failure with its weight in the schedule.
type fault struct {
	role   string // nats, runner, worker, projector
	action string // SIGKILL, SIGTERM, SIGSTOP, or for runners kill-after-append, stop-after-append
	weight int
}

// faults is the schedule's menu. A nats-server kill is about one fault in
// twelve, so a long run of 2,000 faults kills the server well over 100
// times.
var faults = []fault{
	{"runner", "SIGKILL", 14}, {"runner", "SIGTERM", 6}, {"runner", "SIGSTOP", 8},
	{"runner", "kill-after-append", 8}, {"runner", "stop-after-append", 4},
	{"worker", "SIGKILL", 8}, {"worker", "SIGTERM", 3}, {"worker", "SIGSTOP", 5},
	{"projector", "SIGKILL", 4}, {"projector", "SIGTERM", 2}, {"projector", "SIGSTOP", 2},
	{"nats", "SIGKILL", 8}, {"nats", "SIGTERM", 2}, {"nats", "SIGSTOP", 3},
}

// uniform draws a duration in [lo, hi).
func uniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// schedule injects seeded faults until ctx ends. Every draw is made
// whether or not the fault can be applied (its target may be down), so the
// sequence of decisions depends on the seed alone.
func (h *harness) schedule(ctx context.Context) {
	r := h.rng(2)
	total := 0
	for _, f := range faults {
		total += f.weight
	}
	if len(h.nodes) > 1 {
		go h.nodeKills(ctx)
	}
	for {
		wait := max(time.Duration(r.ExpFloat64()*float64(h.cfg.FaultEvery)), 20*time.Millisecond)
		n := r.IntN(total)
		var f fault
		for _, f = range faults {
			if n < f.weight {
				break
			}
			n -= f.weight
		}
		target := r.IntN(12)
		pause := uniform(r, 200*time.Millisecond, 3*time.Second)
		restart := uniform(r, 100*time.Millisecond, 1500*time.Millisecond)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		h.inject(ctx, f, target, pause, restart)
	}
}

func (h *harness) targets(role string) []*part {
	switch role {
	case "nats":
		return h.nodes
	case "runner":
		return h.runners
	case "worker":
		return h.workers
	}
	return []*part{h.projector}
}

func (h *harness) inject(ctx context.Context, f fault, target int, pause, restart time.Duration) {
	ps := h.targets(f.role)
	p := ps[target%len(ps)]
	kind := f.role + " " + f.action
	if f.role == "nats" {
		// On a cluster only one node is down at a time (a quorum stays up)
		// and the stream leader is the target every other time.
		for _, n := range h.nodes {
			if !n.up() {
				return
			}
		}
		if len(h.nodes) > 1 {
			if leader := h.leader(ctx); leader != nil && target%2 == 0 {
				p, kind = leader, kind+" leader"
			}
		}
		restart = restart / 2
	}
	switch f.action {
	case "SIGKILL":
		var k *runnerKill
		if f.role == "runner" {
			k = h.noteRunnerKill(ctx, p)
		}
		if _, ok := p.signal(syscall.SIGKILL, true, restart); ok {
			h.killed(k)
			h.fault(kind)
			h.logf("%s %s", kind, p.name)
		}
	case "SIGTERM":
		pr, ok := p.signal(syscall.SIGTERM, true, restart)
		if !ok {
			return
		}
		h.fault(kind)
		h.logf("%s %s", kind, p.name)
		go h.watchDrain(p, pr)
	case "SIGSTOP":
		if _, ok := p.signal(syscall.SIGSTOP, false, 0); ok {
			h.fault(kind)
			h.logf("%s %s for %s", kind, p.name, pause)
			time.AfterFunc(pause, p.resume)
		}
	case "kill-after-append", "stop-after-append":
		// Only a runner that installed its handler may be sent SIGUSR1 or
		// SIGUSR2 (their default action ends the process); the next one is
		// a process that started meanwhile, which is then spared this
		// fault (the signal races its start at worst, as a kill does).
		if pr := p.running(); pr == nil || !pr.armed() {
			return
		}
	}
	switch f.action {
	case "kill-after-append":
		// Counted when the runner kills itself (harness.exited).
		if _, ok := p.signal(syscall.SIGUSR1, false, 0); ok {
			h.logf("armed %s %s", kind, p.name)
		}
	case "stop-after-append":
		// Counted from the runner's ack ledger ("self SIGSTOP").
		if _, ok := p.signal(syscall.SIGUSR2, false, 0); ok {
			h.logf("armed %s %s for %s", kind, p.name, pause)
			time.AfterFunc(armWindow+pause, p.resume)
		}
	}
}

// A SIGTERMed runner drains within 5 s; one that takes over slowDrain to
// exit is noted, one that takes drainLimit is killed.
const (
	slowDrain  = 8 * time.Second
	drainLimit = 20 * time.Second
)

func (h *harness) watchDrain(p *part, pr *proc) {
	sent := time.Now()
	select {
	case <-pr.done:
		if d := time.Since(sent); d > slowDrain {
			h.notef("%s took %s to exit after SIGTERM", p.name, d.Round(100*time.Millisecond))
		}
	case <-time.After(drainLimit):
		h.notef("%s did not exit within %s of SIGTERM; killed", p.name, drainLimit)
		_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
	}
}

// nodeKills is the cluster's scripted part of the schedule: a third of
// the way into the fault phase the leader of the event log stream is
// SIGKILLed, two thirds of the way another node (the new leader when it
// is another node), each started again a second later.
func (h *harness) nodeKills(ctx context.Context) {
	var first *part
	for i := 1; i <= 2; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(h.faultStart.Add(h.cfg.Duration * time.Duration(i) / 3))):
		}
		for {
			all := true
			for _, n := range h.nodes {
				all = all && n.up()
			}
			if all || ctx.Err() != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		p := h.leader(ctx)
		if p == nil || p == first {
			for _, n := range h.nodes {
				if n != first {
					p = n
					break
				}
			}
		}
		if _, ok := p.signal(syscall.SIGKILL, true, time.Second); ok {
			h.fault("nats SIGKILL leader (scripted)")
			h.logf("nats SIGKILL leader (scripted) %s", p.name)
		}
		first = p
	}
}

// leader is the node that leads the event log stream, nil when unknown.
func (h *harness) leader(ctx context.Context) *part {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := h.js.Stream(cctx, eventlog.Stream)
	if err != nil {
		return nil
	}
	info := s.CachedInfo()
	if info == nil || info.Cluster == nil {
		return nil
	}
	for _, n := range h.nodes {
		if n.name == info.Cluster.Leader {
			return n
		}
	}
	return nil
}
