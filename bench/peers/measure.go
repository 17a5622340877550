package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// result is one system's figures of one round, as a child process reports
// them to the parent (JSON on its stdout's last line).
type result struct {
	P50     time.Duration `json:"p50"`      // a 3-step run at 1 client
	P50Zero time.Duration `json:"p50_zero"` // a 0-step run at 1 client
	Step    time.Duration `json:"step"`     // (P50 - P50Zero) / 3
	Rate    float64       `json:"rate"`     // runs/s at 64 clients
	CPU     time.Duration `json:"cpu"`      // CPU per run at 64 clients, every process of the system
	// CPUServer is the part of CPU used by the system's server processes
	// (the external nats-server, the Restate server, PostgreSQL), the rest
	// being this process's: clients, SDK, and Weft's runner and embedded
	// server.
	CPUServer time.Duration `json:"cpu_server"`
	// Others is the CPU the rest of the machine used during the 64-client
	// window, in cores (busy CPU of the whole machine, from /proc/stat,
	// less the system's own): the load that competed with the system.
	Others float64 `json:"others"`
	// Fsync is the p50 of a 4 KiB write + fsync on the disk the system
	// stores on, measured right before the system started.
	Fsync time.Duration `json:"fsync"`
	// IPC and IPCCPU are the p50 and the CPU (both processes') of a
	// one-byte round trip between two processes through pipes, measured
	// right before the system started (ipcRoundTrip).
	IPC    time.Duration `json:"ipc"`
	IPCCPU time.Duration `json:"ipc_cpu"`
	Failed int           `json:"failed"`
	Err    string        `json:"err,omitempty"`
}

// phases are the lengths of one measurement.
type phases struct {
	warm    time.Duration // 64 clients before anything is measured
	latRuns int           // runs of each kind at 1 client
	window  time.Duration // the 64-client throughput window
	profile string        // a file for a CPU profile of the window, if any
	detail  bool          // print the servers' CPU by thread and the system's own counts of the window
}

// clients is the concurrency of the warm-up and the throughput window (64;
// -clients for an A/B).
var clients = 64

// measure takes one round of figures of sys: a warm-up at 64 clients (so
// that connection pools, the peers' backends and the server's caches are
// at their working size before anything is timed), the 1-client
// latencies with 3-step and 0-step runs alternating (so that a change of
// the machine's load hits both alike), then the 64-client window.
func measure(ctx context.Context, sys system, name string, ph phases) result {
	var r result
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		r.Failed++
		r.Err = err.Error()
		mu.Unlock()
	}
	if ph.warm > 0 {
		concurrent(ctx, sys, name+"-w", ph.warm, func(err error) {
			if err != nil {
				fail(err)
			}
		})
	}
	for i := range 20 {
		_ = sys.run(ctx, fmt.Sprintf("%s-warm-%d-%d", name, time.Now().UnixNano(), i), 3)
	}
	var l3, l0 []time.Duration
	for i := range 2 * ph.latRuns {
		steps := 3 * (1 - i%2)
		t0 := time.Now()
		if err := sys.run(ctx, fmt.Sprintf("%s-l%d-%d-%d", name, steps, time.Now().UnixNano(), i), steps); err != nil {
			fail(err)
			continue
		}
		if steps == 3 {
			l3 = append(l3, time.Since(t0))
		} else {
			l0 = append(l0, time.Since(t0))
		}
	}
	slices.Sort(l3)
	slices.Sort(l0)
	r.P50, r.P50Zero = pct(l3, 50), pct(l0, 50)
	r.Step = max(r.P50-r.P50Zero, 0) / 3

	done := 0
	if ph.profile != "" {
		if f, err := os.Create(ph.profile); err != nil {
			fail(err)
		} else if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		} else {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	var threads0 map[string]time.Duration
	var sw0, swSelf0 int64
	dt, isDetailer := sys.(detailer)
	if ph.detail {
		if isDetailer {
			if err := dt.beginDetail(ctx); err != nil {
				fail(err)
			}
		}
		threads0 = threadCPU(sys.pids())
		sw0, swSelf0 = switches(sys.pids(), false), switches(nil, true)
	}
	cpu0, self0, busy0 := cpuOf(sys.pids()), cpuOf(nil), machineBusy()
	el := concurrent(ctx, sys, name+"-t", ph.window, func(err error) {
		if err != nil {
			fail(err)
			return
		}
		mu.Lock()
		done++
		mu.Unlock()
	})
	cpu, self, busy := cpuOf(sys.pids())-cpu0, cpuOf(nil)-self0, machineBusy()-busy0
	if ph.detail {
		runs := float64(max(done, 1))
		fmt.Fprintf(os.Stderr, "%s: %d runs; context switches per run: %.1f in the measuring process, %.1f in the servers; measuring process %.3f ms CPU per run; servers' CPU per run by thread (ms): %s\n",
			name, done, float64(switches(nil, true)-swSelf0)/runs, float64(switches(sys.pids(), false)-sw0)/runs,
			msf(self)/runs, cpuDetail(threads0, threadCPU(sys.pids()), done))
		if isDetailer {
			fmt.Fprintf(os.Stderr, "%s: %s\n", name, dt.detail(ctx, done))
		}
	}
	r.Rate = float64(done) / el.Seconds()
	if done > 0 {
		r.CPU = cpu / time.Duration(done)
		r.CPUServer = max(cpu-self, 0) / time.Duration(done)
	}
	r.Others = max(busy-cpu, 0).Seconds() / el.Seconds()
	return r
}

