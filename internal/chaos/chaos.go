package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/loopport"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/runner"
)

// Config says what one harness run does. The zero value of a field means
// its default.
type Config struct {
	// Seed fixes the workload (runs, their calls, answers, cancels and
	// reconciliations) and the fault schedule. Interleavings still vary:
	// processes run in real time.
	Seed uint64
	// Runs is how many runs are started during the fault phase (default 24).
	Runs int
	// Duration is the length of the fault phase (default 20 s).
	Duration time.Duration
	// FaultEvery is the mean time between two faults (default 400 ms).
	FaultEvery time.Duration
	// Runners and Workers are the numbers of runner and standalone worker
	// processes (defaults 3 and 2).
	Runners, Workers int
	// Nodes is 1 (a single nats-server, R1) or 3 (a cluster, every stream
	// and bucket R3). Default 1.
	Nodes int
	// SyncInterval is every server's sync_interval: 0, the default, is
	// always (an fsync before every acknowledgement, as every server Weft
	// starts); a positive interval is the non-durable mode (nats-server's
	// own default is 2 min).
	SyncInterval time.Duration
	// Quiet bounds the quiet phase, in which every run must finish
	// (default 3 min).
	Quiet time.Duration
	// StableIDs keeps a runner's id across its restarts (runner-1 is
	// always runner-1, as with a fixed --id); by default every process
	// start has its own id, like runners' generated ids.
	StableIDs bool
	// Lease is the runners' liveness lease (default 1 s).
	Lease time.Duration
	// ApprovalExpiry is the agent's approval expiry; 0 chooses it by seed
	// (approvalExpiryOf), negative is none (the agent's default).
	ApprovalExpiry time.Duration
	// Dir is the working directory (stores, ledgers, logs); default a new
	// temporary one, removed afterwards unless Keep is set or a check
	// failed. A Dir given must be empty or missing: a server store or a
	// ledger of an earlier run in it would be checked as this run's.
	Dir  string
	Keep bool
	// Exe and Args start a part of the harness: the process is run with
	// EnvRole set and must call RoleMain (default: this executable, no
	// arguments).
	Exe  string
	Args []string
	// Log receives progress lines (default: discarded).
	Log io.Writer
	// TypeScript, when set, is the directory of the TypeScript SDK
	// (sdk/typescript, with npm ci run in it): the tool ship is then served
	// by a TypeScript worker process (node) instead of the Go workers,
	// writing the same ledger (internal/chaos/typescript.go).
	TypeScript string
}

func (c Config) withDefaults() (Config, error) {
	if c.Runs <= 0 {
		c.Runs = 24
	}
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.FaultEvery <= 0 {
		c.FaultEvery = 400 * time.Millisecond
	}
	if c.Runners <= 0 {
		c.Runners = 3
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.Nodes <= 0 {
		c.Nodes = 1
	}
	if c.Nodes != 1 && c.Nodes != 3 {
		return c, fmt.Errorf("chaos: nodes %d: want 1 or 3", c.Nodes)
	}
	if c.Quiet <= 0 {
		c.Quiet = 3 * time.Minute
	}
	if c.Lease <= 0 {
		c.Lease = time.Second
	}
	if c.ApprovalExpiry == 0 {
		c.ApprovalExpiry = approvalExpiryOf(c.Seed)
	}
	if c.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, err
		}
		c.Exe = exe
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if err := c.checkTypeScript(); err != nil {
		return c, err
	}
	return c, nil
}

