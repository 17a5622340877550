// Command peers runs the workload of docs/benchmarks.md on Weft and on its
// peers —
// Restate (server from npm, Go SDK) and DBOS Transact Go (on Debian's
// PostgreSQL) — on this machine, interleaved, and prints one table with
// every figure's ratio to Weft's at the peers' durability (fsync on every
// ack), the machine's other load, the disk's fsync latency and the CPU of
// a round trip between two processes (ipcRoundTrip) beside them. It is its own module so that the peers' SDKs stay out of Weft's
// module graph; it is not run by CI.
//
// The workload: a run is a start, 3 sequential durable steps (each an
// instant function), then the result. Per durable step is the p50 latency
// of a 3-step run minus that of a 0-step run (the two alternating),
// divided by 3. Runs/s is at 64 clients after a warm-up at 64 clients. CPU
// per run is the CPU of every process of the system (the measuring
// process: clients, SDK, Weft's runner and embedded server; the external
// nats-server; the Restate server; every PostgreSQL process) during the
// 64-client window, divided by the runs it completed. Each system is
// measured in a fresh process of this program.
//
//	cd bench/peers && (cd node && npm ci) && go run . [--quick] [--systems weft,weft-sync,...] [--rounds N]
//
// --profile DIR and --detail say where a system's CPU goes (a pprof
// profile of the measuring process; the servers' CPU by thread, context
// switches, PostgreSQL's statements per run).
//
// docs/benchmarks.md has the exact commands, every system's configuration
// and the latest table.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// starter is one system the benchmark can measure.
type starter struct {
	name  string
	label string // the table's name: the system and its durability
	start func(ctx context.Context, dir string) (system, error)
}

var all = []starter{
	{"weft", "Weft, embedded server, sync_interval 2m (no fsync)",
		func(ctx context.Context, dir string) (system, error) { return startWeft(ctx, dir, false, false) }},
	{"weft-sync", "Weft, embedded server, fsync on every ack (its default), group commit",
		func(ctx context.Context, dir string) (system, error) { return startWeft(ctx, dir, false, true) }},
	{"weft-ext", "Weft, external nats-server, sync_interval 2m (no fsync)",
		func(ctx context.Context, dir string) (system, error) { return startWeft(ctx, dir, true, false) }},
	{"weft-ext-sync", "Weft, external nats-server, fsync on every ack (its default), group commit",
		func(ctx context.Context, dir string) (system, error) { return startWeft(ctx, dir, true, true) }},
	{"restate", "Restate 1.7.12, Go SDK 1.2.0 (fsync)", startRestate},
	{"dbos", "DBOS Transact Go 1.8.0 + PostgreSQL 15 (synchronous commit)", startDBOS},
}

