// Package runner executes Weft runs: the library applications embed with
// their agents, tools and policy (cmd/runner is a thin main around it).
//
// # Order of work
//
// For every command — a start, an approval, a worker's report, a timer
// firing, a model reply — the runner driving the run:
//
//  1. holds the run's state (folded from the log, kept in memory while it
//     drives the run) and decides the command with aggregate.Decide at the
//     store time it will record;
//  2. appends the events with per-run optimistic concurrency
//     (eventlog.Append against the head it decided on); on a conflict it
//     re-reads the run and decides again, performing no effect;
//  3. THEN acts on aggregate.Pending: calls the model for a requested turn,
//     validates calls and runs the policy (then decides ResolveCalls),
//     publishes fenced attempts as tasks on the queue of the run's agent
//     identity, weft.task.<agent>.<version>.<tool> (deduplicated by
//     Nats-Msg-Id), stops bodies on weft.stop.<run>, and arms timers
//     (a local timer for precision plus a durable timer.Timers schedule).
//
// # Drivers, liveness and recovery
//
// Each run has one driver: the runner recorded in its RunStarted or latest
// RunRecovered. Any runner receives commands (the "weft" micro service is a
// queue group); a runner that is not the driver forwards the command to the
// driver on weft.runner.<id>.cmd while the driver is alive, and otherwise
// takes the run over first (aggregate.Recover, cause runner_lost or
// handed_off: exactly one takeover append wins). So exactly one process
// performs each effect.
//
// Liveness: each runner puts its id in the KV bucket weft_runners every
// lease/4; the bucket's max age is the lease (WithLease, default 1 s), so a
// SIGKILLed runner's key disappears within the lease. The KV bucket
// weft_drivers maps every unfinished run to its driver. Every runner scans
// it every lease/4 and takes over the runs whose driver is gone, so runs
// in flight continue within about lease + lease/4 (the SEMANTICS §8
// outcomes follow from the recorded fences). SIGTERM (cancelling Run's
// context) drains: no new commands are taken and every driven run is handed
// off at once (RunHandedOff: it fences no new attempt and requests no model
// turn); running bodies and model calls in flight may finish within the
// drain window and are recorded; then the runs are released and the
// runner's liveness key is deleted so another runner takes over at once.
// Until then a live draining runner keeps its runs: commands for them are
// forwarded to it.
package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/worker"
)

// The KV buckets and subjects of the runner (docs/protocol/40-commands.md).
const (
	// RunnersBucket holds one key per live runner (its id), kept alive by
	// heartbeat puts; the bucket's max age is the lease.
	RunnersBucket = worker.RunnersBucket
	// DriversBucket maps each unfinished run to the runner driving it.
	DriversBucket = "weft_drivers"
	// SnapshotsBucket holds each run's state snapshot with the head it was
	// folded to: {"schema":1,"head":{...},"state":{...}}.
	SnapshotsBucket = "weft_snapshots"
	// ForwardPrefix prefixes the subject on which a runner takes commands
	// forwarded to it as driver: weft.runner.<id>.cmd.
	ForwardPrefix = "weft.runner."
)

// DefaultLease is the default liveness lease.
const DefaultLease = time.Second

// Option configures a Runner.
type Option func(*Runner)

// WithID sets the runner id (one NATS token). Default: "runner-" and 8
// random hex digits. Ids must be unique among live runners.
func WithID(id string) Option { return func(r *Runner) { r.id = id } }

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option { return func(r *Runner) { r.log = l } }

// WithLease sets the liveness lease: a runner that stopped heartbeating is
// considered lost after it, and its runs are taken over within about
// 1.25 × lease. Default 1 s.
func WithLease(d time.Duration) Option { return func(r *Runner) { r.lease = d } }

// WithDrainWindow sets how long a draining runner waits for running
// bodies and model calls before handing its runs off. Default 10 s.
func WithDrainWindow(d time.Duration) Option { return func(r *Runner) { r.drain = d } }

// WithoutWorker stops the runner from running the agents' tool bodies in
// its own process (run workers separately then).
func WithoutWorker() Option { return func(r *Runner) { r.noWorker = true } }