// Result is what a harness run found.
type Result struct {
	// Seed and Config are what ran.
	Seed   uint64
	Config Config
	// Faults counts the injected faults by kind ("runner SIGKILL", "nats
	// SIGKILL", "runner SIGKILL after append", ...).
	Faults map[string]int
	// Runs, Actions and BodyStarts count what the workload did: runs
	// started, actions the models asked for, tool bodies started (the
	// ledger's lines).
	Runs, Actions, BodyStarts int
	// LateCalls counts bodies called with an ended context (cancelled, or
	// past its deadline by the clock): they did nothing, as a tool's
	// network call under that context would not (the ledger's late lines).
	LateCalls int
	// UnseenEnds counts bodies that started after their attempt was
	// recorded lost (or their run finished) although their worker's last
	// look began before that: a pause of the worker's process (or CPU
	// starvation) between that look and the body's first instruction.
	// MaxUnseen is the longest such start after the end, MaxLookGap the
	// longest time from such a look's answer to its start.
	UnseenEnds            int
	MaxUnseen, MaxLookGap time.Duration
	// Outcomes counts the runs' outcomes and Ends the actions' end states.
	Outcomes, Ends map[string]int
	// Takeovers counts run_recovered events.
	Takeovers int
	// Precision counts the uncertain actions and those that never started
	// a body (precision.go).
	Precision Precision
	// Answers counts the answers the workload's commands got, by kind and
	// code ("approve ok", "approve already_answered", "cancel transport").
	Answers map[string]int
	// Violations lists every check that failed; a correct runtime has none.
	Violations []Violation
	// Notes are observations that are not violations (processes that
	// exited on their own, slow drains).
	Notes []string
	// Elapsed is the wall time of the whole run.
	Elapsed time.Duration
	// Dir is the working directory when it is kept (a check failed,
	// Config.Keep, or Config.Dir given); empty when it was removed. Write
	// prints it; the caller removes it when done with it.
	Dir string
}

func (r *Result) unseen(after, gap time.Duration) {
	r.UnseenEnds++
	r.MaxUnseen, r.MaxLookGap = max(r.MaxUnseen, after), max(r.MaxLookGap, gap)
}