func main() {
	if os.Getenv(envEcho) != "" {
		echoMain()
		return
	}
	if conf := os.Getenv(envNATSConf); conf != "" {
		if err := natsMain(conf); err != nil {
			fmt.Fprintln(os.Stderr, "peers: nats-server:", err)
			os.Exit(1)
		}
		return
	}
	var o options
	flag.BoolVar(&o.quick, "quick", false, "short phases (about half a minute per system and round)")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds (each system measured once per round, the order rotating)")
	only := flag.String("systems", "weft,weft-sync,weft-ext,weft-ext-sync,restate,dbos", "systems to measure, comma-separated: "+names())
	flag.StringVar(&o.ref, "ref", "weft-sync", "the system the ratios are to (weft-sync: Weft at the peers' durability)")
	flag.DurationVar(&o.warm, "warm", -1, "warm-up at 64 clients before each measurement (default 5s, 2s with --quick; 0: only 20 runs at 1 client)")
	flag.BoolVar(&o.sameProcess, "same-process", false, "measure every system in this one process, one after the other (for an A/B against the default: each system in a fresh process)")
	flag.IntVar(&peerOpts.dbosPool, "dbos-pool", 0, "DBOS's pgx pool size (pool_max_conns; 0: DBOS's default, 20)")
	flag.BoolVar(&peerOpts.restateH2C, "restate-h2c", false, "call Restate's ingress over HTTP/2 without TLS (one connection for all clients) instead of HTTP/1.1 (a connection per client)")
	flag.BoolVar(&peerOpts.dbosUnix, "dbos-unix", false, "connect DBOS to PostgreSQL through its Unix socket instead of loopback TCP")
	flag.IntVar(&peerOpts.restatePartitions, "restate-partitions", 0, "Restate's default-num-partitions (0: its default, 24)")
	flag.Float64Var(&o.maxOthers, "max-others", 0.25, "a measurement during which the rest of the machine used more CPU than this many cores is marked disturbed (*) and left out of the median while undisturbed rounds exist")
	flag.DurationVar(&o.quietWait, "quiet-wait", 0, "before each measurement, wait up to this long for the rest of the machine to use less than --max-others cores")
	flag.StringVar(&o.profile, "profile", "", "write a CPU profile (pprof) of the measuring process during each 64-client window to this directory, one file a system and round (<system>-<round>.pprof)")
	flag.BoolVar(&o.detail, "detail", false, "print, after each 64-client window, the servers' CPU per run by thread and process role, and what the system counts itself (DBOS: PostgreSQL's statements and WAL flushes per run, through pg_stat_statements, which costs CPU of its own)")
	flag.IntVar(&clients, "clients", 64, "clients of the warm-up and the throughput window (the table's workload: 64; another count for an A/B)")
	child := flag.String("child", "", "internal: measure this one system in this process and print its result as JSON")
	dir := flag.String("dir", "", "internal: the child's data directory")
	flag.Parse()
	o.systems = strings.Split(*only, ",")
	peerOpts.detail = o.detail
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *child != "" {
		err = runChild(ctx, o, *child, *dir)
	} else {
		err = run(ctx, o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

// peerOpts are the peers' settings that differ from their defaults (none
// unless the flags say so).
var peerOpts struct {
	dbosPool          int
	restatePartitions int
	detail            bool // -detail: DBOS's PostgreSQL loads pg_stat_statements
	restateH2C        bool
	dbosUnix          bool
}

type options struct {
	quick       bool
	rounds      int
	systems     []string
	ref         string
	warm        time.Duration
	sameProcess bool
	maxOthers   float64
	quietWait   time.Duration
	profile     string // -profile: a directory; the child's: its file
	detail      bool
}

func (o options) phases() phases {
	ph := phases{warm: 5 * time.Second, latRuns: 200, window: 20 * time.Second}
	if o.quick {
		ph = phases{warm: 2 * time.Second, latRuns: 50, window: 5 * time.Second}
	}
	if o.warm >= 0 {
		ph.warm = o.warm
	}
	ph.profile = o.profile
	ph.detail = o.detail
	return ph
}

func names() string {
	var n []string
	for _, s := range all {
		n = append(n, s.name)
	}
	return strings.Join(n, ", ")
}

func find(name string) (starter, error) {
	i := slices.IndexFunc(all, func(s starter) bool { return s.name == strings.TrimSpace(name) })
	if i < 0 {
		return starter{}, fmt.Errorf("unknown system %q (want one of %s)", name, names())
	}
	return all[i], nil
}

// runChild measures one system in this process (started by run) and
// prints its result as one line of JSON on stdout.
func runChild(ctx context.Context, o options, name, dir string) error {
	s, err := find(name)
	if err != nil {
		return err
	}
	r := measureOne(ctx, s, dir, o.phases())
	return json.NewEncoder(os.Stdout).Encode(r)
}

// measureOne starts s with its data in dir, measures it and stops it.
func measureOne(ctx context.Context, s starter, dir string, ph phases) result {
	sys, err := s.start(ctx, dir)
	if err != nil {
		return result{Err: "cannot start: " + err.Error()}
	}
	defer sys.close()
	return measure(ctx, sys, s.name, ph)
}

// run measures the chosen systems round after round. Each measurement
// runs in a fresh process of this program (runChild) unless
// o.sameProcess, so that nothing a system left behind (goroutines,
// connections, a heap to collect) runs while the next is measured and the
// CPU counted is the system's alone; the order rotates from round to
// round so that no system always follows the same one.
func run(ctx context.Context, o options) error {
	var chosen []starter
	for _, n := range o.systems {
		s, err := find(n)
		if err != nil {
			return err
		}
		chosen = append(chosen, s)
	}
	ph := o.phases()
	fmt.Fprintf(os.Stderr, "peers' settings: DBOS pool %s, Restate partitions %s\n",
		orDefault(peerOpts.dbosPool, "20 (DBOS's default)"), orDefault(peerOpts.restatePartitions, "24 (its default)"))
	fmt.Fprintf(os.Stderr, "machine: %d CPUs, load %s; phases: warm-up %s at %d clients, %d runs of each kind at 1 client, %s at %d clients; each system in %s\n",
		cpus(), load(), ph.warm, clients, ph.latRuns, ph.window, clients, map[bool]string{true: "this one process", false: "a fresh process"}[o.sameProcess])
	results := map[string][]result{}
	for round := range o.rounds {
		for k := range chosen {
			s := chosen[(k+round)%len(chosen)]
			dir, err := os.MkdirTemp("", "weft-peers-"+s.name+"-")
			if err != nil {
				return err
			}
			fs, err := fsyncLatency(dir, 200)
			if err != nil {
				os.RemoveAll(dir)
				return err
			}
			idle := waitQuiet(ctx, o.maxOthers, o.quietWait)
			ipc, ipcCPU, err := ipcRoundTrip(ipcTrips)
			if err != nil {
				os.RemoveAll(dir)
				return err
			}
			fmt.Fprintf(os.Stderr, "[round %d] %s: starting (fsync p50 %s, a round trip between two processes p50 %s at %.1f µs CPU, load %s, the machine busy %.2f cores before)\n",
				round+1, s.name, ms(fs), us(ipc), usf(ipcCPU), load(), idle)
			var r result
			co := o
			if o.profile != "" {
				co.profile = filepath.Join(o.profile, fmt.Sprintf("%s-%d.pprof", s.name, round+1))
			}
			if o.sameProcess {
				rph := ph
				rph.profile = co.profile
				r = measureOne(ctx, s, dir, rph)
			} else {
				r = measureChild(ctx, co, s, dir)
			}
			r.Fsync, r.IPC, r.IPCCPU = fs, ipc, ipcCPU
			os.RemoveAll(dir)
			results[s.name] = append(results[s.name], r)
			fmt.Fprintf(os.Stderr, "[round %d] %s: p50 %s (0 steps %s), per step %s, %.0f runs/s at %d clients, %.2f ms CPU per run (%.2f in servers), %.2f cores used, others' load %.2f cores%s\n",
				round+1, s.name, ms(r.P50), ms(r.P50Zero), ms(r.Step), r.Rate, clients, msf(r.CPU), msf(r.CPUServer), cores(r), r.Others, failures(r))
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	printTable(o, chosen, results)
	fmt.Fprintf(os.Stderr, "load after: %s\n", load())
	return nil
}

// measureChild measures s in a fresh process of this program.
func measureChild(ctx context.Context, o options, s starter, dir string) result {
	self, err := os.Executable()
	if err != nil {
		return result{Err: err.Error()}
	}
	args := []string{"-child", s.name, "-dir", dir, "-warm", o.phases().warm.String(),
		"-clients", strconv.Itoa(clients), "-restate-h2c=" + strconv.FormatBool(peerOpts.restateH2C), "-dbos-unix=" + strconv.FormatBool(peerOpts.dbosUnix), "-dbos-pool", strconv.Itoa(peerOpts.dbosPool), "-restate-partitions", strconv.Itoa(peerOpts.restatePartitions)}
	if o.quick {
		args = append(args, "-quick")
	}
	if o.profile != "" {
		args = append(args, "-profile", o.profile)
	}
	if o.detail {
		args = append(args, "-detail")
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, self, args...)
	// Interrupted, the child stops its system (PostgreSQL is a daemon of
	// its own) before it exits.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return result{Err: fmt.Sprintf("child: %v", err)}
	}
	var last string
	for sc := bufio.NewScanner(&out); sc.Scan(); {
		if t := strings.TrimSpace(sc.Text()); t != "" {
			last = t
		}
	}
	var r result
	if err := json.Unmarshal([]byte(last), &r); err != nil {
		return result{Err: fmt.Sprintf("child's result %q: %v", last, err)}
	}
	return r
}

func orDefault(v int, def string) string {
	if v == 0 {
		return def
	}
	return strconv.Itoa(v)
}

func failures(r result) string {
	if r.Failed == 0 && r.Err == "" {
		return ""
	}
	return fmt.Sprintf(" (%d runs failed: %v)", r.Failed, r.Err)
}

// median is the median round of rs by throughput (rounds alternate with
// the other systems, so each sees the same load on average), among the
// rounds the rest of the machine did not disturb if there are any: the
// machine's load does not hit every system alike (a system whose run
// crosses more processes waits more often for a CPU), so disturbed rounds
// are not comparable.
func median(rs []result, maxOthers float64) (result, bool) {
	var ok, quiet []result
	for _, r := range rs {
		if r.Rate > 0 {
			ok = append(ok, r)
			if r.Others <= maxOthers {
				quiet = append(quiet, r)
			}
		}
	}
	if len(quiet) > 0 {
		ok = quiet
	}
	if len(ok) == 0 {
		return result{}, false
	}
	slices.SortFunc(ok, func(a, b result) int { return int((a.Rate - b.Rate) * 1000) })
	return ok[len(ok)/2], true
}

func printTable(o options, chosen []starter, results map[string][]result) {
	ref, haveRef := median(results[o.ref], o.maxOthers)
	ratio := func(v, w float64) string {
		if !haveRef || w == 0 {
			return "-"
		}
		return fmt.Sprintf("×%.2f", v/w)
	}
	fmt.Printf("Median round of %d by runs/s (of the undisturbed rounds if any: the rest of the machine used at most %.2f cores); ratios to %s; cores used: the system's own CPU during the 64-client window (runs/s × CPU per run); others' load: the CPU the rest of the machine used then, in cores; fsync: p50 of a 4 KiB write + fsync on the store's disk before the system started; IPC CPU: the CPU (both processes') of a one-byte round trip between two processes, measured then.\n\n", o.rounds, o.maxOthers, o.ref)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "system (durability)\tp50 run, 1 client\t÷ ref\tper durable step\t÷ ref\truns/s, %d clients\t÷ ref\tCPU ms per run\t÷ ref\tcores used\tothers' load\tfsync p50\tIPC CPU\t\n", clients)
	for _, s := range chosen {
		r, ok := median(results[s.name], o.maxOthers)
		if !ok {
			var why string
			if rs := results[s.name]; len(rs) > 0 {
				why = rs[0].Err
			}
			fmt.Fprintf(tw, "%s\tnot measured: %s\t\t\t\t\t\t\t\t\t\t\t\t\n", s.label, why)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%.2f\t%s\t%.2f\t%.2f\t%s\t%s\t\n", s.label, ms(r.P50), ratio(msf(r.P50), msf(ref.P50)),
			ms(r.Step), ratio(msf(r.Step), msf(ref.Step)), r.Rate, ratio(r.Rate, ref.Rate), msf(r.CPU), ratio(msf(r.CPU), msf(ref.CPU)), cores(r), r.Others, ms(r.Fsync), us(r.IPCCPU))
	}
	tw.Flush()
	fmt.Printf("\nEach round (runs/s at %d clients / per durable step / CPU ms per run / others' load in cores / IPC CPU; * disturbed):\n", clients)
	for _, s := range chosen {
		var parts []string
		for _, r := range results[s.name] {
			mark := ""
			if r.Others > o.maxOthers {
				mark = "*"
			}
			parts = append(parts, fmt.Sprintf("%.0f / %s / %.2f / %.2f / %s%s", r.Rate, ms(r.Step), msf(r.CPU), r.Others, us(r.IPCCPU), mark))
		}
		fmt.Printf("  %s: %s\n", s.name, strings.Join(parts, ", "))
	}
}

// cores is the CPU the system used during its 64-client window, in cores:
// below the machine's, the rest went to other load or to waiting.
func cores(r result) float64 { return r.Rate * r.CPU.Seconds() }

// ipcTrips is how many round trips ipcRoundTrip times before each
// measurement (about half a second).
const ipcTrips = 10000

func us(d time.Duration) string { return strconv.FormatFloat(usf(d), 'f', 1, 64) + " µs" }

func usf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func ms(d time.Duration) string { return strconv.FormatFloat(msf(d), 'f', 2, 64) + " ms" }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

var errNotFound = errors.New("not found")
