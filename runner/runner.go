package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/nats-io/nkeys"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/clock"
	"github.com/weftrun/weft/internal/groupcommit"
	"github.com/weftrun/weft/internal/inflight"
	"github.com/weftrun/weft/protocol"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/worker"
)

// The KV buckets and subjects of the runner (docs/protocol/40-commands.md).
const (
	// RunnersBucket holds one key per live runner (its id), kept alive by
	// heartbeat puts; the bucket's max age is the lease.
	RunnersBucket = api.RunnersBucket
	// DriversBucket maps each run a runner drives with work in flight
	// (unfinished and not idle) to that runner: key <partition>.<run>,
	// the partition zero-padded to four digits.
	DriversBucket = protocol.DriversBucket
	// PartitionsBucket holds the deployment's number of partitions (key
	// "config": {"schema":1,"partitions":P}) and each partition's owner
	// (key p.<partition>, zero-padded to four digits: a runner id).
	PartitionsBucket = protocol.PartitionsBucket
	// SnapshotsBucket holds each run's state snapshot with the head it was
	// folded to: {"schema":1,"head":{...},"state":{...}}.
	SnapshotsBucket = protocol.SnapshotsBucket
	// ForwardPrefix prefixes the subject on which a runner takes commands
	// forwarded to it as driver: weft.runner.<id>.cmd.
	ForwardPrefix = protocol.ForwardPrefix
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

// WithDrainWindow sets a draining runner's window, default 10 s. Running
// bodies and model calls get the window less the hand-over reserve (a
// fifth of it, at most 1 s) to finish and be recorded; a body still
// running then is stopped and reported worker_lost (replayed or
// uncertain, as a lost worker's). The reserve is kept for handing the
// runs off and releasing the partitions within the window.
func WithDrainWindow(d time.Duration) Option { return func(r *Runner) { r.drain = d } }

// WithoutWorker stops the runner from running the agents' tool bodies in
// its own process (run workers separately then).
func WithoutWorker() Option { return func(r *Runner) { r.noWorker = true } }

// WithExternalTools leaves the tasks of the named tools to workers outside
// this process (another process, another language): the in-process worker
// does not consume them. A name covers that tool in every served agent
// identity that binds it, each with its own queue and consumer
// (api.Queue); a name no served agent binds as a tool body is an error
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

// WithTelemetry sets the telemetry sink (spans and the docs/semantics.md §11
// names). Default: telemetry.Nop-equivalent (spans to the global no-op
// tracer provider, names to the logger).
func WithTelemetry(t *telemetry.Telemetry) Option { return func(r *Runner) { r.tel = t } }

// WithGroupCommit makes the runner send the decisions of its concurrent
// runs together as one atomic batch when many wait at once (group commit,
// docs/adr/0025-group-commit.md): for a server with sync_interval: always,
// where it saves fsyncs; on a server that syncs on its interval it costs
// more than it saves.
func WithGroupCommit() Option { return func(r *Runner) { r.group = true } }

// WithEagerTaskCopy makes the runner publish the stream copy of every task
// it hands to its own worker beside the hand-off, as before
// docs/adr/0039-the-stream-copy-only-when-needed.md, instead of only when
// the handed task does not run the attempt to its report (the default:
// one WEFT_TASKS write and one removal fewer per tool step). For a
// deployment that reads WEFT_TASKS as the record of every dispatch (an
// external consumer or audit of the queue), or that would rather have a
// copy waiting in the queue for another worker whenever this process's
// worker hangs without dying (a wedged body setup, a stalled claims
// bucket): the copy is then delivered, after HandedCopyDelay, to a worker
// that reports the attempt lost, instead of waiting for the run's
// recovery.
func WithEagerTaskCopy() Option { return func(r *Runner) { r.eagerCopy = true } }

// WithClock replaces the clock that stamps recorded times (tests). Local
// timers are still armed by the wall clock (time.Until of a timer's
// store-time At, runner/timers.go), and the durable schedule publishes at
// the same wall-clock time: with a clock behind the wall clock a timer
// fires early, the decision (at the store clock) ignores it, and it is not
// armed again. A clock behind the wall clock therefore suits settle and
// decision tests only, not a test that waits for a timer (a tool timeout)
// to fire. In production the store clock is never behind the wall clock.
func WithClock(now func() time.Time) Option { return func(r *Runner) { r.now = now } }

// Runner drives runs of a set of agents.
type Runner struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	evlog    *eventlog.Log
	timers   *timer.Timers
	id       string
	log      *slog.Logger
	tel      *telemetry.Telemetry
	now      func() time.Time
	lease    time.Duration
	drain    time.Duration
	noWorker bool
	group    bool // WithGroupCommit
	// eagerCopy: the stream copy of a handed task is published with the
	// hand-off (WithEagerTaskCopy), not only when it is needed.
	eagerCopy bool
	// publishCopy publishes the stream copy of a task handed to the
	// runner's own worker (dispatch): in atomic batches with group commit.
	publishCopy func(context.Context, *nats.Msg) (*jetstream.PubAck, error)
	noScan      bool // tests (export_test.go)
	// hook, when set (tests, export_test.go), is called at the named
	// points of an acquisition and a partition's release.
	hook func(event string, p int, run string)
	// handOffLock bounds the wait for a run's lock in a hand-off (5 s;
	// tests shorten it).
	handOffLock time.Duration
	external    map[string]bool
	workerOpts  []worker.Option
	// inproc is the in-process worker while Run runs it (nil without
	// one): dispatch hands it the tasks of its queues (handtask.go).
	inproc   atomic.Pointer[worker.Worker]
	headKey  nkeys.KeyPair    // signs chain heads (signhead.go); nil: none
	unsealed bool             // tests (export_test.go): sign heads after their decisions
	people   approvers.People // who made a person's command (identity.go)

	// claims is weft_claims, looked up at the first close of an attempt
	// (close.go), under claimsMu.
	claims   jetstream.KeyValue
	claimsMu sync.Mutex
	// claimsFailed is when the claims bucket's lookup last failed
	// (claimsKV does not look it up again for claimsRetry).
	claimsFailed time.Time

	agents  map[string]*agent.Agent // name@version and name (first registered)
	list    []*agent.Agent
	drivers jetstream.KeyValue
	// driversStream is weft_drivers' stream, for deleting an entry's
	// message by its revision (removeDriverKey).
	driversStream jetstream.Stream
	// purgeDrivers is set when removeDriverKey purges weft_drivers entries
	// instead of deleting their messages: the bucket denies deletes (read
	// once, in assets) or a delete failed where a purge then succeeded (the
	// runner's credentials lack the grant).
	purgeDrivers atomic.Bool
	cmds         jetstream.KeyValue
	snaps        jetstream.KeyValue

	mu         sync.Mutex
	runs       map[string]*run          // runs this runner drives
	loading    map[string]chan struct{} // runs being acquired: closed when done
	draining   bool
	inflight   sync.WaitGroup   // model calls in flight
	takeover   sync.Map         // run -> struct{} while a takeover is being attempted
	orphanFail sync.Map         // run -> time.Time: since when the wake of its driver entry keeps failing (takeOrphans)
	unknownAt  sync.Map         // run -> unknownSince: since when the scans find no event for its driver entry (wakeOrphan)
	kicks      map[string]*kick // runs to wake again (retryLater)
	// quarantined holds the runs whose log a reader found unfoldable,
	// with the bad message's sequence (noteQuarantine).
	quarantined map[string]uint64
	replies     map[string]aggregate.Command // model answers not recorded yet
	closes      map[string][]aggregate.Close // closes that won, their decision not recorded (keepCloses)
	stopped     bool                         // no retry is scheduled any more
	// serving ends when the drain window ends: every command still in
	// flight then (a forward waiting on a driver that does not answer, a
	// wait for a busy run) ends with it (bounded).
	serving     context.Context
	stopServing context.CancelFunc
	commands    inflight.Tracker // commands in flight (route)
	// finished are runs seen finished, whose late wake-ups cost nothing.
	finished finishedRuns
	// mine are runs this process drove and forgot while the log still
	// names it their driver (drop): acquired again, they are its own.
	mine map[string]struct{}
	// handlers are the forwarded commands being answered (onForward).
	handlers inflight.Tracker
	// loaded and takenOver count run reads and takeover appends (Stats).
	loaded, takenOver atomic.Uint64
	// internalRefusals counts internal refusals (refusals.go, Stats).
	internalRefusals atomic.Uint64
	// bg owns the goroutines that outlive the call that starts them
	// (background.go); Run stops it before it returns.
	bg *background
	// partitionOwnership is the state of partition ownership, apart
	// from the command loop's (ownership.go).
	partitionOwnership
}