// FaultCount is the total number of injected faults.
func (r *Result) FaultCount() int {
	n := 0
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// Violation is one failed check.
type Violation struct {
	// Check names the rule (see the package doc).
	Check string
	// Run and Action locate it; Detail says what was seen.
	Run, Action, Detail string
}

// String is the violation as one line: check, run, action and detail.
func (v Violation) String() string {
	s := v.Check
	if v.Run != "" {
		s += " " + v.Run
	}
	if v.Action != "" {
		s += " " + v.Action
	}
	return s + ": " + v.Detail
}

// Write prints the report: seed, faults by kind, runs, actions, body
// starts and violations.
func (r *Result) Write(w io.Writer) {
	mode := "sync_interval: always"
	if r.Config.SyncInterval > 0 {
		mode = "sync_interval: " + r.Config.SyncInterval.String()
	}
	fmt.Fprintf(w, "chaos seed %d: %d nats node(s), %d runners, %d workers, %s, fault phase %s, %s total\n",
		r.Seed, r.Config.Nodes, r.Config.Runners, r.Config.Workers, mode, r.Config.Duration, r.Elapsed.Round(time.Second))
	fmt.Fprintf(w, "  faults: %d (%s)\n", r.FaultCount(), counts(r.Faults))
	fmt.Fprintf(w, "  runs: %d (%s); takeovers: %d\n", r.Runs, counts(r.Outcomes), r.Takeovers)
	fmt.Fprintf(w, "  actions: %d (%s); body starts: %d; late calls: %d\n", r.Actions, counts(r.Ends), r.BodyStarts, r.LateCalls)
	r.Precision.write(w, r.FaultCount())
	fmt.Fprintf(w, "  answers: %s\n", counts(r.Answers))
	if r.UnseenEnds > 0 {
		fmt.Fprintf(w, "  starts after an end their worker's last look could not see: %d (up to %s after the end, %s after the look)\n",
			r.UnseenEnds, r.MaxUnseen.Round(time.Millisecond), r.MaxLookGap.Round(time.Millisecond))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	fmt.Fprintf(w, "  violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(w, "    %s\n", v)
	}
	if r.Dir != "" {
		fmt.Fprintf(w, "  kept: %s (remove it when done: rm -r)\n", r.Dir)
	}
}

// WriteTotal prints the sum of several runs' reports (one line per
// count, as Write), for a run of several seeds: faults by kind, runs,
// actions, body starts, takeovers and violations.
func WriteTotal(w io.Writer, rs []*Result) {
	var (
		faults, outcomes, ends = map[string]int{}, map[string]int{}, map[string]int{}
		runs, actions, starts  int
		late, unseen           int
		maxUnseen, maxGap      time.Duration
		takeovers, violations  int
		elapsed                time.Duration
		seeds                  []string
		precision              Precision
	)
	for _, r := range rs {
		for k, v := range r.Faults {
			faults[k] += v
		}
		for k, v := range r.Outcomes {
			outcomes[k] += v
		}
		for k, v := range r.Ends {
			ends[k] += v
		}
		runs, actions, starts = runs+r.Runs, actions+r.Actions, starts+r.BodyStarts
		late += r.LateCalls
		unseen += r.UnseenEnds
		maxUnseen, maxGap = max(maxUnseen, r.MaxUnseen), max(maxGap, r.MaxLookGap)
		takeovers, violations = takeovers+r.Takeovers, violations+len(r.Violations)
		precision = precision.plus(r.Precision)
		elapsed += r.Elapsed
		seeds = append(seeds, fmt.Sprint(r.Seed))
	}
	nfaults := 0
	for _, v := range faults {
		nfaults += v
	}
	fmt.Fprintf(w, "total of seeds %s: %s\n", strings.Join(seeds, ","), elapsed.Round(time.Second))
	fmt.Fprintf(w, "  faults: %d (%s)\n", nfaults, counts(faults))
	fmt.Fprintf(w, "  runs: %d (%s); takeovers: %d\n", runs, counts(outcomes), takeovers)
	fmt.Fprintf(w, "  actions: %d (%s); body starts: %d; late calls: %d\n", actions, counts(ends), starts, late)
	fmt.Fprintf(w, "  starts after an end their worker's last look could not see: %d (up to %s after the end, %s after the look)\n",
		unseen, maxUnseen.Round(time.Millisecond), maxGap.Round(time.Millisecond))
	precision.write(w, nfaults)
	fmt.Fprintf(w, "  violations: %d\n", violations)
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// harness is one run of the harness.
type harness struct {
	cfg        Config
	dir        string
	start      time.Time
	faultStart time.Time

	nodes     []*part
	runners   []*part
	workers   []*part
	projector *part
	urls      string // the nodes' client URLs, each with token
	token     string // the secret every node requires of its clients
	ledger    string

	nc     *nats.Conn
	js     jetstream.JetStream
	client *api.Client
	evlog  *eventlog.Log

	mu         sync.Mutex
	faults     map[string]int
	notes      []string
	violations []Violation
	cmds       []command
	kills      []runnerKill // availability.go
	headKey    string       // the runners' head key (public)
	foreign    bool         // a foreign server was recorded (foreignServer)
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "chaos %6.1fs "+format+"\n", append([]any{time.Since(h.start).Seconds()}, args...)...)
}

func (h *harness) notef(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.notes = append(h.notes, fmt.Sprintf(format, args...))
}

func (h *harness) fault(kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[kind]++
}

func (h *harness) violate(v Violation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, v)
}

// exited is called when a part's process ended without the schedule
// asking: a runner that SIGKILLed itself after an append (its own fault),
// or a process that stopped on its own.
func (h *harness) exited(p *part, pr *proc) {
	st := pr.state
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		if ws.Signal() == syscall.SIGKILL && p.role == "runner" {
			h.fault("runner SIGKILL after append")
			return
		}
		h.notef("%s exited on signal %s", p.name, ws.Signal())
		return
	}
	tail := logTail(p.log, 3)
	if st.ExitCode() == 2 && strings.Contains(tail, "panic") {
		h.violate(Violation{Check: "process_panicked", Detail: fmt.Sprintf("%s: %s", p.name, tail)})
		return
	}
	h.notef("%s exited by itself (code %d): %s", p.name, st.ExitCode(), tail)
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// Run runs the harness once: it starts the nats-server node(s), the
// runners, the workers and the projector as processes, plays the seeded
// workload while the seeded schedule injects faults for cfg.Duration,
// then lets every run finish in a quiet phase and checks the ledger, the
// acknowledgements and the log (see the package doc). Every process it
// started is killed and reaped before it returns, whatever happens.
// The error is for a harness that could not run; violations are in the
// Result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, start: time.Now(), faults: map[string]int{}}
	h.dir = cfg.Dir
	if h.dir != "" {
		if entries, err := os.ReadDir(h.dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("chaos: working directory %s is not empty: the store and ledger of an earlier run would be checked as this one's; give an empty or new directory", h.dir)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if h.dir == "" {
		if h.dir, err = os.MkdirTemp("", fmt.Sprintf("weft-chaos-%d-", cfg.Seed)); err != nil {
			return nil, err
		}
	}
	var res *Result
	for _, d := range []string{"acks", "logs"} {
		if err = os.MkdirAll(filepath.Join(h.dir, d), 0o755); err != nil {
			break
		}
	}
	if err == nil {
		res, err = h.run(ctx)
	}
	// The temporary directory is kept only for a violation (its stores,
	// ledger and logs are the evidence; Write prints where) or when asked
	// (Keep); a harness that could not run removes it too, as a clean run
	// does.
	keep := cfg.Dir != "" || cfg.Keep || (err == nil && res != nil && len(res.Violations) > 0)
	if !keep {
		os.RemoveAll(h.dir)
	}
	if err != nil {
		if keep && cfg.Dir == "" {
			err = fmt.Errorf("%w (working directory kept: %s)", err, h.dir)
		}
		return res, err
	}
	res.Elapsed = time.Since(h.start)
	if keep {
		res.Dir = h.dir
	}
	return res, nil
}

func (h *harness) run(ctx context.Context) (*Result, error) {
	sctx, stopParts := context.WithCancel(context.Background())
	var parts sync.WaitGroup
	// Every process is killed and reaped on every way out.
	defer func() {
		stopParts()
		parts.Wait()
		if h.nc != nil {
			h.nc.Close()
		}
	}()
	supervise := func(p *part) {
		parts.Add(1)
		go func() { defer parts.Done(); p.supervise(sctx) }()
	}
	if err := h.writeNodes(); err != nil {
		return nil, err
	}
	for _, n := range h.nodes {
		supervise(n)
	}
	if err := h.connect(ctx); err != nil {
		return nil, err
	}
	h.logf("nats up at %s", h.urls)
	h.ledger = filepath.Join(h.dir, "ledger")
	common := []string{"NATS_URL=" + h.urls, envLedger + "=" + h.ledger, fmt.Sprintf("%s=%d", envReplicas, h.cfg.Nodes),
		envLease + "=" + h.cfg.Lease.String(), envAckWait + "=1s"}
	common = h.withTypeScript(common)
	common = append(common, expiryEnv(h.cfg.ApprovalExpiry)...)
	// The runners sign their runs' heads with the deployment's one head
	// key, as a deployment's do (signing's cost is in every figure), and
	// the check verifies every finished run against it (checkSigned).
	headKey := filepath.Join(h.dir, runner.HeadKeyFile)
	kp, _, kerr := runner.LoadOrCreateHeadKey(headKey)
	if kerr == nil {
		h.headKey, kerr = kp.PublicKey()
	}
	if kerr != nil {
		return nil, kerr
	}
	common = append(common, runner.EnvHeadKey+"="+headKey)
	for i := range h.cfg.Runners {
		h.runners = append(h.runners, h.newPart(fmt.Sprintf("runner-%d", i+1), "runner", common))
	}
	for i := range h.cfg.Workers {
		h.workers = append(h.workers, h.newPart(fmt.Sprintf("worker-%d", i+1), "worker", common))
	}
	h.workers = append(h.workers, h.typeScriptWorkers(common)...)
	h.projector = h.newPart("projector", "projector", common)
	for _, p := range h.runners {
		supervise(p)
	}
	for _, p := range h.workers {
		supervise(p)
	}
	supervise(h.projector)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := h.client.Ready(rctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("chaos: the runners never served: %w", err)
	}
	h.logf("parts up; fault phase of %s with %d runs", h.cfg.Duration, h.cfg.Runs)

	plans := append(makePlans(h.cfg), expiryProbes(h.cfg)...)
	w := &workload{h: h, plans: plans, quiet: make(chan struct{})}
	wdone := make(chan struct{})
	wctx, stopWork := context.WithTimeout(ctx, h.cfg.Duration+h.cfg.Quiet)
	defer stopWork()
	go func() { defer close(wdone); w.run(wctx) }()

	h.faultStart = time.Now()
	fctx, stopFaults := context.WithTimeout(ctx, h.cfg.Duration)
	h.schedule(fctx)
	stopFaults()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	h.logf("quiet phase: everything restarted and continued")
	h.quiet()
	close(w.quiet)
	// From here no fault comes: every run that needs no person must move
	// by itself (checkStranded), until the workload is done.
	stranded := make(chan struct{})
	go func() { defer close(stranded); h.watchStranded(ctx, w, wdone) }()
	<-wdone
	<-stranded
	stopWork()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	h.logf("workload done; waiting for weft_drivers to hold only runs with work in flight")
	h.checkDrivers(ctx)
	h.logf("checking that every unfinished run can be answered")
	h.checkAnswerable(ctx, w)
	h.logf("stopping workers, then runners once every finished run's entry is gone")
	h.settle(ctx)
	h.checkInternalRefusals()
	h.checkForeignServers()
	h.logf("checking")
	h.checkTypeScriptServed()
	res := h.check(ctx, w)
	return res, nil
}

func (h *harness) newPart(name, role string, env []string) *part {
	return &part{h: h, name: name, role: role, env: env, log: filepath.Join(h.dir, "logs", name+".log")}
}

// writeNodes writes each node's configuration file. Every node requires
// the harness's own token of its clients, and h.urls carries it (so do
// the child processes' NATS_URL and the harness's own connection): a node
// keeps its port across its restarts, and while it is down another
// harness's node (another chaos test, in parallel) can take that port; a
// client of this harness reconnecting there is refused (authorization
// violation) and keeps trying its addresses (IgnoreAuthErrorAbort: the
// harness's connection, the Go parts', the TypeScript worker's), instead
// of working against the other harness's streams, of the same names, and
// reporting acknowledged commands lost from its own log. The refusal
// itself is a violation, foreign_server (natsOptions): the run is not
// silently passed either.
func (h *harness) writeNodes() error {
	n := h.cfg.Nodes
	ports, err := loopport.Free(2 * n)
	if err != nil {
		return err
	}
	if h.token, err = loopport.Token(); err != nil {
		return err
	}
	var urls, routes []string
	for i := range n {
		urls = append(urls, fmt.Sprintf("nats://%s@127.0.0.1:%d", h.token, ports[i]))
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	h.urls = strings.Join(urls, ",")
	for i := range n {
		name := fmt.Sprintf("nats-%d", i+1)
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nmax_payload: 8MB\n", name, ports[i])
		fmt.Fprintf(&b, "authorization { token: %q }\n", h.token)
		fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n", filepath.Join(h.dir, name))
		if h.cfg.SyncInterval > 0 {
			fmt.Fprintf(&b, "  sync_interval: %q\n", h.cfg.SyncInterval.String())
		} else {
			b.WriteString("  sync_interval: always\n")
		}
		b.WriteString("}\n")
		if n > 1 {
			fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", h.clusterName(), ports[n+i], strings.Join(routes, ", "))
		}
		conf := filepath.Join(h.dir, name+".conf")
		if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
			return err
		}
		h.nodes = append(h.nodes, h.newPart(name, "nats", []string{envConf + "=" + conf}))
	}
	return nil
}

// natsOptions are the harness's own connection's options. It reconnects
// for ever, and keeps trying when a node refuses it (IgnoreAuthErrorAbort:
// nats.go would otherwise close the connection for good after a second
// refusal by one server, and every later check would fail on "connection
// closed", naming no cause). A refusal means another server holds one of
// this harness's nodes' ports (writeNodes): the run did not test what it
// meant to, so it is a violation (checkForeignServer) naming the cause.
func (h *harness) natsOptions() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Name("chaos-harness"), nats.IgnoreAuthErrorAbort(),
		// Broken connections are what the faults cause: logged with -v,
		// not printed on the harness's stderr as nats.go's default does.
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			h.logf("nats: %v", err)
			if errors.Is(err, nats.ErrAuthorization) {
				h.foreignServer("the harness's own connection was refused (authorization violation)")
			}
		})}
}

