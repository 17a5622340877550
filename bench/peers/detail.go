package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// detailer is a system that can say, with -detail, what its server did
// during the 64-client window (DBOS: PostgreSQL's statements and WAL
// flushes per run).
type detailer interface {
	beginDetail(ctx context.Context) error
	detail(ctx context.Context, runs int) string
}

// threadCPU is the CPU time so far of every thread of pids and of their
// children, by thread name (digits dropped: "rs:worker-3" and
// "rs:worker-7" are one group; PostgreSQL's processes by their role).
func threadCPU(pids []int) map[string]time.Duration {
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	out := map[string]time.Duration{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, _, ok := procStat(pid)
		if !ok || !(want[pid] || want[ppid]) {
			continue
		}
		role := pgRole(pid)
		tasks, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "task", t.Name(), "stat"))
			if err != nil {
				continue
			}
			s := string(b)
			name := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
			if role != "" {
				name = role
			}
			f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
			if len(f) < 15 {
				continue
			}
			tick := func(i int) time.Duration {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				return time.Duration(v) * clockTick
			}
			// A thread's utime and stime are its own; cutime and cstime
			// (PostgreSQL's ended backends) are the process's and count
			// once, under its main thread.
			user, sys := tick(11), tick(12)
			if t.Name() == e.Name() {
				user, sys = user+tick(13), sys+tick(14)
			}
			name = strings.Map(dropDigits, name)
			out[name+" user"] += user
			out[name+" sys"] += sys
		}
	}
	return out
}

// switches is the context switches so far (voluntary and not) of every
// thread of this process (self) or of pids and their children.
func switches(pids []int, self bool) int64 {
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	var n int64
	count := func(pid string) {
		tasks, _ := os.ReadDir(filepath.Join("/proc", pid, "task"))
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", pid, "task", t.Name(), "status"))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
					x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += x
				}
			}
		}
	}
	if self {
		count(strconv.Itoa(os.Getpid()))
		return n
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := procStat(pid); ok && (want[pid] || want[ppid]) {
			count(e.Name())
		}
	}
	return n
}

// pgRole is a PostgreSQL process's role from its title ("postgres:
// walwriter"; a backend's title names its client: "backend"), or "".
func pgRole(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	t, ok := strings.CutPrefix(strings.TrimRight(string(b), "\x00"), "postgres: ")
	if !ok {
		return ""
	}
	if strings.Contains(t, "(") {
		return "pg backend"
	}
	return "pg " + t
}

func dropDigits(r rune) rune {
	if r >= '0' && r <= '9' {
		return -1
	}
	return r
}

// cpuDetail is the growth of each group of before in after, per run, the
// largest first.
func cpuDetail(before, after map[string]time.Duration, runs int) string {
	type g struct {
		name string
		d    time.Duration
	}
	var gs []g
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			gs = append(gs, g{k, d})
		}
	}
	slices.SortFunc(gs, func(a, b g) int { return int(b.d - a.d) })
	var parts []string
	for _, x := range gs {
		parts = append(parts, fmt.Sprintf("%s %.3f", x.name, msf(x.d)/float64(max(runs, 1))))
	}
	return strings.Join(parts, ", ")
}