// New returns a Runner for agents over nc and js. Call Provision once
// (or rely on provision.Ensure with Assets) before Run.
func New(nc *nats.Conn, js jetstream.JetStream, agents []*agent.Agent, opts ...Option) (*Runner, error) {
	r := &Runner{nc: nc, js: js, lease: DefaultLease, drain: 10 * time.Second, handOffLock: 5 * time.Second, now: time.Now,
		agents: map[string]*agent.Agent{}, runs: map[string]*run{}, loading: map[string]chan struct{}{},
		kicks: map[string]*kick{}, replies: map[string]aggregate.Command{}, closes: map[string][]aggregate.Close{},
		partitionOwnership: partitionOwnership{clk: clock.Real(), nparts: DefaultPartitions}}
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
	if r.headKey != nil {
		if err := checkHeadKey(r.headKey); err != nil {
			return nil, err
		}
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
	var logOpts []eventlog.Option
	r.publishCopy = func(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) { return js.PublishMsg(ctx, m) }
	if r.group {
		logOpts = append(logOpts, eventlog.WithGroupCommit())
		// The stream copies of handed tasks too (dispatch,
		// docs/adr/0032-fewer-writes-per-run.md).
		r.publishCopy = groupcommit.New(js, nil).Publish
	}
	r.evlog = eventlog.New(js, logOpts...)
	r.timers = timer.New(js)
	r.serving, r.stopServing = context.WithCancel(context.Background())
	r.bg = newBackground()
	return r, nil
}

// bounded returns ctx, ended also when the runner's drain window ends
// (its cause then errNotServing, which waitEnded says).
func (r *Runner) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(r.serving, func() { cancel(errNotServing) })
	return ctx, func() { stop(); cancel(nil) }
}