// foreignServer records, once, that a client of this harness reached a
// server that is not this harness's node.
func (h *harness) foreignServer(detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.foreign {
		return
	}
	h.foreign = true
	h.violations = append(h.violations, Violation{Check: checkForeignServer,
		Detail: detail + ": another server holds a port of this harness's nodes (another chaos run in parallel?)"})
}

// checkForeignServers scans the child processes' logs for a refusal by a
// server (nats.go's default error handler logs it, chaos-worker.js logs
// its connection's errors): that child reached a server that is not this
// harness's node (see natsOptions).
func (h *harness) checkForeignServers() {
	files, _ := filepath.Glob(filepath.Join(h.dir, "logs", "*.log"))
	for _, name := range files {
		if strings.HasPrefix(filepath.Base(name), "nats-") {
			continue // a node's own log: another harness's client refused here
		}
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		if strings.Contains(strings.ToLower(string(b)), "authorization violation") {
			h.foreignServer(filepath.Base(name) + " logged an authorization violation")
		}
	}
}

// clusterName is the harness's cluster's own name: routes carry no token,
// and a node keeps its route port across its restarts as it keeps its
// client port; a route to a port another harness's node took is refused
// by nats-server (the cluster names differ) instead of merging the two
// harnesses' clusters.
func (h *harness) clusterName() string { return "chaos-" + h.token[:8] }