// WithExternalTools leaves the tasks of the named tools to workers outside
// this process (another process, another language): the in-process worker
// does not consume them. A name covers that tool in every served agent
// identity that binds it, each with its own queue and consumer
// (worker.Queue); a name no served agent binds as a tool body is an error
// of New.
func WithExternalTools(names ...string) Option {
	return func(r *Runner) {
		if r.external == nil {
			r.external = map[string]bool{}
		}
		for _, n := range names {
			r.external[n] = true
		}
	}
}

// WithWorkerOptions passes options to the in-process worker.
func WithWorkerOptions(opts ...worker.Option) Option {
	return func(r *Runner) { r.workerOpts = append(r.workerOpts, opts...) }
}

// WithTelemetry sets the telemetry sink (spans and the SEMANTICS §11
// names). Default: telemetry.Nop-equivalent (spans to the global no-op
// tracer provider, names to the logger).
func WithTelemetry(t *telemetry.Telemetry) Option { return func(r *Runner) { r.tel = t } }

// WithClock replaces the clock that stamps recorded times (tests).
func WithClock(now func() time.Time) Option { return func(r *Runner) { r.now = now } }

// Runner drives runs of a set of agents.
type Runner struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	evlog      *eventlog.Log
	timers     *timer.Timers
	id         string
	log        *slog.Logger
	tel        *telemetry.Telemetry
	now        func() time.Time
	lease      time.Duration
	drain      time.Duration
	noWorker   bool
	noScan     bool // tests (export_test.go)
	external   map[string]bool
	workerOpts []worker.Option

	agents map[string]*agent.Agent // name@version and name (first registered)
	list   []*agent.Agent
	live   jetstream.KeyValue
	// liveStream is the stream of live, for reading delete markers.
	liveStream jetstream.Stream
	drivers    jetstream.KeyValue
	cmds       jetstream.KeyValue
	snaps      jetstream.KeyValue

	mu       sync.Mutex
	runs     map[string]*run          // runs this runner drives
	loading  map[string]chan struct{} // runs being acquired: closed when done
	draining bool
	inflight sync.WaitGroup   // model calls in flight
	takeover sync.Map         // run -> struct{} while a takeover is being attempted
	judge    judgement        // guarded by mu
	kicks    map[string]*kick // runs to wake again (retryLater)
	// quarantined holds the runs whose log a reader found unfoldable,
	// with the bad message's sequence (noteQuarantine).
	quarantined map[string]uint64
	replies     map[string]aggregate.Command // model answers not recorded yet
	stopped     bool                         // no retry is scheduled any more
	// serving ends when the drain window ends: every command still in
	// flight then (a forward waiting on a driver that does not answer, a
	// wait for a busy run) ends with it (bounded).
	serving     context.Context
	stopServing context.CancelFunc
	commands    tracker // commands in flight (route)
	// finished are runs seen finished, whose late wake-ups cost nothing.
	finished finishedRuns
	gone     map[string]time.Time // runners alive found gone, and when (guarded by mu)
	// idle are the runs this runner drives but evicted from memory while
	// they wait for people (idle.go).
	idle idleRuns
}

// tracker counts work in flight; idle is closed while none is. Unlike a
// sync.WaitGroup it may gain work while someone waits for it to be idle.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
}

// quiet returns a channel closed once no work is in flight.
func (t *tracker) quiet() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return t.idle
}

// judgement tracks whether this runner can tell that a peer is gone
// (alive, scan). A peer is gone when its liveness key is absent — but only
// once this runner has been connected, with its own heartbeat recorded in
// the same bucket, for long enough that every live peer has heartbeated
// since: after a (re)connection, a failed heartbeat or a runners bucket
// that was emptied or re-created, an absent key means "cannot tell" until
// the grace has passed (SEMANTICS §8: only a runner that is gone is
// recovered from).
type judgement struct {
	since      time.Time // start of the current period of continuous view
	reconnects uint64    // the connection's reconnect count seen last
	revision   uint64    // revision of the last heartbeat put
}

