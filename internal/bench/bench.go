// Package bench measures Weft on the machine it runs on: `weft bench`
// (cmd/weft) and `go tool -modfile=devtools/go.mod task bench` call Run. Every figure is printed
// with a baseline measured in the same run on the same server and their
// ratio, so that numbers taken on a loaded or a different machine can be
// compared by their ratios.
//
// The baselines are raw JetStream operations with the headers Weft's log
// uses: a synchronous publish with the per-run expected-sequence check from
// 1 and from 16 writers, an asynchronous publish, and an ordered-consumer
// read. The figures are:
//
//   - log append: eventlog.Append (ids, hash chain, encoding, the check)
//     from 1 and 16 writers;
//   - durable step: from an attempt's fence to its result recorded (the
//     recorded times of attempt_fenced and attempt_reported), p50/p99/max;
//   - run latency (1 client) and throughput at 1, 16 and 64 clients of the
//     workload run (start, 3 sequential tool calls, each one model turn
//     and one instant tool body, then the final answer), with the CPU per
//     run of the whole process (runner, worker, embedded server, clients);
//   - what a run costs, at 1 and 64 clients: appends, NATS messages (the
//     runner's and the clients' connections), JetStream round trips
//     (API requests and acknowledged writes) and fsyncs under
//     sync_interval: always (derived from the acknowledged writes and the
//     group-commit batches), each beside the floor of one durable write
//     per step, the start and the answer; and fsyncs per second at 64;
//   - recovery: runs whose runner subprocess is SIGKILLed while their
//     replayable tool bodies run, until each finished on another runner;
//   - projection rebuild: projector.Rebuild over the log the run wrote;
//   - idle runs: runs suspended on an approval cost a runner nothing until
//     a command reaches them (partitions, lazy load): a fresh runner
//     subprocess's start to owning every partition and its resident
//     memory with them in the log, against a fresh runner before they
//     existed, and the first command of an idle run (its load from the
//     log);
//   - history bytes per turn for realistic messages (a 1 KiB assistant
//     text and a 500-byte tool result per turn).
//
// The server is embedded in the process (file storage in a temporary
// directory, TCP on loopback for the subprocesses) unless Config.URL names
// an external one.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Config says what to measure and where.
type Config struct {
	// URL is an external NATS server; empty embeds one.
	URL string
	// Quick runs every measure briefly (under a minute in all).
	Quick bool
	// SyncInterval is the embedded server's sync_interval: 0, the
	// default, is always (every write is fsynced before it is
	// acknowledged, as every server Weft starts by default); a positive
	// interval is the non-durable mode (nats-server's own default is 2
	// min).
	SyncInterval time.Duration
	// NoGroupCommit runs the runner without group commit, which it has
	// (runner.WithGroupCommit) when the server syncs always: to measure
	// what group commit gives.
	NoGroupCommit bool
	// IdleRuns is how many suspended runs the idle-run measure creates
	// (0: 300 with Quick, 20,000 without; rounded up to a multiple of 64,
	// its clients).
	IdleRuns int
	// Progress receives a line per step while the bench runs (nil: none).
	Progress io.Writer
	// Exec returns the command line that starts this program as a bench
	// subprocess (see Child); nil uses os.Executable with no arguments.
	Exec func() (string, []string)
	// Only, when not empty, runs only the sections it names (Section
	// constants).
	Only []string
}

// The sections of a report, in the order Run measures them.
const (
	// SectionBaseline holds the raw JetStream baselines.
	SectionBaseline = "baseline"
	// SectionAppend holds eventlog.Append from 1 and 16 writers.
	SectionAppend = "log append"
	// SectionStep holds the durable steps, fence to result recorded.
	SectionStep = "durable step"
	// SectionRun holds run latency, throughput and CPU per run.
	SectionRun = "run"
	// SectionHistory holds the log's bytes per turn.
	SectionHistory = "history"
	// SectionRecovery holds recovery after a SIGKILLed runner.
	SectionRecovery = "recovery"
	// SectionRebuild holds the projection rebuild.
	SectionRebuild = "rebuild"
	// SectionIdle holds what idle runs cost a runner: its claim of the
	// partitions and its memory with them in the log, and the first
	// command of one.
	SectionIdle = "idle runs"
)

// Row is one figure of a report with its baseline.
type Row struct {
	// Section is one of the Section constants.
	Section string `json:"section"`
	// Name says what was measured.
	Name string `json:"name"`
	// Value is the figure, in Unit.
	Value float64 `json:"value"`
	// Unit is the figure's unit ("ms", "ops/s", "runs/s", "bytes", …).
	Unit string `json:"unit"`
	// Baseline names the figure it is compared with, measured in the same
	// run (empty for the baselines themselves).
	Baseline string `json:"baseline,omitempty"`
	// BaseValue is the baseline's value, in BaseUnit.
	BaseValue float64 `json:"base_value,omitempty"`
	// BaseUnit is the baseline's unit.
	BaseUnit string `json:"base_unit,omitempty"`
	// Ratio is Value / BaseValue (0 without a baseline).
	Ratio float64 `json:"ratio,omitempty"`
	// Note explains the figure or the ratio.
	Note string `json:"note,omitempty"`
}

