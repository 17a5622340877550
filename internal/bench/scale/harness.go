package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/bench"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// The sections of a scale report.
const (
	// SectionLoad names the section of the loader's rows.
	SectionLoad = "load"
	// SectionStartup names the section of a runner's start-up rows.
	SectionStartup = "runner start-up"
	// SectionIdle names the section of an idle runner's rows.
	SectionIdle = "idle runner"
	// SectionTakeover names the section of the takeover rows.
	SectionTakeover = "takeover"
	// SectionQuery names the section of the query service's rows.
	SectionQuery = "query"
	// SectionCluster names the section of the 3-node cluster's rows.
	SectionCluster = "cluster"
)

// Config says what Run measures.
type Config struct {
	// Runs is how many runs the loader puts in the one-node log (default
	// 1,000,000; 20,000 with Quick).
	Runs int
	// ClusterRuns is how many it puts in the cluster's log (default Runs
	// with Quick, else 100,000): an R3 load is slower, and the cluster
	// measures are about throughput and recovery, not the log's size.
	ClusterRuns int
	// Partitions is the partition count of every runner (default 64).
	Partitions int
	// Nodes is 1 (one-node measures only) or 3 (and the cluster's).
	Nodes int
	// Quick shortens every window (idle 3 s, workload 3 s).
	Quick bool
	// Idle is how long an idle runner is watched (default 60 s; 3 s with
	// Quick).
	Idle time.Duration
	// Workload is how long the steady workload runs (default 20 s; 3 s
	// with Quick); Clients how many clients it has (default 16).
	Workload time.Duration
	Clients  int
	// Quiet bounds the wait, before the cluster's workload, until the
	// runners' start-up work is over (default 5 min; 30 s with Quick).
	Quiet time.Duration
	// Sample is how many runs of a killed runner's partitions are approved
	// after the kill (default 20), picked with Seed.
	Sample int
	Seed   uint64
	// Lease is every runner's liveness lease (default 2 s).
	Lease time.Duration
	// NoOneNode skips the one-node phase: the cluster phase then measures
	// the runner on the empty log and with the runs itself (the CI test).
	NoOneNode bool
	// NoQuery skips the query measures (the projector folds every loaded
	// run first, which takes long: docs/scaling.md).
	NoQuery bool
	// QueryOnly loads the one-node log and measures the query service
	// alone (no runner, no cluster).
	QueryOnly bool
	// Dir holds the servers' stores and the subprocesses' logs (default
	// a temporary directory, removed afterwards).
	Dir string
	// Progress receives a line per step (nil: none).
	Progress io.Writer
	// Exec returns the command line that starts this program as a scale
	// subprocess (see Child); nil uses os.Executable with no arguments.
	Exec func() (string, []string)
}

func (c *Config) defaults() {
	if c.Runs <= 0 {
		c.Runs = map[bool]int{true: 20_000, false: 1_000_000}[c.Quick]
	}
	if c.ClusterRuns <= 0 {
		c.ClusterRuns = min(c.Runs, map[bool]int{true: c.Runs, false: 100_000}[c.Quick])
	}
	if c.Partitions <= 0 {
		c.Partitions = 64
	}
	if c.Nodes <= 0 {
		c.Nodes = 3
	}
	if c.Idle <= 0 {
		c.Idle = map[bool]time.Duration{true: 3 * time.Second, false: time.Minute}[c.Quick]
	}
	if c.Workload <= 0 {
		c.Workload = map[bool]time.Duration{true: 3 * time.Second, false: 20 * time.Second}[c.Quick]
	}
	if c.Quiet <= 0 {
		c.Quiet = map[bool]time.Duration{true: 30 * time.Second, false: 5 * time.Minute}[c.Quick]
	}
	if c.Clients <= 0 {
		c.Clients = 16
	}
	if c.Sample <= 0 {
		c.Sample = 20
	}
	if c.Lease <= 0 {
		c.Lease = 2 * time.Second
	}
	if c.Exec == nil {
		c.Exec = func() (string, []string) { p, _ := os.Executable(); return p, nil }
	}
}

// Idle is what one runner measured over an idle window.
type Idle struct {
	// Startup is from the exec to the runner serving.
	Startup time.Duration
	// Work is from serving until it was quiet (its start-up work: claims,
	// takeovers of active runs), WorkCPU the CPU time it used meanwhile.
	Work    time.Duration
	WorkCPU time.Duration
	// RSS is its resident set at the end of the window, bytes.
	RSS int64
	// CPU is its user + system CPU time within the window.
	CPU time.Duration
	// Goroutines is the fewest of goroutineSamples reads at the end of the
	// window; Stats is as it answered at its end.
	Goroutines int
	Stats      runner.Stats
}