// ID returns the runner's id.
func (r *Runner) ID() string { return r.id }

// Run serves until ctx is cancelled, then drains (see the package doc) and
// returns. It returns early with an error if an asset is missing; while
// the server does not answer (it restarts) it waits for it.
func (r *Runner) Run(ctx context.Context) error {
	if err := CheckMaxPayload(r.nc); err != nil {
		r.log.Warn("runner: "+err.Error(), "max_payload", r.nc.MaxPayload(), "need", protocol.MaxPayload)
	}
	if err := r.lookUpAssets(ctx); err != nil {
		return err
	}
	if err := r.checkPartitions(ctx); err != nil {
		return err
	}
	r.startOwnership() // nothing owned yet
	// The heartbeat, the watchers and a first round of rebalancing: the
	// partitions assigned to this runner that nobody owns are claimed
	// before it serves (a lone runner owns every partition at once),
	// no run is acquired before it serves (ownership.Coordinator.Start).
	r.own.Start(ctx)

	// The goroutines of the timers and the rebuild live until the drain
	// (stopBG), as the partition loop does (r.own.Stop).
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	g, gctx := errgroup.WithContext(bg)

	// Forwarded commands for runs of the partitions this runner owns.
	fwd, err := r.nc.Subscribe(ForwardPrefix+r.id+".cmd", r.onForward)
	if err != nil {
		stopBG()
		r.own.Close()
		_ = g.Wait()
		return fmt.Errorf("runner: subscribe forward: %w", err)
	}
	var svc api.Service
	if svc, err = api.Serve(r.nc, r, r.cmds, "0.1.0"); err != nil {
		_ = fwd.Unsubscribe()
		stopBG()
		r.own.Close()
		_ = g.Wait()
		return err
	}
	if err := r.nc.Flush(); err != nil {
		r.log.Warn("runner: flush", "err", err)
	}

	if !r.noScan {
		// The rebuild of the driver index (once per deployment, reading
		// every unfinished run back: minutes at a million runs) goes on
		// beside the partition loop, never in its way: the partitions
		// still move to runners that join meanwhile. The owners scan
		// again once it rebuilt entries (rebuildLoop).
		g.Go(func() error { r.rebuildLoop(gctx); return nil })
	}
	// The partition loop: its first wake takes the owned partitions'
	// runs over, now that this runner answers their commands.
	r.own.StartLoop()
	g.Go(func() error {
		r.consumeTimers(gctx)
		return nil
	})

	// The in-process worker runs the agents' tool bodies.
	wctx, stopWorker := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	if !r.noWorker {
		w := r.newWorker()
		r.inproc.Store(w)
		go func() { defer close(wdone); r.runWorker(wctx, w) }()
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
	// The partition loop ends, so no round starts a release any more, and
	// the releases it started end.
	r.own.Stop()
	// The in-process worker takes no new task from now on (a task it holds
	// but has not started goes back to the queue); the bodies it runs go on
	// within the window.
	stopWorker()
	r.testHook("worker-stopped", -1, "")
	// Hand off first: from now on the runs fence no new attempt and
	// request no model turn, so the drain waits only for the work that
	// was in flight at SIGTERM — and whatever was queued behind it is
	// dispatched by the next runner instead of being started here and cut
	// off at the end of the window (an uncertain effect).
	//
	// The work in flight gets the window less handOverReserve, kept for
	// the hand-over: what still runs then is stopped, the runs are
	// forgotten and the partitions released before the window ends, so
	// that no partition answers runner_busy past it (docs/reliability.md,
	// the availability budget).
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), r.drain-handOverReserve(r.drain))
	defer cancelDrain()
	r.handOffAll(drainCtx, handOffKeep)
	// Peers assign this runner no partition from now on; those with
	// nothing running move at once, the others once their work is done.
	r.own.Drain(drainCtx, r.busy)
	waitCtx(drainCtx, wdone)
	if w := r.inproc.Load(); w != nil && drainCtx.Err() != nil {
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
	// The commands in flight, the starts off their lanes among them
	// (svc.Stop waited for none of them), get the window too.
	waitCtx(drainCtx, r.commands.Quiet())
	waitCtx(drainCtx, svc.Quiet())
	// The window is over: whatever command is still in flight ends now
	// (a forward then answers outcome_unknown), so that the runs' locks
	// are free for the hand-off and the process's connection drains at
	// once.
	r.stopServing()
	final, cancelFinal := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelFinal()
	r.handOffAll(final, handOffForget)
	// The runs are forgotten and nothing of this runner's runs any more:
	// the partitions move now, within the window, not after the rest of
	// the teardown — but not one with a run still held (its lock was not
	// had in time): its new owner would take over a run this process
	// still drives (docs/semantics.md §8), so its key is deleted at the end of
	// Run, once the background work stopped. The deletes get a context of
	// their own: a run still held can use up all of final waiting for its
	// lock (the hand-off lock wait is 5 s by default), and deletes made on
	// an ended context left the keys naming this runner.
	relCtx, cancelRel := context.WithTimeout(context.Background(), 2*time.Second)
	r.own.Release(relCtx, r.heldPartitions())
	cancelRel()
	r.testHook("drain-released", -1, "")
	// Drained, not unsubscribed: a forwarded command already delivered to
	// this process is answered (runner_busy: this runner is stopping)
	// instead of dropped, which left its forwarder waiting its whole
	// forward timeout; one published after the server saw the drain finds
	// no responder and is answered runner_busy at once by the forwarder.
	_ = fwd.Drain()
	for fwd.IsValid() && final.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	waitCtx(final, r.handlers.Quiet())
	// The starts that stopServing ended are answered (an error) before
	// Run returns.
	waitCtx(final, svc.Quiet())
	r.stopRetries()
	// Nothing of this runner's background work outlives Run: what is cut
	// short is derived again from the log by the next driver.
	if !r.bg.stop(10 * time.Second) {
		r.log.Error("background work still running 10 s after its context ended; returning without it")
	}
	// The heartbeat ends (ownership.Coordinator.Close), then, once the
	// timers' and the rebuild's goroutines returned too, the partitions'
	// keys and the liveness key are deleted, not left to expire
	// (ownership.Coordinator.Leave).
	r.own.Close()
	_ = g.Wait()
	r.own.Leave()
	return nil
}