// New returns a Runner for agents over nc and js. Call Provision once
// (or rely on provision.Ensure with Assets) before Run.
func New(nc *nats.Conn, js jetstream.JetStream, agents []*agent.Agent, opts ...Option) (*Runner, error) {
	r := &Runner{nc: nc, js: js, lease: DefaultLease, drain: 10 * time.Second, now: time.Now,
		agents: map[string]*agent.Agent{}, runs: map[string]*run{}, loading: map[string]chan struct{}{},
		kicks: map[string]*kick{}, replies: map[string]aggregate.Command{}}
	for _, o := range opts {
		o(r)
	}
	if r.id == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		r.id = "runner-" + hex.EncodeToString(b[:])
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With("runner", r.id)
	if r.tel == nil {
		r.tel = telemetry.New(telemetry.WithLogger(r.log))
	}
	if len(agents) == 0 {
		return nil, errors.New("runner: no agents")
	}
	agents = withSubAgents(agents) // serve the sub-agents' child runs too
	for _, a := range agents {
		key := a.Name() + "@" + a.Version()
		if _, dup := r.agents[key]; dup {
			return nil, fmt.Errorf("runner: agent %s registered twice", key)
		}
		r.agents[key] = a
		if _, ok := r.agents[a.Name()]; !ok {
			r.agents[a.Name()] = a
		}
		r.list = append(r.list, a)
	}
	if err := r.checkExternal(); err != nil {
		return nil, err
	}
	r.evlog = eventlog.New(js)
	r.timers = timer.New(js)
	r.serving, r.stopServing = context.WithCancel(context.Background())
	return r, nil
}

// bounded returns ctx, ended also when the runner's drain window ends.
func (r *Runner) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.serving, cancel)
	return ctx, func() { stop(); cancel() }
}

// ID returns the runner's id.
func (r *Runner) ID() string { return r.id }

// Assets lists the JetStream assets the runtime needs besides
// provision.Base: WEFT_TIMERS, and the KV buckets weft_runners (max age =
// lease), weft_drivers, weft_commands, weft_snapshots and weft_claims
// (worker.ClaimsConfig).
func Assets(lease time.Duration) []provision.Asset {
	return []provision.Asset{
		provision.Stream(timer.StreamConfig()),
		provision.KV(jetstream.KeyValueConfig{Bucket: RunnersBucket, Description: "Weft live runners (heartbeat, max age = lease)", TTL: lease, Storage: jetstream.FileStorage}),
		provision.KV(jetstream.KeyValueConfig{Bucket: DriversBucket, Description: "Weft unfinished runs and their driving runner", Storage: jetstream.FileStorage}),
		provision.KV(api.CommandsConfig()),
		provision.KV(jetstream.KeyValueConfig{Bucket: SnapshotsBucket, Description: "Weft run state snapshots with their head", Storage: jetstream.FileStorage}),
		provision.KV(worker.ClaimsConfig()),
	}
}

// CheckMaxPayload returns an error saying what fails when the NATS server
// of nc allows messages smaller than natsnode.MaxPayload (8 MiB): a tool
// result near max result bytes (1 MiB by default), with its report's or
// event's envelope, is refused payload_too_large and its action faults. It
// returns nil when nc is not connected yet (its max payload is unknown).
func CheckMaxPayload(nc *nats.Conn) error {
	if mp := nc.MaxPayload(); mp > 0 && mp < natsnode.MaxPayload {
		return fmt.Errorf("the NATS server's max_payload is %d bytes, below the %d bytes weft needs: tool results near max result bytes will be refused payload_too_large; set max_payload: 8MB in the server's configuration (docs/protocol/10-log.md)", mp, int64(natsnode.MaxPayload))
	}
	return nil
}

// ProvisionOption configures Provision.
type ProvisionOption func(*provisionOptions)

type provisionOptions struct {
	replicas int
	extra    []provision.Asset
}

// WithReplicas sets the replica count of every asset Provision creates or
// updates: 1 for an embedded or single server (the default), 3 on a
// cluster. Provision never lowers the replica count of an existing asset
// (see Provision).
func WithReplicas(n int) ProvisionOption {
	return func(o *provisionOptions) { o.replicas = n }
}

// WithAssets adds assets of other components (such as the projector's
// buckets) that Provision provisions with the same replica count.
func WithAssets(assets ...provision.Asset) ProvisionOption {
	return func(o *provisionOptions) { o.extra = append(o.extra, assets...) }
}