// Facts are the raw observations behind the rows, for the test's checks.
type Facts struct {
	// Empty and Loaded are the one-node runner on an empty log and with
	// Runs runs in it.
	Empty, Loaded Idle
	// Partitioned is set when the runners own partitions (runner.Stats
	// lists them); the ownership facts are empty otherwise.
	Partitioned bool
	// Owners maps each partition to the runners that own it, with the
	// cluster's three runners up; OwnersAfterKill with one SIGKILLed.
	Owners, OwnersAfterKill map[int][]string
	// Killed is the SIGKILLed runner, Sample its runs approved after the
	// kill and SampleDone how many of them completed.
	Killed     string
	Sample     []string
	SampleDone int
	// ClusterIdle is each cluster runner's Stats before any workload, once
	// the active loaded runs of its partitions were taken over.
	ClusterIdle map[string]runner.Stats
	// ClusterActive is how many loaded active runs each runner's
	// partitions hold.
	ClusterActive map[string]int
	// IdleChecked is how many loaded idle runs (suspended or completed,
	// picked with the seed) were read back once the three runners owned
	// their partitions, IdleRecovered how many of them had a
	// run_recovered event: a takeover append made for an idle run.
	IdleChecked, IdleRecovered int
}

// Result is a report and its facts.
type Result struct {
	Report *bench.Report
	Facts  Facts
}

// Run measures what cfg asks for. A measure that fails is listed in the
// report's Errors and the others go on where they can.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	h := &harness{cfg: cfg, out: cfg.Progress, start: time.Now()}
	if h.out == nil {
		h.out = io.Discard
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "weft-scale-")
		if err != nil {
			return nil, err
		}
		h.dir = d
		defer os.RemoveAll(d)
	} else {
		h.dir = cfg.Dir
		if err := os.MkdirAll(h.dir, 0o755); err != nil {
			return nil, err
		}
	}
	defer h.stopAll()
	h.res = &Result{Report: &bench.Report{Schema: 1, Started: h.start.UTC(), Quick: cfg.Quick, Machine: bench.Machine{
		CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version(), LoadBefore: loadAverage(),
		Server: fmt.Sprintf("nats-server %s: embedded (1 node), %d subprocesses routed on loopback, R%d (cluster)", natsserver.VERSION, cfg.Nodes, cfg.Nodes),
	}}}
	if !cfg.NoOneNode {
		if err := h.oneNode(ctx); err != nil {
			h.fail("one node", err)
		}
	}
	if cfg.Nodes > 1 && !cfg.QueryOnly && ctx.Err() == nil {
		if err := h.cluster(ctx); err != nil {
			h.fail("cluster", err)
		}
	}
	h.res.Report.Seconds = time.Since(h.start).Seconds()
	h.res.Report.Machine.LoadAfter = loadAverage()
	return h.res, ctx.Err()
}

// harness carries one Run.
type harness struct {
	cfg   Config
	out   io.Writer
	start time.Time
	dir   string
	res   *Result

	// The current phase's servers.
	url string
	nc  *nats.Conn
	js  jetstream.JetStream

	mu    sync.Mutex
	procs []*proc

	// base1 is the one-node steady throughput, runs/s.
	base1 float64
}

func (h *harness) progress(format string, args ...any) {
	fmt.Fprintf(h.out, "[%6.1fs] %s\n", time.Since(h.start).Seconds(), fmt.Sprintf(format, args...))
}

func (h *harness) fail(what string, err error) {
	h.res.Report.Errors = append(h.res.Report.Errors, fmt.Sprintf("%s: %v", what, err))
	h.progress("%s: FAILED: %v", what, err)
}

func (h *harness) add(r bench.Row) {
	if r.BaseValue != 0 {
		r.Ratio = r.Value / r.BaseValue
	}
	h.res.Report.Rows = append(h.res.Report.Rows, r)
	if r.Baseline != "" {
		h.progress("  %s: %.4g %s (%s %.4g %s, ×%.2f)", r.Name, r.Value, r.Unit, r.Baseline, r.BaseValue, r.BaseUnit, r.Ratio)
	} else {
		h.progress("  %s: %.4g %s", r.Name, r.Value, r.Unit)
	}
}

func (h *harness) use(s *servers) { h.url, h.nc, h.js = s.url, s.nc, s.js }

// goroutineSamples is how many times idle reads a runner's goroutines.
const goroutineSamples = 10

