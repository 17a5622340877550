// Command peers runs issue 18's workload on Weft and on its peers —
// Restate (server from npm, Go SDK) and DBOS Transact Go (on Debian's
// PostgreSQL) — on this machine, interleaved, and prints one table with
// every figure's ratio to Weft's. It is its own module so that the peers'
// SDKs stay out of Weft's module graph; it is not run by CI.
//
// The workload: a run is a start, 3 sequential durable steps (each an
// instant function), then the result. Per durable step is the p50 latency
// of a 3-step run minus that of a 0-step run, divided by 3. CPU per run is
// the CPU of every process involved (this one: clients, SDK, Weft's
// embedded server; the Restate server; every PostgreSQL process) during
// the 64-client phase, divided by the runs it completed.
//
//	cd bench/peers && (cd node && npm ci) && go run . [--quick] [--systems weft,weft-sync,restate,dbos] [--rounds N]
//
// docs/benchmarks.md has the exact commands and the latest table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// system is one durable-execution system under test.
type system interface {
	// run executes one run of steps durable steps and returns once its
	// result is durable and known to the client.
	run(ctx context.Context, id string, steps int) error
	// pids are the processes besides this one whose CPU counts.
	pids() []int
	close()
}

type starter struct {
	name  string
	start func(ctx context.Context, dir string) (system, error)
}

func main() {
	quick := flag.Bool("quick", false, "short phases (about a minute per system)")
	rounds := flag.Int("rounds", 2, "interleaved rounds (each system measured once per round)")
	only := flag.String("systems", "weft,restate,dbos", "systems to measure, comma-separated: weft, weft-sync (sync_interval always), restate, dbos")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *quick, *rounds, strings.Split(*only, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

var all = []starter{
	{"weft", func(ctx context.Context, dir string) (system, error) { return startWeft(ctx, dir, false) }},
	{"weft-sync", func(ctx context.Context, dir string) (system, error) { return startWeft(ctx, dir, true) }},
	{"restate", startRestate},
	{"dbos", startDBOS},
}

// result is one system's figures of one round.
type result struct {
	p50, p50zero, step time.Duration
	rate               float64
	cpu                time.Duration
	failed             int
	err                error
}

func run(ctx context.Context, quick bool, rounds int, names []string) error {
	var chosen []starter
	for _, n := range names {
		i := slices.IndexFunc(all, func(s starter) bool { return s.name == strings.TrimSpace(n) })
		if i < 0 {
			return fmt.Errorf("unknown system %q", n)
		}
		chosen = append(chosen, all[i])
	}
	latRuns, window := 200, 20*time.Second
	if quick {
		latRuns, window = 50, 5*time.Second
	}
	fmt.Fprintf(os.Stderr, "machine: %d CPUs, load %s\n", cpus(), load())
	results := map[string][]result{}
	for round := 1; round <= rounds; round++ {
		for _, s := range chosen {
			dir, err := os.MkdirTemp("", "weft-peers-"+s.name+"-")
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "[round %d] %s: starting\n", round, s.name)
			sys, err := s.start(ctx, dir)
			if err != nil {
				results[s.name] = append(results[s.name], result{err: err})
				fmt.Fprintf(os.Stderr, "[round %d] %s: cannot start: %v\n", round, s.name, err)
				os.RemoveAll(dir)
				continue
			}
			r := measure(ctx, sys, s.name, latRuns, window)
			sys.close()
			os.RemoveAll(dir)
			results[s.name] = append(results[s.name], r)
			fmt.Fprintf(os.Stderr, "[round %d] %s: p50 %s, per step %s, %.0f runs/s at 64 clients, %.2f ms CPU per run%s\n", round, s.name,
				ms(r.p50), ms(r.step), r.rate, msf(r.cpu), failures(r))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	printTable(chosen, results)
	fmt.Fprintf(os.Stderr, "load after: %s\n", load())
	return nil
}

func failures(r result) string {
	if r.failed == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d runs failed: %v)", r.failed, r.err)
}

// measure takes one round of figures of sys.
func measure(ctx context.Context, sys system, name string, latRuns int, window time.Duration) result {
	var r result
	// Warm up.
	for i := range 20 {
		_ = sys.run(ctx, fmt.Sprintf("%s-warm-%d-%d", name, time.Now().UnixNano(), i), 3)
	}
	seq := func(steps int) []time.Duration {
		var lat []time.Duration
		for i := range latRuns {
			t0 := time.Now()
			if err := sys.run(ctx, fmt.Sprintf("%s-l%d-%d-%d", name, steps, time.Now().UnixNano(), i), steps); err != nil {
				r.failed++
				r.err = err
				continue
			}
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		return lat
	}
	l3, l0 := seq(3), seq(0)
	r.p50, r.p50zero = pct(l3, 50), pct(l0, 50)
	r.step = max(r.p50-r.p50zero, 0) / 3

	const clients = 64
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		done int
	)
	cpu0 := cpuOf(sys.pids())
	start := time.Now()
	stop := start.Add(window)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				err := sys.run(ctx, fmt.Sprintf("%s-t-%d-%d-%d", name, start.UnixNano(), c, i), 3)
				mu.Lock()
				if err != nil {
					r.failed++
					r.err = err
				} else {
					done++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	cpu := cpuOf(sys.pids()) - cpu0
	r.rate = float64(done) / el.Seconds()
	if done > 0 {
		r.cpu = cpu / time.Duration(done)
	}
	return r
}

func printTable(chosen []starter, results map[string][]result) {
	best := func(rs []result) (result, bool) {
		// The median round by throughput (rounds alternate with the other
		// systems, so each sees the same load on average).
		var ok []result
		for _, r := range rs {
			if r.err == nil || r.rate > 0 {
				ok = append(ok, r)
			}
		}
		if len(ok) == 0 {
			return result{}, false
		}
		slices.SortFunc(ok, func(a, b result) int { return int((a.rate - b.rate) * 1000) })
		return ok[len(ok)/2], true
	}
	weft, haveWeft := best(results["weft"])
	ratio := func(v, w float64) string {
		if !haveWeft || w == 0 {
			return "-"
		}
		return fmt.Sprintf("×%.2f", v/w)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "system\tp50 run, 1 client\t÷ weft\tper durable step\t÷ weft\truns/s, 64 clients\t÷ weft\tCPU ms per run\t÷ weft\t\n")
	for _, s := range chosen {
		r, ok := best(results[s.name])
		if !ok {
			var why error
			if rs := results[s.name]; len(rs) > 0 {
				why = rs[0].err
			}
			fmt.Fprintf(tw, "%s\tnot measured: %v\t\t\t\t\t\t\t\t\n", s.name, why)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%.2f\t%s\t\n", s.name, ms(r.p50), ratio(msf(r.p50), msf(weft.p50)),
			ms(r.step), ratio(msf(r.step), msf(weft.step)), r.rate, ratio(r.rate, weft.rate), msf(r.cpu), ratio(msf(r.cpu), msf(weft.cpu)))
	}
	tw.Flush()
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return strconv.FormatFloat(msf(d), 'f', 2, 64) + " ms" }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuOf is the CPU time used so far by this process and by pids and their
// children (PostgreSQL's backends), from /proc.
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

// procStat reads a process's parent and CPU time (utime+stime, 100 Hz).
func procStat(pid int) (ppid int, cpu time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, time.Duration(ut+st) * 10 * time.Millisecond, true
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

var errNotFound = errors.New("not found")