// connect connects the harness's own client (the workload and the checks)
// and provisions every asset once the server (or the cluster) answers.
func (h *harness) connect(ctx context.Context) error {
	nc, err := nats.Connect(h.urls, h.natsOptions()...)
	if err != nil {
		return err
	}
	h.nc = nc
	if h.js, err = jetstream.New(nc); err != nil {
		return err
	}
	h.client = api.NewClient(nc)
	h.evlog = eventlog.New(h.js)
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err = runner.Provision(cctx, h.js, h.cfg.Lease, runner.WithReplicas(h.cfg.Nodes), runner.WithAssets(projector.Assets()...))
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: provision: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// quiet ends the fault phase: every paused process continues, and the
// harness waits until every part runs again.
func (h *harness) quiet() {
	all := h.all()
	for _, p := range all {
		p.resume()
	}
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		ok := true
		for _, p := range all {
			if !p.up() {
				ok = false
			}
		}
		if ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.notef("not every part was up a minute into the quiet phase")
}

// settle stops the workers and then the runners for good before the
// checks, so that the log stops growing (late reports of stale attempts
// are recorded as refused until then). The workers go first: a late
// report a runner records after a run's end is followed by a signed head,
// and the run's weft_drivers entry stays until it is signed
// (docs/adr/0026-signed-heads.md); the runners are stopped once no such
// entry is left (within driverGrace), so that none is killed between
// that append and its signature with no runner left to sign it. Every
// run has finished: nothing is left to drain, so they are killed
// (SIGTERM drains are faults of the schedule).
func (h *harness) settle(ctx context.Context) {
	for _, p := range h.workers {
		p.halt()
	}
	deadline := time.Now().Add(h.driverGrace())
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if left, err := h.driverLeftovers(ctx); err == nil && len(left) == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range h.runners {
		p.halt()
	}
}

func (h *harness) all() []*part {
	all := append([]*part{}, h.nodes...)
	all = append(all, h.runners...)
	all = append(all, h.workers...)
	return append(all, h.projector)
}

// rng returns the seeded generator of one stream of decisions.
func (h *harness) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(h.cfg.Seed, stream))
}