// idle starts runner id, waits until it serves and watches it for the
// idle window.
func (h *harness) idle(ctx context.Context, id string, limit time.Duration) (*runnerProc, Idle, error) {
	r, startup, err := h.startRunner(ctx, id, limit)
	if err != nil {
		return nil, Idle{}, err
	}
	// Its start-up work (claiming partitions, taking over the active
	// runs of the log) ends first: the idle window is what it costs
	// once its partitions are not busy.
	t0, cpuStart := time.Now(), r.cpu()
	quiet := h.quiesce(ctx, []*runnerProc{r}, h.cfg.Quiet)
	work, workCPU := time.Since(t0), r.cpu()-cpuStart
	h.progress("runner %s serves after %s, quiet %s later (%s CPU%s); idle for %s", id, startup.Round(time.Millisecond),
		work.Round(time.Millisecond), workCPU, map[bool]string{false: ", not quiet: bounded by --quiet"}[quiet], h.cfg.Idle)
	cpu0 := r.cpu()
	select {
	case <-time.After(h.cfg.Idle):
	case <-ctx.Done():
		return r, Idle{}, ctx.Err()
	}
	st, err := r.stats(ctx)
	if err != nil {
		return r, Idle{}, fmt.Errorf("stats of %s: %w", id, err)
	}
	// The goroutines a runner keeps are the fewest of a few samples: one
	// sample also counts what is passing through (a heartbeat, a request
	// being answered, a write in flight on a loaded machine), which does not
	// grow with the log.
	goroutines := st.Goroutines
	for range goroutineSamples - 1 {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return r, Idle{}, ctx.Err()
		}
		if more, err := r.stats(ctx); err == nil {
			goroutines = min(goroutines, more.Goroutines)
		}
	}
	return r, Idle{Startup: startup, Work: work, WorkCPU: workCPU, RSS: r.rss(), CPU: r.cpu() - cpu0, Goroutines: goroutines, Stats: st.Stats}, nil
}

// oneNode is the one-node phase: a runner on an empty log, the load, a
// runner with the runs in the log, the takeover of its partitions, the
// query service and the steady workload's baseline.
func (h *harness) oneNode(ctx context.Context) error {
	h.progress("one node: embedded nats-server")
	s, err := h.startServers(ctx, "one", 1)
	if err != nil {
		return err
	}
	defer s.close()
	h.use(s)
	f := &h.res.Facts

	var empty Idle
	if !h.cfg.QueryOnly {
		r0, idle, err := h.idle(ctx, "empty", time.Minute)
		if err != nil {
			return fmt.Errorf("runner on the empty log: %w", err)
		}
		f.Empty, empty = idle, idle
		r0.term(10 * time.Second)
	}

	h.progress("loading %d runs", h.cfg.Runs)
	lr, err := Load(ctx, s.js, LoadConfig{Runs: h.cfg.Runs, Runner: "scale-loader", Progress: progressWriter{h}, Index: indexActive(s.js, "scale-loader", h.cfg.Partitions)})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	h.add(bench.Row{Section: SectionLoad, Name: "loader rate (1 node)", Value: lr.Rate(), Unit: "runs/s",
		Note: fmt.Sprintf("%d suspended, %d completed, %d active, %d log messages in %s", lr.Suspended, lr.Finished, lr.Active, lr.Messages, lr.Elapsed.Round(time.Second))})
	if info, err := s.js.Stream(ctx, eventlog.Stream); err == nil {
		st := info.CachedInfo().State
		h.add(bench.Row{Section: SectionLoad, Name: "log size", Value: float64(st.Bytes) / (1 << 20), Unit: "MiB",
			Note: fmt.Sprintf("%d messages, %d runs", st.Msgs, st.NumSubjects)})
	}

	if h.cfg.QueryOnly {
		return h.query(ctx, s)
	}
	// A first runner takes over the log's active runs (their driver, the
	// loader, is gone): their model calls are made again and they end
	// suspended on an approval, idle. It drains; the runner measured next
	// owns partitions none of which is busy (docs/adr/0021-scale-harness.md: "a
	// runner that owns no busy partitions").
	warm, warmStart, err := h.startRunner(ctx, "warmup", 10*time.Minute)
	if err != nil {
		return fmt.Errorf("warm-up runner: %w", err)
	}
	t0, cpu0 := time.Now(), warm.cpu()
	left, quiet := h.settle(ctx, h.cfg.Quiet)
	wst, _ := warm.stats(ctx)
	h.add(bench.Row{Section: SectionStartup, Name: fmt.Sprintf("first runner: takeover of the log's %d active runs, until none in flight", lr.Active), Value: ms(time.Since(t0)), Unit: "ms",
		Note: fmt.Sprintf("start-up %s; CPU %s; TakenOver %d, Loaded %d, RSS %.1f MiB at the end%s", warmStart.Round(time.Millisecond), warm.cpu()-cpu0,
			wst.Stats.TakenOver, wst.Stats.Loaded, mib(warm.rss()), map[bool]string{false: fmt.Sprintf(" (%d runs still in flight: bounded by --quiet)", left)}[quiet])})
	warm.term(time.Minute)
	r1, loaded, err := h.idle(ctx, "loaded", 10*time.Minute)
	if err != nil {
		return fmt.Errorf("runner with %d runs in the log: %w", h.cfg.Runs, err)
	}
	f.Loaded = loaded
	f.Partitioned = partitioned(loaded.Stats)
	h.idleRows(fmt.Sprintf("%d runs", h.cfg.Runs), empty, loaded)

	w, err := newWatcher(s.nc)
	if err != nil {
		return err
	}
	defer w.close()
	r2, err := h.takeover(ctx, w, r1)
	if err != nil {
		h.fail("takeover", err)
	}
	if !h.cfg.NoQuery {
		if err := h.query(ctx, s); err != nil {
			h.fail("query", err)
		}
	}
	if r2 != nil {
		h.settle(ctx, h.cfg.Quiet)
		h.quiesce(ctx, []*runnerProc{r2}, h.cfg.Quiet)
		h.progress("steady workload on 1 node, 1 runner: %d clients for %s", h.cfg.Clients, h.cfg.Workload)
		st := steadyWorkload(ctx, s.nc, w, h.cfg.Clients, h.cfg.Workload, "steady1")
		h.base1 = st.rate()
		h.add(bench.Row{Section: SectionCluster, Name: "steady throughput, 1 node, 1 runner", Value: st.rate(), Unit: "runs/s",
			Note: fmt.Sprintf("start, approve, complete; %d clients; %d completed, %d failed%s", h.cfg.Clients, st.completed, st.failed, errNote(st.lastErr))})
		r2.term(10 * time.Second)
	}
	return nil
}