// Provision creates or updates every asset the runtime uses (base streams,
// timers, KV buckets, and those added with WithAssets) with lease as the
// liveness lease. Every asset gets one replica count: the larger of the
// requested one (WithReplicas, default 1) and the highest replica count of
// any of these assets that already exists, so that a runner started with
// the default against a cluster provisioned with 3 replicas keeps 3 and
// never shrinks the deployment. Lowering replicas is an operator's
// decision, made with the nats CLI.
func Provision(ctx context.Context, js jetstream.JetStream, lease time.Duration, opts ...ProvisionOption) error {
	o := provisionOptions{replicas: 1}
	for _, opt := range opts {
		opt(&o)
	}
	assets := append(provision.Base(), Assets(lease)...)
	assets = append(assets, o.extra...)
	replicas := max(o.replicas, 1)
	for _, a := range assets {
		n, err := existingReplicas(ctx, js, a.StreamName())
		if err != nil {
			return err
		}
		replicas = max(replicas, n)
	}
	if err := runnersOnFile(ctx, js); err != nil {
		return err
	}
	if err := provision.Ensure(ctx, js, append(Assets(lease), o.extra...), provision.WithReplicas(replicas)); err != nil {
		return err
	}
	return timer.Ensure(ctx, js, timer.WithReplicas(replicas))
}

// runnersOnFile deletes a weft_runners bucket that an earlier release
// created with memory storage (a server restart emptied it and made every
// runner look gone), so that Provision creates it again on file: JetStream
// cannot change a stream's storage in place. Deleting it is safe: its keys
// are heartbeats every live runner puts again within lease/4, and a runner
// that cannot read the bucket, or does not find its own key in it, judges
// nobody gone meanwhile (see Runner.Run).
func runnersOnFile(ctx context.Context, js jetstream.JetStream) error {
	s, err := js.Stream(ctx, "KV_"+RunnersBucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("runner: provision: bucket %s: %w", RunnersBucket, err)
	}
	if s.CachedInfo().Config.Storage != jetstream.MemoryStorage {
		return nil
	}
	if err := js.DeleteKeyValue(ctx, RunnersBucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("runner: provision: move bucket %s to file storage: %w", RunnersBucket, err)
	}
	return nil
}

// existingReplicas is the replica count of the stream (a KV bucket's is
// KV_<bucket>), 0 if it does not exist. Only the asset's own stream is
// asked about: a runner's credentials (package roles) allow no other.
func existingReplicas(ctx context.Context, js jetstream.JetStream, stream string) (int, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("runner: provision: stream %s: %w", stream, err)
	}
	return s.CachedInfo().Config.Replicas, nil
}

// ensureTaskConsumers creates the durable consumer of each external tool
// in each agent identity that binds it, weft_task_<agent>@<version>@<tool>
// (docs/protocol/41-tasks.md), so that a worker outside the process — even
// the nats CLI — only takes tasks. An existing consumer is left as it is
// (a worker may have configured it otherwise).
func (r *Runner) ensureTaskConsumers(ctx context.Context) error {
	for _, q := range r.externalQueues() {
		_, err := r.js.CreateConsumer(ctx, worker.TaskStream, worker.ConsumerConfig(q, worker.DefaultAckWait))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return fmt.Errorf("runner: consumer %s: %w", q.Consumer(), err)
		}
	}
	return nil
}