// handOverReserve is the part of a drain window d kept for the hand-over
// at its end (Run): stopping what still runs, forgetting the runs and
// releasing the partitions, for their next owner to claim within the
// window. A fifth of the window, at most a second.
func handOverReserve(d time.Duration) time.Duration { return min(d/5, time.Second) }

// busy reports whether a driven run has a body running or a model call
// in flight.
func (r *Runner) busy() bool {
	r.mu.Lock()
	list := make([]*run, 0, len(r.runs))
	for _, rn := range r.runs {
		list = append(list, rn)
	}
	r.mu.Unlock()
	return r.busyIn(list)
}

// busyIn reports whether a run of list has a body running or a model
// call in flight (or a command is being applied to it).
func (r *Runner) busyIn(list []*run) bool {
	for _, rn := range list {
		select {
		case rn.sem <- struct{}{}:
		default:
			return true // a command is being applied
		}
		if rn.takeover != nil || !rn.driven {
			rn.unlock()
			continue // not taken over, or forgotten: nothing of ours runs
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

// testHook calls r.hook, when a test set one (export_test.go).
func (r *Runner) testHook(event string, p int, run string) {
	if r.hook != nil {
		r.hook(event, p, run)
	}
}

// TimerRestartCap bounds the pause before consumeTimers starts the
// timer consumer again.
const TimerRestartCap = 16 * time.Second

// consumeTimers consumes the durable timers' firings until ctx ends. A
// consumer that cannot be bound or stops on an error (its cluster had no
// leader as this runner started, the server restarted) is started again
// after a pause, doubling from a second up to 16 s: a runner that gave up
// on it would leave every firing it is the only consumer of — an approval's
// expiry, a timeout of a run nobody holds — waiting for ever
// (docs/semantics.md §8: pending work is retried, never dropped).
func (r *Runner) consumeTimers(ctx context.Context) {
	consumeAgain(ctx, backoff.New(time.Second, TimerRestartCap), r.timers.Consume, r.timerFired,
		func(err error, d time.Duration) {
			r.log.Error("timer consumer stopped; starting it again", "err", err, "pause", d)
		})
}

// consumeAgain runs consume with fn until ctx ends, pausing as back says
// after each stop (told to pause) before it starts it again. A consume
// that delivered a firing worked: the pause after it starts again from
// back's first, so a consumer that failed for a while at start and ran
// for hours does not wait the longest pause after its next stop.
func consumeAgain(ctx context.Context, back *backoff.Backoff,
	consume func(context.Context, func(context.Context, timer.Fired) error) error,
	fn func(context.Context, timer.Fired) error, pause func(error, time.Duration)) {
	for {
		var delivered atomic.Bool
		err := consume(ctx, func(ctx context.Context, f timer.Fired) error {
			delivered.Store(true)
			return fn(ctx, f)
		})
		if ctx.Err() != nil {
			return
		}
		if delivered.Load() {
			back.Reset()
		}
		d := back.Next()
		pause(err, d)
		if backoff.Sleep(ctx, d) != nil {
			return
		}
	}
}

// timerFired wakes the run of a durable timer's firing f. An error it
// returns has the firing redelivered later.
func (r *Runner) timerFired(ctx context.Context, f timer.Fired) error {
	err := r.wake(ctx, f.Run)
	if r.noteQuarantine(err) {
		// Not redelivered at 10 Hz for as long as the run is
		// quarantined: the repaired run is woken, which derives
		// its due timers again from the log (watchQuarantined).
		return nil
	}
	if code := weft.ErrorCode(err); err != nil && (code.Retryable() || code == weft.CodeInternal) {
		// Redelivered, with a backoff: an internal refusal
		// (refusals.go) dropped the run, which is read again
		// from its log; the timer is never acked away.
		return err
	}
	if err != nil {
		r.log.Warn("timer firing", "run", f.Run, "key", f.Key, "err", err)
	}
	return nil
}

// runWorker runs the in-process worker w until ctx ends. A worker whose
// setup failed for a reason other than ctx (a consumer that could not be
// made: not an unanswered request, which the worker retries itself) has
// drained what it took and returned; a new one is started after a pause,
// doubling from a second up to 16 s, so that the runner never serves on
// without the worker that runs its agents' tool bodies — their tasks
// would wait in the queue for a worker no process runs.
func (r *Runner) runWorker(ctx context.Context, w *worker.Worker) {
	back := backoff.New(time.Second, 16*time.Second)
	for {
		err := w.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		d := back.Next()
		r.log.Error("the in-process worker stopped; starting a new one", "err", err, "pause", d)
		if backoff.Sleep(ctx, d) != nil {
			return
		}
		w = r.newWorker()
		r.inproc.Store(w)
	}
}