// takeover SIGKILLs r1 and starts a new runner: the time until it owns a
// partition of r1's, and from that claim until one of its suspended runs
// is approved and completes.
func (h *harness) takeover(ctx context.Context, w *watcher, r1 *runnerProc) (*runnerProc, error) {
	h.progress("takeover: SIGKILL runner %s, start another", r1.id)
	r1.kill()
	killed := time.Now()
	r2, startup, err := h.startRunner(ctx, "takeover", 10*time.Minute)
	if err != nil {
		return nil, err
	}
	h.add(bench.Row{Section: SectionTakeover, Name: "new runner start-up", Value: ms(startup), Unit: "ms", Baseline: "empty log start-up", BaseValue: ms(h.res.Facts.Empty.Startup), BaseUnit: "ms"})
	p := 0
	var claim time.Time
	if h.res.Facts.Partitioned {
		deadline := time.Now().Add(2 * time.Minute)
		for claim.IsZero() {
			if st, err := r2.stats(ctx); err == nil && slices.Contains(st.Stats.Partitions, p) {
				claim = time.Now()
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return r2, fmt.Errorf("partition %d not owned by the new runner within 2 minutes of its start", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
		h.add(bench.Row{Section: SectionTakeover, Name: "SIGKILL to partition claimed", Value: ms(claim.Sub(killed)), Unit: "ms", Baseline: "lease", BaseValue: ms(h.cfg.Lease), BaseUnit: "ms"})
	} else {
		claim = time.Now()
		h.add(bench.Row{Section: SectionTakeover, Name: "SIGKILL to new runner serving", Value: ms(claim.Sub(killed)), Unit: "ms",
			Note: "runners own no partitions in this build (runner.Stats lists none): measured from the new runner serving"})
	}
	run := ""
	for i := 0; i < h.cfg.Runs; i++ {
		if KindOf(i) == Suspended && partition.Of(RunID("scale", i), h.cfg.Partitions) == p {
			run = RunID("scale", i)
			break
		}
	}
	if run == "" {
		return r2, fmt.Errorf("no suspended run in partition %d", p)
	}
	t0 := time.Now()
	if _, err := approveSample(ctx, h.nc, w, []string{run}, 2*time.Minute); err != nil {
		return r2, err
	}
	h.add(bench.Row{Section: SectionTakeover, Name: "claim to a run of the partition approved and completed", Value: ms(time.Since(claim)), Unit: "ms",
		Note: fmt.Sprintf("run %s (partition %d); the approve and completion alone took %s", run, p, time.Since(t0).Round(time.Millisecond))})
	if h.res.Facts.Partitioned {
		if err := h.join(ctx, w, r2); err != nil {
			h.fail("join", err)
		}
	}
	return r2, nil
}

// query rebuilds the read models from the log (in this process) and times
// the query service's list pages.
func (h *harness) query(ctx context.Context, s *servers) error {
	nc, err := nats.Connect(s.url, nats.Name("weft-scale-projector"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	log := eventlog.New(js)
	st, err := js.Stream(ctx, eventlog.Stream)
	if err != nil {
		return err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	h.progress("query: rebuilding the read models from %d log messages (projector.Rebuild, as weft rebuild does)", last)
	t0 := time.Now()
	lastProgress := t0
	cp, err := projector.Rebuild(ctx, js, log, func(phase string, done, total uint64) {
		if time.Since(lastProgress) > 5*time.Second || done == total {
			lastProgress = time.Now()
			h.progress("query: rebuild %s %d/%d", phase, done, total)
		}
	})
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	fold := time.Since(t0)
	h.add(bench.Row{Section: SectionQuery, Name: "read models rebuilt", Value: fold.Seconds(), Unit: "s",
		Note: fmt.Sprintf("%d log messages to checkpoint %d: %.0f messages/s", last, cp.Seq, float64(last)/fold.Seconds())})
	svc, err := projector.Serve(ctx, nc, js, log)
	if err != nil {
		return err
	}
	defer svc.Stop()
	c := projector.NewClient(nc)
	if err := c.Ready(ctx); err != nil {
		return err
	}
	time1 := func(q projections.ListQuery) (time.Duration, projections.ListPage, error) {
		t := time.Now()
		pg, err := c.List(ctx, q)
		return time.Since(t), pg, err
	}
	var firsts []time.Duration
	for range 5 {
		d, pg, err := time1(projections.ListQuery{Limit: 50})
		if err != nil {
			return fmt.Errorf("list: %w", err)
		}
		if len(pg.Runs) == 0 {
			return fmt.Errorf("list: empty first page")
		}
		firsts = append(firsts, d)
	}
	slices.Sort(firsts)
	h.add(bench.Row{Section: SectionQuery, Name: "list, first page of 50", Value: ms(firsts[len(firsts)/2]), Unit: "ms", Note: "median of 5"})
	const pages = 20
	cursor := ""
	var dN time.Duration
	for i := range pages {
		d, pg, err := time1(projections.ListQuery{Limit: 50, Cursor: cursor})
		if err != nil {
			return fmt.Errorf("list page %d: %w", i+1, err)
		}
		dN, cursor = d, pg.Next
		if cursor == "" {
			break
		}
	}
	h.add(bench.Row{Section: SectionQuery, Name: fmt.Sprintf("list, page %d of 50 (by cursor)", pages), Value: ms(dN), Unit: "ms", Baseline: "first page", BaseValue: ms(firsts[len(firsts)/2]), BaseUnit: "ms"})
	d, pg, err := time1(projections.ListQuery{Limit: 50, Status: "suspended"})
	if err != nil {
		return fmt.Errorf("list suspended: %w", err)
	}
	h.add(bench.Row{Section: SectionQuery, Name: "list suspended, first page of 50", Value: ms(d), Unit: "ms", Note: fmt.Sprintf("%d runs on the page", len(pg.Runs))})
	return nil
}

// cluster is the 3-node phase: three runners each owning a third of the
// partitions, the steady workload against the one-node baseline, and the
// recovery of a SIGKILLed runner's partitions.
func (h *harness) cluster(ctx context.Context) error {
	n := h.cfg.Nodes
	h.progress("cluster: %d nats-server subprocesses, R%d", n, n)
	s, err := h.startServers(ctx, "cluster", n)
	if err != nil {
		return err
	}
	defer s.close()
	h.use(s)
	f := &h.res.Facts
	if h.cfg.NoOneNode {
		r0, empty, err := h.idle(ctx, "cluster-empty", time.Minute)
		if err != nil {
			return fmt.Errorf("runner on the empty log: %w", err)
		}
		f.Empty = empty
		r0.term(10 * time.Second)
	}
	h.progress("loading %d runs into the cluster", h.cfg.ClusterRuns)
	lr, err := Load(ctx, s.js, LoadConfig{Runs: h.cfg.ClusterRuns, Runner: "scale-loader", Progress: progressWriter{h}, Index: indexActive(s.js, "scale-loader", h.cfg.Partitions)})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	h.add(bench.Row{Section: SectionLoad, Name: fmt.Sprintf("loader rate (%d nodes, R%d)", n, n), Value: lr.Rate(), Unit: "runs/s",
		Note: fmt.Sprintf("%d runs, %d log messages in %s", h.cfg.ClusterRuns, lr.Messages, lr.Elapsed.Round(time.Second))})

	var rs []*runnerProc
	for i := range 3 {
		id := fmt.Sprintf("cluster-%d", i+1)
		if i == 0 && h.cfg.NoOneNode {
			// The first runner is the idle runner with the runs in the
			// log, against the empty log's.
			r, loaded, err := h.idle(ctx, id, 10*time.Minute)
			if err != nil {
				return fmt.Errorf("runner with %d runs in the log: %w", h.cfg.ClusterRuns, err)
			}
			f.Loaded = loaded
			f.Partitioned = partitioned(loaded.Stats)
			h.idleRows(fmt.Sprintf("%d runs, %d nodes", h.cfg.ClusterRuns, n), f.Empty, loaded)
			rs = append(rs, r)
			continue
		}
		r, startup, err := h.startRunner(ctx, id, 10*time.Minute)
		if err != nil {
			return err
		}
		h.progress("runner %s serves after %s", r.id, startup.Round(time.Millisecond))
		rs = append(rs, r)
	}
	w, err := newWatcher(s.nc)
	if err != nil {
		return err
	}
	defer w.close()
	// Every partition owned once, each runner with a third (or the
	// runners own none in this build).
	owners, err := h.settleOwners(ctx, rs, 3*time.Minute)
	f.Owners = owners
	if err != nil {
		h.fail("ownership with three runners", err)
	}
	f.ClusterIdle, f.ClusterActive = map[string]runner.Stats{}, map[string]int{}
	if f.Partitioned {
		for i := 0; i < h.cfg.ClusterRuns; i++ {
			if KindOf(i) != Active {
				continue
			}
			p := partition.Of(RunID("scale", i), h.cfg.Partitions)
			if o := owners[p]; len(o) == 1 {
				f.ClusterActive[o[0]]++
			}
		}
	}
	// The active loaded runs are taken over (their model call issued
	// again, then suspended on an approval and evicted): wait until no
	// runner holds a run.
	deadline := time.Now().Add(time.Minute)
	for {
		all := true
		for _, r := range rs {
			st, err := r.stats(ctx)
			if err != nil {
				return err
			}
			f.ClusterIdle[r.id] = st.Stats
			if st.Stats.Driven != 0 {
				all = false
			}
		}
		if all || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	f.IdleChecked, f.IdleRecovered, err = h.idleRecovered(ctx, s, 300)
	if err != nil {
		h.fail("reading idle runs back", err)
	}
	h.add(bench.Row{Section: SectionCluster, Name: "idle loaded runs with a takeover append", Value: float64(f.IdleRecovered), Unit: "runs",
		Note: fmt.Sprintf("of %d suspended or completed runs read back (seed %d)", f.IdleChecked, h.cfg.Seed)})
	for _, r := range rs {
		st := f.ClusterIdle[r.id]
		h.add(bench.Row{Section: SectionCluster, Name: "idle runner " + r.id + ": runs held", Value: float64(st.Driven), Unit: "runs",
			Note: fmt.Sprintf("%d partitions, Loaded %d, TakenOver %d (active loaded runs in its partitions: %d), RSS %.1f MiB", len(st.Partitions), st.Loaded, st.TakenOver, f.ClusterActive[r.id], mib(r.rss()))})
	}

	// The runners' start-up work (reading the log's unfinished runs,
	// taking over) must be over before the workload is measured.
	t0 := time.Now()
	_, quiet := h.settle(ctx, h.cfg.Quiet)
	quiet = h.quiesce(ctx, rs, h.cfg.Quiet) && quiet
	h.add(bench.Row{Section: SectionCluster, Name: "runners' start-up work, until quiet", Value: ms(time.Since(t0)), Unit: "ms",
		Note: fmt.Sprintf("until no run had work in flight (weft_drivers empty) and each runner used under %s of CPU in %s%s", quietCPU, quietWindow, map[bool]string{false: " (not reached: measured anyway)"}[quiet])})
	h.progress("steady workload on %d nodes, 3 runners: %d clients for %s", n, h.cfg.Clients, h.cfg.Workload)
	st := steadyWorkload(ctx, s.nc, w, h.cfg.Clients, h.cfg.Workload, "steady3")
	h.add(bench.Row{Section: SectionCluster, Name: fmt.Sprintf("steady throughput, %d nodes R%d, 3 runners", n, n), Value: st.rate(), Unit: "runs/s",
		Baseline: "1 node, 1 runner", BaseValue: h.base1, BaseUnit: "runs/s",
		Note: fmt.Sprintf("%d completed, %d failed%s", st.completed, st.failed, errNote(st.lastErr))})

	// SIGKILL the last runner; its partitions must be owned again and a
	// fixed-seed sample of its runs must complete once approved.
	victim := rs[len(rs)-1]
	f.Killed = victim.id
	var mine []int
	for p, o := range owners {
		if slices.Contains(o, victim.id) {
			mine = append(mine, p)
		}
	}
	var candidates []string
	for i := 0; i < h.cfg.ClusterRuns; i++ {
		run := RunID("scale", i)
		if KindOf(i) == Suspended && (!f.Partitioned || slices.Contains(mine, partition.Of(run, h.cfg.Partitions))) {
			candidates = append(candidates, run)
		}
	}
	rng := rand.New(rand.NewPCG(h.cfg.Seed, 17))
	rng.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	f.Sample = candidates[:min(h.cfg.Sample, len(candidates))]
	slices.Sort(f.Sample)
	h.progress("SIGKILL runner %s (%d partitions)", victim.id, len(mine))
	victim.kill()
	killed := time.Now()
	after, err := h.settleOwners(ctx, rs[:len(rs)-1], 3*time.Minute)
	f.OwnersAfterKill = after
	if err != nil {
		h.fail("ownership after the kill", err)
	} else if f.Partitioned {
		h.add(bench.Row{Section: SectionCluster, Name: "SIGKILL to every partition owned again", Value: ms(time.Since(killed)), Unit: "ms", Baseline: "lease", BaseValue: ms(h.cfg.Lease), BaseUnit: "ms"})
	}
	done, err := approveSample(ctx, s.nc, w, f.Sample, 2*time.Minute)
	f.SampleDone = done
	if err != nil {
		h.fail("sample of the killed runner's runs", err)
	}
	h.add(bench.Row{Section: SectionCluster, Name: fmt.Sprintf("SIGKILL to a sample of %d of its runs approved and completed", len(f.Sample)), Value: ms(time.Since(killed)), Unit: "ms",
		Note: fmt.Sprintf("%d of %d completed (seed %d)", done, len(f.Sample), h.cfg.Seed)})
	return nil
}

// settleOwners waits until every partition has exactly one owner among
// rs, the runner the rendezvous assignment (partition.Owner) gives it
// among them, or limit passes; it returns the owners it saw last.
func (h *harness) settleOwners(ctx context.Context, rs []*runnerProc, limit time.Duration) (map[int][]string, error) {
	deadline := time.Now().Add(limit)
	for {
		owners := map[int][]string{}
		any := false
		var ids []string
		for _, r := range rs {
			st, err := r.stats(ctx)
			if err != nil {
				return owners, err
			}
			for _, p := range st.Stats.Partitions {
				owners[p] = append(owners[p], r.id)
				any = true
			}
			ids = append(ids, r.id)
		}
		if !any && !h.res.Facts.Partitioned {
			return owners, nil // no partitions in this build
		}
		ok := true
		for p := range h.cfg.Partitions {
			if o := owners[p]; len(o) != 1 || o[0] != partition.Owner(p, ids) {
				ok = false
			}
		}
		if ok {
			return owners, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return owners, fmt.Errorf("partitions not each owned once, by their assignee, within %s: %s", limit, describeOwners(owners, h.cfg.Partitions))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describeOwners(owners map[int][]string, p int) string {
	var b strings.Builder
	none, many := 0, 0
	for i := range p {
		switch len(owners[i]) {
		case 0:
			none++
		case 1:
		default:
			many++
		}
	}
	fmt.Fprintf(&b, "%d of %d partitions unowned, %d owned twice or more", none, p, many)
	return b.String()
}

// progressWriter prints the loader's lines as progress.
type progressWriter struct{ h *harness }

func (p progressWriter) Write(b []byte) (int, error) {
	p.h.progress("%s", strings.TrimSpace(string(b)))
	return len(b), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mib(b int64) float64        { return float64(b) / (1 << 20) }

func errNote(err error) string {
	if err == nil {
		return ""
	}
	return "; last error: " + err.Error()
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// idleRows adds the rows of a runner with runs in the log (n says how
// many) against the runner on the empty log.
func (h *harness) idleRows(n string, empty, loaded Idle) {
	h.add(bench.Row{Section: SectionStartup, Name: "runner start-up, " + n, Value: ms(loaded.Startup), Unit: "ms", Baseline: "empty log", BaseValue: ms(empty.Startup), BaseUnit: "ms",
		Note: "exec to serving: liveness key written and the command API answering"})
	h.add(bench.Row{Section: SectionStartup, Name: "start-up work, serving to quiet, " + n, Value: ms(loaded.Work), Unit: "ms", Baseline: "empty log", BaseValue: ms(empty.Work), BaseUnit: "ms",
		Note: fmt.Sprintf("claims and takeovers of the log's active runs until under %s CPU in %s; CPU meanwhile %s (empty log %s)", quietCPU, quietWindow, loaded.WorkCPU, empty.WorkCPU)})
	h.add(bench.Row{Section: SectionIdle, Name: "idle runner RSS, " + n, Value: mib(loaded.RSS), Unit: "MiB", Baseline: "empty log", BaseValue: mib(empty.RSS), BaseUnit: "MiB",
		Note: fmt.Sprintf("VmRSS at the end of a %s idle window after start-up", h.cfg.Idle)})
	h.add(bench.Row{Section: SectionIdle, Name: "idle runner CPU, " + n, Value: ms(loaded.CPU), Unit: "ms", Baseline: "empty log", BaseValue: ms(empty.CPU), BaseUnit: "ms",
		Note: fmt.Sprintf("utime+stime over the %s idle window (10 ms ticks)", h.cfg.Idle)})
	h.add(bench.Row{Section: SectionIdle, Name: "idle runner goroutines, " + n, Value: float64(loaded.Goroutines), Unit: "", Baseline: "empty log", BaseValue: float64(empty.Goroutines)})
	h.add(bench.Row{Section: SectionIdle, Name: "runs held / loaded / taken over, " + n, Value: float64(loaded.Stats.Driven), Unit: "runs",
		Note: fmt.Sprintf("runner.Stats: Driven %d, Loaded %d, TakenOver %d", loaded.Stats.Driven, loaded.Stats.Loaded, loaded.Stats.TakenOver)})

}

// quietWindow and quietCPU say when a runner is quiet: under quietCPU of
// CPU time within quietWindow, owning partitions, and its runner.Stats
// (partitions owned, runs read, takeovers) unchanged over the window.
const (
	quietWindow = time.Second
	quietCPU    = 50 * time.Millisecond
)

// quiesce waits until every runner of rs is quiet, or limit passes; it
// reports whether they were. CPU alone is not enough: on a loaded machine
// a runner that has not begun its start-up work yet (waiting for the
// servers) uses no CPU either, and did it in the idle window after
// (CI: 260 ms of CPU and 33 more goroutines there, against 10 ms locally).
func (h *harness) quiesce(ctx context.Context, rs []*runnerProc, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	type mark struct {
		partitions    int
		loaded, taken uint64
	}
	markOf := func(r *runnerProc) (mark, bool) {
		st, err := r.stats(ctx)
		if err != nil {
			return mark{}, false
		}
		return mark{len(st.Stats.Partitions), st.Stats.Loaded, st.Stats.TakenOver}, true
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		before := make([]time.Duration, len(rs))
		marks := make([]mark, len(rs))
		known := true
		for i, r := range rs {
			before[i] = r.cpu()
			m, ok := markOf(r)
			marks[i], known = m, known && ok
		}
		time.Sleep(quietWindow)
		quiet := known
		for i, r := range rs {
			m, ok := markOf(r)
			if !ok || m != marks[i] || m.partitions == 0 || r.cpu()-before[i] >= quietCPU {
				quiet = false
			}
		}
		if quiet {
			return true
		}
	}
	return false
}

// join starts a second runner beside r (which owns every partition): the
// time until it owns its share, handed over gracefully, and until a run of
// a partition it took is approved and completes. The joiner is stopped
// (SIGTERM: its partitions go back) before it returns.
func (h *harness) join(ctx context.Context, w *watcher, r *runnerProc) error {
	j, _, err := h.startRunner(ctx, "joiner", 2*time.Minute)
	if err != nil {
		return err
	}
	defer j.term(30 * time.Second)
	served := time.Now()
	owners, err := h.settleOwners(ctx, []*runnerProc{r, j}, 3*time.Minute)
	if err != nil {
		return err
	}
	var mine []int
	for p, o := range owners {
		if o[0] == j.id {
			mine = append(mine, p)
		}
	}
	h.add(bench.Row{Section: SectionTakeover, Name: "joining runner serving to its share owned", Value: ms(time.Since(served)), Unit: "ms", Baseline: "lease", BaseValue: ms(h.cfg.Lease), BaseUnit: "ms",
		Note: fmt.Sprintf("%d of %d partitions handed over by the running runner", len(mine), h.cfg.Partitions)})
	run := ""
	for i := 0; i < h.cfg.Runs && run == ""; i++ {
		if KindOf(i) == Suspended && slices.Contains(mine, partition.Of(RunID("scale", i), h.cfg.Partitions)) {
			run = RunID("scale", i)
		}
	}
	if run == "" {
		return fmt.Errorf("no suspended run in the joiner's partitions")
	}
	t0 := time.Now()
	if _, err := approveSample(ctx, h.nc, w, []string{run}, 2*time.Minute); err != nil {
		return err
	}
	h.add(bench.Row{Section: SectionTakeover, Name: "a run of a handed-over partition approved and completed", Value: ms(time.Since(t0)), Unit: "ms",
		Note: fmt.Sprintf("run %s, now the joiner's", run)})
	return nil
}

// idleRecovered reads n idle loaded runs back (picked with the seed) and
// counts those whose log holds a run_recovered event.
func (h *harness) idleRecovered(ctx context.Context, s *servers, n int) (checked, recovered int, err error) {
	log := eventlog.New(s.js)
	rng := rand.New(rand.NewPCG(h.cfg.Seed, 18))
	for range n {
		i := rng.IntN(h.cfg.ClusterRuns)
		if KindOf(i) == Active {
			continue
		}
		envs, _, err := log.Load(ctx, RunID("scale", i))
		if err != nil {
			return checked, recovered, err
		}
		checked++
		for _, env := range envs {
			if env.Type == events.NameRunRecovered {
				recovered++
				break
			}
		}
	}
	return checked, recovered, nil
}

// settle waits until no run has work in flight — weft_drivers is empty:
// every run a runner drives with something in flight has an entry there,
// deleted once it finishes or waits only for people (ADR 0019) — or limit
// passes. It returns how many entries were left and whether none was.
func (h *harness) settle(ctx context.Context, limit time.Duration) (int, bool) {
	deadline := time.Now().Add(limit)
	left := -1
	for {
		if kv, err := h.js.KeyValue(ctx, runner.DriversBucket); err == nil {
			switch l, err := kv.ListKeys(ctx); {
			case err == nil:
				left = 0
				for range l.Keys() {
					left++
				}
			case errors.Is(err, jetstream.ErrNoKeysFound):
				left = 0
			}
		}
		if left == 0 {
			return 0, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return left, false
		}
		time.Sleep(500 * time.Millisecond)
	}
}