// checkExternal refuses an external tool name that no served agent binds
// as a tool body: its tasks would never exist, and the tool meant to run
// elsewhere would run in this process.
func (r *Runner) checkExternal() error {
	bound := map[string]bool{}
	for _, q := range r.externalQueues() {
		bound[q.Tool] = true
	}
	var unknown []string
	for n := range r.external {
		if !bound[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("runner: external tools %v: no served agent binds a tool body of that name", unknown)
	}
	return nil
}

// externalQueues lists the queues of the external tools: every agent
// identity's binding of each tool named in WithExternalTools.
func (r *Runner) externalQueues() []worker.Queue {
	var qs []worker.Queue
	for _, ag := range r.list {
		for _, t := range ag.Tools() {
			if _, sub := agent.SubAgent(t); !sub && r.external[t.Name()] {
				qs = append(qs, worker.Queue{Agent: ag.Name(), Version: ag.Version(), Tool: t.Name()})
			}
		}
	}
	return qs
}

// Run serves until ctx is cancelled, then drains (see the package doc) and
// returns. It returns early with an error if an asset is missing; while
// the server does not answer (it restarts) it waits for it.
func (r *Runner) Run(ctx context.Context) error {
	if err := CheckMaxPayload(r.nc); err != nil {
		r.log.Warn("runner: "+err.Error(), "max_payload", r.nc.MaxPayload(), "need", natsnode.MaxPayload)
	}
	if err := r.lookUpAssets(ctx); err != nil {
		return err
	}
	r.mu.Lock()
	r.judge.since, r.judge.reconnects = time.Now(), r.nc.Stats().Reconnects
	r.mu.Unlock()
	// A failed heartbeat is "cannot tell", never a reason to stop serving
	// (the bucket may refuse writes, or be re-created by a server restart
	// or an operator, while this runner starts): heartbeat reset the
	// judgement, so nobody is judged gone until a beat lands, and the
	// loop beats again within lease/4.
	if err := r.heartbeat(ctx); err != nil {
		r.log.Warn("heartbeat failed; serving on", "err", err)
	}

	// Forwarded commands for runs this runner drives.
	fwd, err := r.nc.Subscribe(ForwardPrefix+r.id+".cmd", r.onForward)
	if err != nil {
		return fmt.Errorf("runner: subscribe forward: %w", err)
	}
	var svc micro.Service
	if svc, err = api.Serve(r.nc, r, r.cmds, "0.1.0"); err != nil {
		_ = fwd.Unsubscribe()
		return err
	}
	if err := r.nc.Flush(); err != nil {
		return fmt.Errorf("runner: flush: %w", err)
	}

	bg, stopBG := context.WithCancel(context.Background())
	hb, stopHeartbeat := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); r.heartbeatLoop(hb) }()
	go func() {
		defer wg.Done()
		if r.noScan {
			return
		}
		if n, err := r.rebuildDrivers(bg); err != nil && bg.Err() == nil {
			r.log.Warn("rebuild driver keys from the log", "err", err)
		} else if n > 0 {
			r.log.Info("rebuilt driver keys from the log", "runs", n)
		}
		r.scanLoop(bg)
	}()
	go func() {
		defer wg.Done()
		_ = r.timers.Consume(bg, func(ctx context.Context, f timer.Fired) error {
			err := r.wake(ctx, f.Run)
			if r.noteQuarantine(err) {
				// Not redelivered at 10 Hz for as long as the run is
				// quarantined: the repaired run is woken, which derives
				// its due timers again from the log (watchQuarantined).
				return nil
			}
			switch weft.ErrorCode(err) {
			case weft.CodeRunnerBusy, weft.CodeUnavailable, weft.CodeContended:
				return err // redelivered
			}
			if err != nil {
				r.log.Warn("timer firing", "run", f.Run, "key", f.Key, "err", err)
			}
			return nil
		})
	}()

	// The in-process worker runs the agents' tool bodies.
	wctx, stopWorker := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	var w *worker.Worker
	if !r.noWorker {
		w = r.newWorker()
		go func() { defer close(wdone); _ = w.Run(wctx) }()
	} else {
		close(wdone)
	}
	r.tel.Emit(ctx, telemetry.Name("runner_started"), "runner", r.id)

	<-ctx.Done()

	// Drain: stop taking commands and starting model calls; let running
	// bodies (in this process's worker) and model calls in flight finish
	// within the drain window and be recorded; then hand the runs off.
	// The heartbeat goes on until the hand-off, so nobody takes over early.
	r.mu.Lock()
	r.draining = true
	r.mu.Unlock()
	r.tel.Emit(context.Background(), telemetry.Drain, "runner", r.id)
	_ = svc.Stop()
	stopBG()
	// The in-process worker takes no new task from now on (a task it holds
	// but has not started goes back to the queue); the bodies it runs go on
	// within the window.
	stopWorker()
	// Hand off first: from now on the runs fence no new attempt and
	// request no model turn, so the drain waits only for the work that
	// was in flight at SIGTERM — and whatever was queued behind it is
	// dispatched by the next runner instead of being started here and cut
	// off at the end of the window (an uncertain effect).
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), r.drain)
	defer cancelDrain()
	r.handOffAll(drainCtx, false)
	for drainCtx.Err() == nil && r.busy() {
		time.Sleep(20 * time.Millisecond)
	}
	waitCtx(drainCtx, wdone)
	if w != nil && drainCtx.Err() != nil {
		// The window is over with bodies still running: they are stopped
		// as a lost worker's would be (worker_lost: the run decides replay
		// or uncertainty), and Run returns only once the worker did —
		// never with a body of this runner still running (goleak found
		// them running on after Run returned, until their tool timeout).
		w.Abandon()
		abandonCtx, cancelAbandon := context.WithTimeout(context.Background(), 10*time.Second)
		waitCtx(abandonCtx, wdone)
		cancelAbandon()
	}
	waitCtx(drainCtx, waitGroupDone(&r.inflight))
	waitCtx(drainCtx, r.commands.quiet())
	// The window is over: whatever command is still in flight ends now
	// (a forward then answers outcome_unknown), so that the runs' locks
	// are free for the hand-off and the process's connection drains at
	// once.
	r.stopServing()
	final, cancelFinal := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelFinal()
	r.handOffAll(final, true)
	_ = fwd.Unsubscribe()
	r.stopRetries()
	stopHeartbeat()
	wg.Wait()
	// Deleted, not left to expire: the delete marker (kept for a lease)
	// says this runner is gone, and its runs are taken over at once (an
	// absent key only counts as gone after a grace, see judgement).
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = r.live.Delete(rctx, r.id)
	cancel()
	return nil
}