// Machine describes where the report was taken.
type Machine struct {
	// CPUs is runtime.NumCPU.
	CPUs int `json:"cpus"`
	// GOOS and GOARCH are the platform.
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	// Go is the Go version that built the program.
	Go string `json:"go"`
	// LoadBefore and LoadAfter are the 1-minute load averages when the run
	// started and ended (Linux; empty elsewhere).
	LoadBefore string `json:"load_before,omitempty"`
	LoadAfter  string `json:"load_after,omitempty"`
	// Server says which NATS server was measured.
	Server string `json:"server"`
}

// Report is the result of Run.
type Report struct {
	// Schema is 1.
	Schema int `json:"schema"`
	// Started is when the run started.
	Started time.Time `json:"started"`
	// Seconds is how long it took.
	Seconds float64 `json:"seconds"`
	// Quick is Config.Quick.
	Quick bool `json:"quick"`
	// Machine says where.
	Machine Machine `json:"machine"`
	// Rows are the figures, baselines first.
	Rows []Row `json:"rows"`
	// Errors lists the measures that could not be taken, and why.
	Errors []string `json:"errors,omitempty"`
}

// Run measures everything Config asks for and returns the report. A
// measure that fails is listed in Report.Errors and the others go on; Run
// returns an error only when no server could be had.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	b := &bencher{cfg: cfg, out: cfg.Progress, start: time.Now()}
	if b.out == nil {
		b.out = io.Discard
	}
	rep := &Report{Schema: 1, Started: b.start.UTC(), Quick: cfg.Quick, Machine: Machine{
		CPUs: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, Go: runtime.Version(), LoadBefore: loadAverage(),
	}}
	b.rep = rep
	srv, err := startServer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	b.srv = srv
	rep.Machine.Server = srv.describe()
	if srv.sync {
		rep.Machine.Server += map[bool]string{false: ", runner with group commit", true: ", runner without group commit"}[cfg.NoGroupCommit]
	}
	b.progress("server: %s", rep.Machine.Server)

	steps := []struct {
		section string
		fn      func(context.Context) error
	}{
		{SectionBaseline, b.baselines},
		{SectionAppend, b.appends},
		{SectionRun, b.runs},
		{SectionHistory, b.history},
		{SectionRecovery, b.recovery},
		{SectionRebuild, b.rebuild},
		{SectionIdle, b.idle},
	}
	for _, s := range steps {
		if ctx.Err() != nil {
			break
		}
		if !b.wanted(s.section) && s.section != SectionBaseline {
			continue
		}
		if err := s.fn(ctx); err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", s.section, err))
			b.progress("%s: FAILED: %v", s.section, err)
		}
	}
	b.stopRuntime()
	rep.Seconds = time.Since(b.start).Seconds()
	rep.Machine.LoadAfter = loadAverage()
	return rep, ctx.Err()
}

// bencher carries one Run.
type bencher struct {
	cfg   Config
	out   io.Writer
	start time.Time
	rep   *Report
	srv   *server
	base  baselines
	rt    *inproc // the in-process runtime, while it runs
}

func (b *bencher) wanted(section string) bool {
	if len(b.cfg.Only) == 0 {
		return true
	}
	for _, s := range b.cfg.Only {
		if s != "" && strings.Contains(section, s) {
			return true
		}
	}
	return false
}

func (b *bencher) progress(format string, args ...any) {
	fmt.Fprintf(b.out, "[%5.1fs] %s\n", time.Since(b.start).Seconds(), fmt.Sprintf(format, args...))
}

func (b *bencher) add(r Row) {
	if r.BaseValue != 0 {
		r.Ratio = r.Value / r.BaseValue
	}
	b.rep.Rows = append(b.rep.Rows, r)
	if r.Baseline != "" {
		b.progress("  %s: %s %s (%s %s %s, ×%.2f)", r.Name, num(r.Value), r.Unit, r.Baseline, num(r.BaseValue), r.BaseUnit, r.Ratio)
	} else {
		b.progress("  %s: %s %s", r.Name, num(r.Value), r.Unit)
	}
}

// pick returns quick or full as Config.Quick says.
func pick[T any](b *bencher, quick, full T) T {
	if b.cfg.Quick {
		return quick
	}
	return full
}

// WriteTable prints rep as an aligned table: section, figure, value,
// baseline, its value and the ratio.
func WriteTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "section\tfigure\tvalue\tbaseline (same run)\tbaseline value\tratio\n")
	for _, r := range rep.Rows {
		base, bv, ratio := "-", "-", "-"
		if r.Baseline != "" {
			base, bv = r.Baseline, num(r.BaseValue)+" "+r.BaseUnit
			ratio = fmt.Sprintf("×%.2f", r.Ratio)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\t%s\t%s\n", r.Section, r.Name, num(r.Value), r.Unit, base, bv, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rep.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "  · %s — %s\n", r.Name, r.Note)
		}
	}
	fmt.Fprintf(w, "machine: %d CPUs %s/%s %s; load %s → %s; server: %s; %.0f s%s\n", rep.Machine.CPUs, rep.Machine.GOOS, rep.Machine.GOARCH,
		rep.Machine.Go, rep.Machine.LoadBefore, rep.Machine.LoadAfter, rep.Machine.Server, rep.Seconds, map[bool]string{true: " (--quick)"}[rep.Quick])
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "not measured: %s\n", e)
	}
	return nil
}

// WriteJSON writes rep as indented JSON.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100:
		return fmt.Sprintf("%.1f", v)
	case v >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