// concurrent runs 3-step runs from 64 clients for d and reports each
// run's outcome to each; it returns the time taken.
func concurrent(ctx context.Context, sys system, tag string, d time.Duration, each func(error)) time.Duration {
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				each(sys.run(ctx, fmt.Sprintf("%s-%d-%d-%d", tag, start.UnixNano(), c, i), 3))
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}

// fsyncLatency is the p50 of n appends of 4 KiB each followed by an fsync,
// to a file in dir: what one durable write costs on that disk now.
func fsyncLatency(dir string, n int) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return pct(lat, 50), nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

// clockTick is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuOf is the CPU time used so far by this process and by pids and their
// children (PostgreSQL's backends), from /proc. A server's time includes
// the children it reaped (cutime, cstime: PostgreSQL's backends and
// workers that ended), so a child that ends within a window still counts.
func cpuOf(pids []int) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	want := map[int]bool{}
	for _, p := range pids {
		want[p] = true
	}
	if len(want) == 0 {
		return total
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, ticks, ok := procStat(pid)
		if ok && (want[pid] || want[ppid]) {
			total += ticks
		}
	}
	return total
}

// procStat reads a process's parent and CPU time (parseStat).
func procStat(pid int) (ppid int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	return parseStat(string(b))
}

// parseStat reads a /proc/<pid>/stat line: the parent and the CPU time
// (utime, stime and its reaped children's cutime, cstime).
func parseStat(s string) (ppid int, cpu time.Duration, ok bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	var ticks int64
	for _, k := range f[11:15] {
		v, _ := strconv.ParseInt(k, 10, 64)
		ticks += v
	}
	return ppid, time.Duration(ticks) * clockTick, true
}

// machineBusy is the CPU time the whole machine spent busy so far
// (parseBusy of /proc/stat).
func machineBusy() time.Duration {
	b, _ := os.ReadFile("/proc/stat")
	return parseBusy(string(b))
}

// parseBusy reads /proc/stat's cpu line: every field but idle, iowait,
// steal (time the machine's CPUs ran something else) and the guest times
// (already in user and nice).
func parseBusy(stat string) time.Duration {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, k := range f[1:] {
		if i == 3 || i == 4 || i >= 7 {
			continue
		}
		v, _ := strconv.ParseInt(k, 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * clockTick
}

func cpus() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return max(strings.Count(string(b), "processor\t:"), 1)
}

func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// waitQuiet waits up to d for a second in which the machine was busy less
// than maxOthers cores (nothing of this benchmark runs then), and returns
// the last second's figure.
func waitQuiet(ctx context.Context, maxOthers float64, d time.Duration) float64 {
	deadline := time.Now().Add(d)
	for {
		b0, t0 := machineBusy(), time.Now()
		select {
		case <-ctx.Done():
			return 0
		case <-time.After(time.Second):
		}
		busy := (machineBusy() - b0).Seconds() / time.Since(t0).Seconds()
		if busy <= maxOthers || time.Now().After(deadline) {
			return busy
		}
	}
}