// lookUpAssets looks up the buckets Run uses and ensures the task
// consumers, again and again while the server does not answer — a runner
// started while its server restarts waits for it instead of returning —
// until ctx ends. Each attempt has its own deadline, doubling from 2 s up
// to 16 s (a request sent while the server restarts may never be
// answered). A missing asset is returned at once.
func (r *Runner) lookUpAssets(ctx context.Context) error {
	backoff, limit := 100*time.Millisecond, 2*time.Second
	for {
		actx, cancel := context.WithTimeout(ctx, limit)
		err := r.assets(actx)
		cancel()
		if err == nil || ctx.Err() != nil || !unanswered(err) {
			return err
		}
		r.log.Warn("runner: the server does not answer; retrying", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff, limit = min(2*backoff, 2*time.Second), min(2*limit, 16*time.Second)
	}
}

// unanswered reports whether err means the server did not answer (it is
// down or restarting), not that it refused.
func unanswered(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return true
	case errors.As(err, &apiErr):
		return apiErr.Code == 503
	}
	return false
}

// assets is one attempt of lookUpAssets.
func (r *Runner) assets(ctx context.Context) error {
	var err error
	if r.live, err = r.js.KeyValue(ctx, RunnersBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", RunnersBucket, err)
	}
	// The bucket's max age is the lease every runner is judged by: beat
	// within it even when this runner was configured with another lease
	// (the bucket was provisioned by someone else), or peers would take
	// its runs over between two heartbeats.
	if st, err := r.live.Status(ctx); err == nil && st.TTL() > 0 && st.TTL() != r.lease {
		r.log.Warn("the runners bucket's max age overrides the configured lease", "lease", r.lease, "bucket_max_age", st.TTL())
		r.lease = st.TTL()
	}
	if r.liveStream, err = r.js.Stream(ctx, "KV_"+RunnersBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", RunnersBucket, err)
	}
	if r.drivers, err = r.js.KeyValue(ctx, DriversBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", DriversBucket, err)
	}
	if r.cmds, err = r.js.KeyValue(ctx, api.CommandsBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", api.CommandsBucket, err)
	}
	if r.snaps, err = r.js.KeyValue(ctx, SnapshotsBucket); err != nil {
		return fmt.Errorf("runner: bucket %s: %w", SnapshotsBucket, err)
	}
	if err := r.ensureTaskConsumers(ctx); err != nil {
		return err
	}
	return nil
}

// busy reports whether a driven run has a body running or a model call
// in flight.
func (r *Runner) busy() bool {
	r.mu.Lock()
	list := make([]*run, 0, len(r.runs))
	for _, rn := range r.runs {
		list = append(list, rn)
	}
	r.mu.Unlock()
	for _, rn := range list {
		select {
		case rn.sem <- struct{}{}:
		default:
			return true // a command is being applied
		}
		if rn.takeover != nil {
			rn.unlock()
			continue // not taken over: nothing of ours runs
		}
		running := rn.modelTurn != 0
		for _, a := range rn.state.Actions() {
			if a.State == aggregate.ActionRunning {
				running = true
			}
		}
		rn.unlock()
		if running {
			return true
		}
	}
	return false
}

func waitCtx(ctx context.Context, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	return ch
}

func (r *Runner) heartbeat(ctx context.Context) error {
	rev, err := r.live.Put(ctx, r.id, []byte(r.now().UTC().Format(time.RFC3339Nano)))
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.judge.since = time.Now() // peers cannot beat either, perhaps
		return fmt.Errorf("runner: heartbeat: %w", err)
	}
	if rev <= r.judge.revision {
		r.judge.since = time.Now() // the bucket was re-created
	}
	r.judge.revision = rev
	return nil
}

func (r *Runner) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(r.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.heartbeat(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

// released reports whether runner id deleted its liveness key (a drained
// runner does, once it has handed its runs off): the key's last message
// is a delete marker, kept for a lease. Such a runner is gone at once.
func (r *Runner) released(ctx context.Context, id string) bool {
	if r.liveStream == nil {
		return false
	}
	m, err := r.liveStream.GetLastMsgForSubject(ctx, "$KV."+RunnersBucket+"."+id)
	return err == nil && m.Header.Get("KV-Operation") == "DEL"
}

// judgeGrace is how long this runner's view of the runners bucket must
// have been continuous before an absent key means a gone runner: the lease
// (every live runner puts its key every lease/4), plus the heartbeat
// interval, plus the connection's reconnect wait and jitter (the time a
// peer disconnected by the same server restart may take to come back).
func (r *Runner) judgeGrace() time.Duration {
	return r.lease + r.lease/4 + r.nc.Opts.ReconnectWait + r.nc.Opts.ReconnectJitter
}

// canJudge reports whether this runner can tell now that a peer whose
// liveness key is absent is gone (see judgement).
func (r *Runner) canJudge() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rc := r.nc.Stats().Reconnects; rc != r.judge.reconnects || !r.nc.IsConnected() {
		r.judge.since, r.judge.reconnects = time.Now(), rc
		return false
	}
	return time.Since(r.judge.since) >= r.judgeGrace()
}

// alive reports whether runner id may hold a live heartbeat: false only
// when its key is absent and this runner can tell (canJudge, its own key
// present). "Cannot tell" — a read error, a missing bucket, a view too
// recent — is never "gone".
func (r *Runner) alive(ctx context.Context, id string) bool {
	if id == r.id {
		r.mu.Lock()
		defer r.mu.Unlock()
		return !r.draining
	}
	if r.seenGone(id) {
		return false
	}
	_, err := r.live.Get(ctx, id)
	if err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) {
		return true
	}
	if r.released(ctx, id) {
		r.log.Info("runner judged gone", "peer", id, "why", "released")
		r.markGone(id)
		return false
	}
	if !r.canJudge() {
		return true
	}
	if _, err := r.live.Get(ctx, r.id); err != nil {
		return true // our own key is not there either: the bucket is not ours to judge by
	}
	r.log.Info("runner judged gone", "peer", id, "why", "liveness key absent")
	r.markGone(id)
	return false
}

// seenGone reports whether alive found runner id gone within the last
// heartbeat interval (lease/4): the takeover of a gone runner's many runs
// judges it once per interval, not once per run.
func (r *Runner) seenGone(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.gone[id]
	if ok && time.Since(at) < r.lease/4 {
		return true
	}
	if ok {
		delete(r.gone, id)
	}
	return false
}

func (r *Runner) markGone(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone == nil {
		r.gone = map[string]time.Time{}
	}
	r.gone[id] = time.Now()
}

// scanLoop takes over the runs whose driver is gone. It keeps the
// weft_drivers map in memory through a KV watcher and lists the live
// runners every lease/4.
func (r *Runner) scanLoop(ctx context.Context) {
	drivers := map[string]driverKey{}
	var mu sync.Mutex
	w, err := r.drivers.WatchAll(ctx)
	if err != nil {
		r.log.Error("watch drivers", "err", err)
		return
	}
	defer w.Stop()
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				drivers[e.Key()] = driverKey{driver: string(e.Value()), revision: e.Revision()}
			} else {
				delete(drivers, e.Key())
			}
			mu.Unlock()
		}
	}()
	t := time.NewTicker(r.lease / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		mu.Lock()
		snapshot := make(map[string]driverKey, len(drivers))
		for k, v := range drivers {
			snapshot[k] = v
		}
		mu.Unlock()
		r.watchQuarantined(ctx)
		for run := range snapshot {
			if r.isQuarantined(run) {
				delete(snapshot, run) // watchQuarantined wakes it once repaired
			}
		}
		r.scan(ctx, snapshot)
	}
}

// driverKey is a run's weft_drivers entry: the driver and the revision.
type driverKey struct {
	driver   string
	revision uint64
}

func (r *Runner) scan(ctx context.Context, drivers map[string]driverKey) {
	if len(drivers) == 0 {
		return
	}
	judge := r.canJudge()
	liveKeys := map[string]bool{}
	lister, err := r.live.ListKeys(ctx)
	if err != nil {
		return // cannot tell
	}
	for k := range lister.Keys() {
		liveKeys[k] = true
	}
	if !liveKeys[r.id] {
		judge = false // our own heartbeat is not there: absence tells nothing
	}
	gone := map[string]bool{} // by driver
	for _, k := range drivers {
		d := k.driver
		if _, seen := gone[d]; seen || d == r.id || liveKeys[d] {
			continue
		}
		gone[d] = judge || r.released(ctx, d)
		if gone[d] {
			r.log.Info("runner judged gone", "peer", d, "why", "liveness key absent (scan)", "judge", judge)
		}
	}
	var orphans []string
	for run, k := range drivers {
		switch {
		case gone[k.driver]:
			orphans = append(orphans, run)
		case k.driver == r.id:
			// Ours but not in memory: an earlier process with our id
			// drove it (or a start's intent whose append never landed).
			r.mu.Lock()
			_, held := r.runs[run]
			_, loading := r.loading[run]
			r.mu.Unlock()
			if !held && !loading && !r.idle.has(run) {
				orphans = append(orphans, run)
			}
		}
	}
	slices.Sort(orphans)
	var todo []string
	for _, run := range orphans {
		if _, busy := r.takeover.LoadOrStore(run, struct{}{}); !busy {
			todo = append(todo, run)
		}
	}
	r.takeOrphans(ctx, todo, drivers)
}

// takeoverConcurrency bounds the takeovers a runner makes at once: taking
// over many idle runs (a gone runner's thousands) costs bounded memory and
// goroutines, and the store is not flooded (docs/adr/0014).
const takeoverConcurrency = 32

// takeOrphans wakes the orphans todo (each marked in r.takeover), at most
// takeoverConcurrency at once, and returns when all are done.
func (r *Runner) takeOrphans(ctx context.Context, todo []string, drivers map[string]driverKey) {
	if len(todo) == 0 {
		return
	}
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(takeoverConcurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run := range work {
				if err := r.wakeOrphan(ctx, run, drivers[run]); err != nil && ctx.Err() == nil && !r.noteQuarantine(err) {
					r.log.Debug("takeover failed", "run", run, "err", err)
				}
				r.takeover.Delete(run)
			}
		}()
	}
	for i, run := range todo {
		select {
		case work <- run:
		case <-ctx.Done():
			for _, left := range todo[i:] {
				r.takeover.Delete(left)
			}
			close(work)
			wg.Wait()
			return
		}
	}
	close(work)
	wg.Wait()
}

// wakeOrphan wakes run, whose weft_drivers entry k names a gone runner (or
// this one without holding the run), and repairs the entry from the log:
// deleted when the run does not exist, set to the live driver the log
// records when it names another.
func (r *Runner) wakeOrphan(ctx context.Context, run string, k driverKey) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rn, err := r.acquire(ctx, run)
	if err != nil {
		var fe *forwardError
		switch {
		case errors.As(err, &fe):
			if fe.driver != k.driver {
				_, _ = r.drivers.Update(ctx, run, []byte(fe.driver), k.revision)
			}
			return r.forwardWake(ctx, fe.driver, run)
		case weft.ErrorCode(err) == weft.CodeUnknownRun:
			// A start's intent whose append never landed.
			_ = r.drivers.Delete(ctx, run, jetstream.LastRevision(k.revision))
			return nil
		}
		return err
	}
	defer rn.unlock()
	return r.wakeLocked(ctx, rn, true)
}
