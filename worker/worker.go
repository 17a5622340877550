// Package worker runs tool bodies for Weft runs: it consumes tool tasks from
// the WEFT_TASKS work-queue stream, runs the body, and reports how the
// attempt ended. Tasks are addressed by agent identity: the tasks of tool T
// in runs of agent A at version V are on weft.task.<A>.<V>.<T> (an api.Queue,
// the version written as one token), taken through one durable consumer
// weft_task_<A>@<V>@<T> shared by every worker of that queue, so a run of
// A@V only ever runs the body bound in A@V (docs/semantics.md §3).
//
// A Worker lives inside a runner process or stands alone; non-Go workers
// speak the same subjects (docs/protocol/41-tasks.md). For every task it:
//
//  1. does not start a task that reached it after its deadline (reported
//     lost, cause timed_out: the run's timer decides);
//  2. checks that the attempt is still current (AttemptCheck, default
//     LogCheck): a task that waited in the queue while its run was handed
//     off or recovered, or whose attempt already ended, is acked and its
//     body never started; a run that cannot be read puts the task back on
//     the queue (requeued), never reported lost;
//  3. claims the attempt: creates its key in the KV bucket weft_claims,
//     create-only (api.ClaimKey). A claim that exists means a worker took the
//     attempt before and its body may have run — whatever the server's
//     delivery count says, which a server restart can reset — so the body
//     is NOT started again: the attempt is reported lost (cause
//     worker_lost) and the run's recorded replay budget decides between a
//     new attempt and an uncertain effect, unless the worker that ran it
//     saved its report in the claim, which is then delivered. A claim that
//     cannot be taken requeues the task. Once the claim is taken it reads
//     the run again: an attempt that ended meanwhile never starts;
//  4. looks a last time before the start: a stop of the run (weft.stop.<run>)
//     received since the check, or a deadline passed since, means the body
//     never starts (acked silently, or reported lost timed_out);
//  5. runs the body under the task's timeout, sending progress acks
//     (InProgress) so the stream does not redeliver it while it runs;
//  6. reports the outcome (output, explain, uncertain, oversize when the
//     encoded output is over the run's max result bytes, or lost with
//     cause timed_out / stopped) on its queue's report subject
//     (api.Queue.ReportSubject: weft.api.report.<agent>.<version>.<tool>),
//     retrying while the attempt is current and saving the report in the
//     claim after a failed try, and acks the task once a runner answered.
//     Settlements go to the queue's settle subject likewise, so a worker
//     whose credentials allow only its queue's subjects (package roles)
//     works unchanged.
//
// A runner stops a run's running bodies (cancellation) by publishing on
// weft.stop.<run>; the worker cancels their contexts and reports them lost
// with cause stopped unless the body returns first.
//
// # Stopping
//
// When Run's context ends (SIGTERM) the worker drains: it takes no task
// and starts no body any more (a task it holds but has not started is
// requeued), and lets the bodies running finish and be reported
// (docs/semantics.md
// §8 graceful drain). The drain is bounded: at the end of the drain grace
// (WithDrainGrace, default DefaultDrainGrace) — or when an embedding
// process calls Abandon at the end of its own drain window — the bodies
// still running have their contexts cancelled and are reported lost with
// cause worker_lost, as a lost worker's (the run replays them if it may,
// else their effect is uncertain); a stopped settling body's wait for its
// return ends; reports and late settlements still undelivered are tried
// for LateAfterAbandon more, then their tasks go back to the queue. Run
// then returns, even when a body ignores its context.
package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/backoff"
	"github.com/weftrun/weft/internal/unanswered"
)

// Result is how a body ended, as the tool classified it.
type Result struct {
	// Outcome is api.OutcomeOutput, api.OutcomeExplain or api.OutcomeUncertain.
	Outcome string
	// Content is the encoded output (api.OutcomeOutput).
	Content json.RawMessage
	// Message is the definite failure (api.OutcomeExplain).
	Message string
	// Evidence says what may have happened (api.OutcomeUncertain).
	Evidence string
}

// Settler settles an action from inside its body's process; see Handler.
// The settler a Handler gets returns nil or a *weft.Error already_recorded,
// not_awaited or settle_unconfirmed (see SettleError).
type Settler func(ctx context.Context, s api.Settlement) error

// Handler runs one attempt's body. settle is the settlement path of this
// task's action: a settlement of the call that is still running in this
// very handler is refused not_awaited at once (docs/semantics.md §9).
type Handler func(ctx context.Context, t api.Task, settle Settler) Result

// Reporter delivers a report to the runtime and returns nil once a runner
// recorded (or refused) it. The default sends a request to the report's
// queue's subject (api.Report.Queue, api.Queue.ReportSubject), or weft.api.report;
// a runner embedding its workers may deliver directly.
type Reporter func(ctx context.Context, r api.Report) error

// Worker consumes and runs tool tasks.
type Worker struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	id       string
	log      *slog.Logger
	handlers map[api.Queue]Handler
	queues   []api.Queue
	report   Reporter
	settle   Settler
	ackWait  time.Duration
	grace    time.Duration // WithDrainGrace
	// copyDelay is WithHandedCopyDelay (HandedCopyDelay by default).
	copyDelay time.Duration
	ctxFrom   func(context.Context, nats.Header) context.Context
	check     AttemptCheck
	noCheck   bool
	// defaultCheck: check is LogCheck, set by New (HandOff may skip it).
	defaultCheck bool
	// ready is set once Run set up its consumers and the claims bucket
	// (HandOff takes tasks only then).
	ready atomic.Bool
	// handedOff counts the tasks HandOff took; handedDone holds the claim
	// keys of handed tasks whose report was answered (or that ended
	// without one), so that their stream copies are acked unread
	// (handed.go).
	handedOff              atomic.Int64
	handedFallbacks        atomic.Int64 // handed tasks that called their Fallback
	handedDone, handedPrev map[string]string
	handedSince            time.Time
	claims                 jetstream.KeyValue
	// claimGroup, set by WithGroupCommit, sends claim creates (claim.go).
	claimGroup func(context.Context, *nats.Msg) (*jetstream.PubAck, error)
	// afterClaim, when set (tests only), is called once a delivery holds
	// its attempt's claim, before the check after the claim and the body.
	afterClaim func(api.Task)
	// group owns every goroutine the worker starts (a task's handling, its
	// progress acks, a stopped body's late settlement): Run returns once
	// it is empty.
	group    errgroup.Group
	stopping atomic.Bool
	joined   atomic.Int64
	stops    atomic.Int64
	// rebinds counts the consumes that ended while Run ran (keep).
	rebinds atomic.Int64
	// retryBase and retryCap bound the backoff between report tries.
	retryBase, retryCap time.Duration

	mu      sync.Mutex
	running map[string]*running // key api.ClaimKey: every attempt this worker may start or runs
	held    map[string]*held    // key api.ClaimKey
	// abandoned is set by Abandon: no body starts any more (startBody).
	abandoned bool
	// abandon is closed by Abandon: a late settlement still waiting for
	// its stopped body stops waiting (settleLate).
	abandon chan struct{}
	// stopped ends when Run's context ends, or at Abandon: the retries of
	// the check before a body starts stop (current), as no body starts
	// any more.
	stopped  context.Context
	endStops context.CancelFunc
	// late ends LateAfterAbandon after Abandon: the report and late
	// settlement tries still in flight then are cut short (deliver,
	// settleLate), so that Run returns.
	late    context.Context
	endLate context.CancelFunc
}

type running struct {
	run    string
	cancel context.CancelCauseFunc
}

// Option configures a Worker.
type Option func(*Worker)

// WithID sets the worker's id, reported for audit.
func WithID(id string) Option { return func(w *Worker) { w.id = id } }

// WithLogger sets the structured logger.
func WithLogger(l *slog.Logger) Option { return func(w *Worker) { w.log = l } }

// WithReporter replaces the report path (default: request on the queue's
// report subject).
func WithReporter(r Reporter) Option { return func(w *Worker) { w.report = r } }

// WithSettler replaces the settlement path (default: request on the
// queue's settle subject, or weft.api.settle for a settlement naming no
// queue).
func WithSettler(s Settler) Option { return func(w *Worker) { w.settle = s } }

// WithContextFrom derives each body's base context from its task message's
// headers, for example to continue the run's trace (telemetry.Extract).
func WithContextFrom(f func(context.Context, nats.Header) context.Context) Option {
	return func(w *Worker) { w.ctxFrom = f }
}

// WithHandedCopyDelay sets how long the first delivery of another
// worker's handed task's stream copy is given back for (HeaderHandedTo;
// default HandedCopyDelay; 0: not delayed).
func WithHandedCopyDelay(d time.Duration) Option { return func(w *Worker) { w.copyDelay = d } }

// WithAckWait sets the consumers' ack wait: how long a task taken by a
// worker that vanished waits before it is redelivered (and reported lost
// when its attempt was claimed).
// Progress acks are sent every third of it. Default 3 s.
func WithAckWait(d time.Duration) Option { return func(w *Worker) { w.ackWait = d } }

// WithDrainGrace sets how long Run, once its context ended, waits for the
// bodies in flight (and for stopped settling bodies to return) before it
// abandons them as Abandon does, when nothing called Abandon first: the
// drain window of a worker that stands alone. Default DefaultDrainGrace; a
// d of zero or less keeps the default.
func WithDrainGrace(d time.Duration) Option {
	return func(w *Worker) {
		if d > 0 {
			w.grace = d
		}
	}
}

// DefaultDrainGrace is a worker's default drain grace (WithDrainGrace), as
// long as a runner's default drain window.
const DefaultDrainGrace = 10 * time.Second

// New returns a Worker using nc for requests and js for the task stream.
func New(nc *nats.Conn, js jetstream.JetStream, opts ...Option) *Worker {
	w := &Worker{nc: nc, js: js, id: "worker", handlers: map[api.Queue]Handler{}, ackWait: DefaultAckWait, grace: DefaultDrainGrace, copyDelay: HandedCopyDelay,
		retryBase: 50 * time.Millisecond, retryCap: 2 * time.Second, running: map[string]*running{}, held: map[string]*held{}, handedDone: map[string]string{},
		abandon: make(chan struct{})}
	w.stopped, w.endStops = context.WithCancel(context.Background())
	w.late, w.endLate = context.WithCancel(context.Background())
	for _, o := range opts {
		o(w)
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.report == nil {
		w.report = func(ctx context.Context, r api.Report) error {
			subject := api.ReportSubject
			if r.Queue != nil {
				subject, r.Queue = r.Queue.ReportSubject(), nil // the subject names it
			}
			return request(ctx, w.nc, subject, r)
		}
	}
	if w.settle == nil {
		w.settle = func(ctx context.Context, s api.Settlement) error {
			subject := api.SettleSubject
			if s.Queue != nil {
				subject, s.Queue = s.Queue.SettleSubject(), nil
			}
			return request(ctx, w.nc, subject, s)
		}
	}
	if w.check == nil && !w.noCheck {
		w.check = LogCheck(js)
		w.defaultCheck = true
	}
	return w
}

// Handle registers h as the body of q's tasks: the tool q.Tool as bound in
// the agent q.Agent at version q.Version. Call it before Run.
func (w *Worker) Handle(q api.Queue, h Handler) {
	if _, ok := w.handlers[q]; !ok {
		w.queues = append(w.queues, q)
	}
	w.handlers[q] = h
}

// DefaultAckWait is a worker's default ack wait, and that of the consumers
// runners create for external tools.
const DefaultAckWait = 3 * time.Second

// ConsumerConfig is the durable consumer shared by the workers of q.
func ConsumerConfig(q api.Queue, ackWait time.Duration) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       q.Consumer(),
		Description:   "Weft tasks of " + q.String(),
		FilterSubject: q.Subject(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	}
}

// Run consumes the registered queues' tasks until ctx ends — a queue's
// consume that ends meanwhile (its consumer deleted, or lost by a server)
// is made again after a pause (ConsumerRebound) — then waits for
// the bodies in flight (the drain: their reports are sent) and returns.
// A settling tool's body that was stopped (its timeout, a cancellation) is
// waited for too, and its late settlement offered (docs/semantics.md §8: a
// stopped settling body is like a running one), until Abandon; nothing the
// worker started runs on once Run returned, except the body of a handler
// that ignores its stopped context.
// Bodies are given their own contexts: cancelling ctx stops taking tasks,
// it does not stop running bodies (docs/semantics.md §8 graceful drain: they
// may
// finish and are reported); a run's stop, their timeout or Abandon stops
// them. Once ctx ends no new body starts: a task already delivered to this
// worker but not started is put back on the queue (requeued) for another
// worker. When the setup fails (ctx ends while the consumers are still
// being made, or one cannot be made), the tasks that the consumers set up
// before delivered are drained all the same (SetupStopped), and Run
// returns the setup's error.
//
// The drain is bounded: when the bodies are still running (or a stopped
// settling body has not returned) the drain grace (WithDrainGrace, default
// DefaultDrainGrace) after ctx ended, and nothing called Abandon, Run
// abandons them itself: their contexts are cancelled, the running ones are
// reported lost with cause worker_lost (the run decides replay or an
// uncertain effect, as for a lost worker), and Run returns once the reports
// and late settlements still tried end (LateAfterAbandon at most).
func (w *Worker) Run(ctx context.Context) error {
	defer w.endLate()
	stopSub, ccs, setupErr := w.serve(ctx)
	if stopSub != nil {
		defer stopSub.Unsubscribe()
	}
	if setupErr == nil {
		w.ready.Store(true)
		// Until ctx ends; a queue's consume that ends meanwhile (its
		// consumer deleted or lost) is made again (rebind.go).
		ccs = slices.DeleteFunc(w.keep(ctx, ccs), func(cc jetstream.ConsumeContext) bool { return cc == nil })
	} else {
		// The setup failed — ctx ended while the worker was still setting
		// up (a drain that began as its process started), or a consumer
		// could not be made — but a consumer set up before may have
		// delivered tasks already, whose bodies run: the consumers made
		// are drained as below, their tasks' bodies waited for and their
		// reports delivered, and no task they deliver is handled after
		// Run returned. Returning now would end w.late
		// under those reports (given up at their first try, the body's
		// result lost to its run: docs/semantics.md §8, what was in flight at
		// SIGTERM is recorded within the window).
		w.log.Info(SetupStopped, "err", setupErr)
	}
	// Under w.mu, as HandOff adds to w.group: none is added once the drain
	// began (w.group.Wait below).
	w.mu.Lock()
	w.stopping.Store(true)
	w.mu.Unlock()
	w.endStops()
	grace := time.NewTimer(w.grace)
	defer grace.Stop()
	// Drain, not Stop: a task the server already delivered to this worker
	// but still in the client's buffer would be discarded by Stop and
	// redelivered after the ack wait, reported worker_lost — an uncertain
	// effect, or a replay, for a body that never started.
	for _, cc := range ccs {
		cc.Drain()
	}
	// A drain waits for the server (a flush, up to 10 s when it does not
	// answer): after Abandon it is given LateAfterAbandon at most, like
	// every other try, so that Run returns within the embedding runner's
	// wait (a task still buffered then is redelivered after the ack wait).
	for _, cc := range ccs {
		select {
		case <-cc.Closed():
		case <-w.late.Done():
			cc.Stop()
		}
	}
	drained := make(chan error, 1)
	go func() { drained <- w.group.Wait() }()
	select {
	case err := <-drained:
		return cmp.Or(setupErr, err)
	case <-w.abandon: // the embedding process's drain window ended
	case <-grace.C:
		w.log.Warn("worker: bodies still running at the end of the drain grace; abandoning them (reported worker_lost)", "grace", w.grace)
		w.Abandon()
	}
	return cmp.Or(setupErr, <-drained)
}

// SetupStopped is the message Run logs (info level, with err) when its
// setup failed — ctx ended while it was still setting up, or a consumer
// could not be made — and it drains the tasks already delivered before it
// returns the setup's error.
const SetupStopped = "worker: setup stopped before it completed; draining the tasks already delivered"

// serve sets up what Run consumes (the claims bucket, the stop
// subscription, a consumer per queue), again and again while the server
// does not answer — a worker started while its server restarts waits for
// it instead of returning — until ctx ends. Any other error (a missing
// task stream) is returned.
//
// What an attempt set up is kept for the next (the stop subscription,
// the consumers already made, which go on delivering: their tasks are not
// thrown away) and returned with the error when serve gives up, so that
// Run drains those consumers and waits for what they delivered.
func (w *Worker) serve(ctx context.Context) (*nats.Subscription, []jetstream.ConsumeContext, error) {
	// Each attempt has its own deadline, doubling from 2 s up to 16 s: a
	// request sent while the server restarts may never be answered.
	back, limit := backoff.New(100*time.Millisecond, 2*time.Second), backoff.New(2*time.Second, 16*time.Second)
	var stopSub *nats.Subscription
	var ccs []jetstream.ConsumeContext
	for {
		actx, cancel := context.WithTimeout(ctx, limit.Next())
		var err error
		stopSub, ccs, err = w.setup(actx, stopSub, ccs)
		cancel()
		if err == nil {
			return stopSub, ccs, nil
		}
		if ctx.Err() != nil || !unanswered.Is(err) {
			return stopSub, ccs, err
		}
		w.log.Warn("worker: the server does not answer; retrying", "err", err)
		if back.Wait(ctx) != nil {
			return stopSub, ccs, err
		}
	}
}

// setup is one attempt of serve, given what the attempts before set up
// (stopSub, or nil; the consumers of w.queues' first len(ccs) queues): it
// sets up the rest and returns all it set up, also with an error.
func (w *Worker) setup(ctx context.Context, stopSub *nats.Subscription, ccs []jetstream.ConsumeContext) (*nats.Subscription, []jetstream.ConsumeContext, error) {
	// Set once, before the first consumer: the tasks of the consumers
	// kept from an attempt before are handled (and read w.claims) while
	// this one runs.
	if w.claims == nil {
		claims, err := claimsBucket(ctx, w.js)
		if err != nil {
			return stopSub, ccs, fmt.Errorf("worker: bucket %s: %w", api.ClaimsBucket, err)
		}
		w.claims = claims
	}
	if stopSub == nil {
		var err error
		stopSub, err = w.nc.Subscribe(api.StopSubjectPrefix+"*", func(m *nats.Msg) {
			w.stopRun(m.Subject[len(api.StopSubjectPrefix):])
			w.stops.Add(1)
		})
		if err != nil {
			return nil, ccs, fmt.Errorf("worker: subscribe stop: %w", err)
		}
	}
	for _, q := range w.queues[len(ccs):] {
		cc, err := w.consume(ctx, q)
		if err != nil {
			return stopSub, ccs, err
		}
		ccs = append(ccs, cc)
	}
	return stopSub, ccs, nil
}

// stopRun cancels every running body of run, and every attempt of run
// this worker is about to start, as a cancellation does.
func (w *Worker) stopRun(run string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.running {
		if r.run == run {
			r.cancel(errStopped)
		}
	}
}

// Abandon stops every body this worker is running as if the worker were
// lost: each attempt is reported lost, cause worker_lost (the run decides
// replay or uncertainty from the recorded budget, as after a crash). An
// embedding process calls it when its drain window ended with bodies
// still running, so that Run returns instead of leaving them running
// after their process part stopped; Run calls it itself at the end of its
// drain grace (WithDrainGrace) when nobody did.
//
// An attempt this worker holds but whose body has not started yet (still
// checked or claimed) never starts after Abandon: its claim is released
// and its task requeued (startBody). A settling body stopped before
// Abandon and still running is no longer waited for: its late settlement
// is not offered (settleLate), as after a lost worker.
func (w *Worker) Abandon() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.abandoned {
		close(w.abandon)
		w.endStops()
		time.AfterFunc(LateAfterAbandon, w.endLate)
	}
	w.abandoned = true
	for _, r := range w.running {
		r.cancel(errAbandoned)
	}
}

// ReasonOwnCall is the Reason of the not_awaited refusal of a handler
// settling its own running call (refused by the worker, docs/semantics.md §9).
const ReasonOwnCall = "own_call"

var (
	errStopped  = errors.New("stopped by cancellation")
	errTimedOut = errors.New("body timed out")
	// errAbandoned stops the bodies still running when an embedding
	// process's drain window ended (Abandon).
	errAbandoned = errors.New("abandoned at the end of the drain window")
)

// decodeTask decodes a task body (docs/protocol/41-tasks.md): a JSON
// object naming at least its run and action. A task it refuses is
// terminated unrun.
func decodeTask(data []byte) (api.Task, error) {
	var t api.Task
	if err := json.Unmarshal(data, &t); err != nil {
		return api.Task{}, err
	}
	if t.Run == "" || t.Action == "" {
		return api.Task{}, errors.New("a task names its run and action")
	}
	return t, nil
}

func (w *Worker) handle(q api.Queue, h Handler, m jetstream.Msg) {
	t, err := decodeTask(m.Data())
	if err != nil {
		w.log.Error("worker: malformed task, terminated", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	if t.Agent != q.Agent || t.Version != q.Version || t.Tool != q.Tool {
		// Not a task of this queue's binding: running h would run another
		// agent identity's body (docs/semantics.md §3).
		w.log.Error("worker: task of another agent identity on this queue, terminated", "subject", m.Subject(), "queue", q.String(),
			"run", t.Run, "action", t.Action, "agent", t.Agent, "version", t.Version, "tool", t.Tool)
		_ = m.Term()
		return
	}
	if w.delayHandedCopy(m) {
		// The stream copy of a task another worker was handed (its
		// runner's own): delayed once, not claimed or reported at once.
		return
	}
	wq := q
	rep := api.Report{Schema: api.Schema, Run: t.Run, Action: t.Action, Attempt: t.Attempt, Incarnation: t.Incarnation, Worker: w.id, Queue: &wq}
	rep.CommandID = fmt.Sprintf("report/%s/%s/%d/%d", t.Run, t.Action, t.Attempt, t.Incarnation)

	// Keep the task alive while we work on it, including while reporting.
	stopProgress := make(chan struct{})
	w.group.Go(func() error {
		tk := time.NewTicker(w.ackWait / 3)
		defer tk.Stop()
		for {
			select {
			case <-stopProgress:
				return nil
			case <-tk.C:
				_ = m.InProgress()
			}
		}
	})
	defer close(stopProgress)

	key := api.ClaimKey(t.Run, t.Action, t.Attempt, t.Incarnation)
	handedDone, handedUnstarted := w.wasHanded(key)
	if handedDone {
		// The stream copy of a task this worker was handed and has done
		// (handed.go): its body never starts again, nothing to report.
		_ = m.Ack()
		return
	}
	held, first := w.enter(key)
	if !first {
		// This worker already holds the attempt (the server delivered the
		// task again, as after a restart that forgot the delivery): this
		// delivery neither starts the body nor reports; it ends as the
		// first one does.
		w.joined.Add(1)
		w.log.Info("worker: a task delivered again while this worker holds its attempt; waiting for it", "run", t.Run, "action", t.Action, "attempt", t.Attempt)
		<-held.done
		switch {
		case held.acked:
			_ = m.Ack()
		case held.unstarted != "":
			w.requeue(m, t, "a handed task of this worker did not start the body", held.unstarted)
		default:
			_ = m.Nak()
		}
		return
	}
	// Deliveries that wait for this one end as it does: acked, or given
	// back. A task requeued was not held at all: the hold ends before its
	// copy is published, or the copy would wait for it.
	var once sync.Once
	release := func(acked bool) { once.Do(func() { w.leave(key, held, acked) }) }
	defer release(false)
	done := func(ack bool) {
		if ack {
			_ = m.Ack()
		} else {
			_ = m.Nak()
		}
		release(ack)
	}
	requeue := func(why string, unstarted ...string) {
		release(false)
		w.requeue(m, t, why, unstarted...)
	}
	// The attempt can be stopped from here on, before its body starts: a
	// cancellation recorded after the check below read the run reaches
	// this worker as a stop that the start must see (docs/semantics.md §7), or
	// the body would start after the stop came and went and run unstopped.
	base := context.Background()
	if w.ctxFrom != nil {
		base = w.ctxFrom(base, m.Headers())
	}
	ctx, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	w.track(key, t.Run, cancel)
	defer w.untrack(key)

	if t.Deadline != nil && !time.Now().Before(*t.Deadline) {
		// The task waited past its body's deadline: the run has decided
		// (or will decide) the timeout; starting the body now would only
		// add an effect nobody waits for. A report saved by the worker
		// that ran the body is still delivered.
		if saved, ok := w.savedReport(key); ok {
			rep = saved
		} else {
			rep.Outcome, rep.Cause = api.OutcomeLost, "timed_out"
			rep.Evidence = "the task reached a worker after its deadline; the body was not started"
		}
		done(w.deliver(t, rep, nil))
		return
	}
	if w.stopping.Load() {
		// The worker is draining: it starts no new body, so whether this
		// one may start is for the worker that takes it
		// (docs/protocol/41-tasks.md rule 9). The task goes back to the
		// queue at once, without the check — which, while the run cannot
		// be read, would be tried again for each copy requeued and
		// delivered again here before the drain ends.
		requeue("the worker is stopping")
		return
	}
	switch w.current(t) {
	case attemptStale:
		// Recovery (or a report, a stop, the run's end) already decided
		// this attempt: its body must not start now.
		w.log.Info("worker: task of an attempt that is no longer current, not started", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "incarnation", t.Incarnation)
		// A worker that marked its claim not started and died before
		// its report left the task unacked: this delivery reports the
		// mark in its place (one KV get, only for a stale task;
		// docs/adr/0023-closing-attempts.md, "Late evidence").
		if c, ok := w.claimAt(key); ok && c.NotStarted != nil && c.Closed == nil {
			w.reportNotStarted(t, rep, c.NotStarted.Why)
		}
		done(true)
		return
	case attemptUnknown:
		// Not started, and this worker knows it: another try (here or in
		// another worker) decides, instead of a lost report that would
		// make the attempt uncertain for nothing.
		requeue("the run could not be read to check the attempt")
		return
	}
	if w.stopping.Load() {
		// The worker began draining during the check: the same.
		requeue("the worker is stopping")
		return
	}
	unstarted := m.Headers().Values(api.HeaderUnstartedClaim)
	if handedUnstarted != "" {
		// A handed task of this worker left this claim without starting
		// the body (handed.go dropUnstarted): taken over.
		unstarted = append(unstarted, handedUnstarted)
	}
	res, own, found := w.takeClaim(t, key, unstarted)
	switch res {
	case claimUnknown:
		// The create (or a take-over) may have landed unanswered: the
		// copy names this delivery's token as a claim no body started
		// under, or its next delivery would report the attempt lost.
		requeue("the attempt could not be claimed", own.val.Token)
		return
	case claimHeld:
		if c := found.Closed; c != nil {
			// Closed by the runtime before any worker claimed it: the
			// attempt provably never acted and never will. Its end was
			// (or will be) recorded by whoever closed it: nothing is
			// reported (docs/adr/0023-closing-attempts.md).
			w.log.Info("worker: attempt closed before any worker claimed it, not started", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "incarnation", t.Incarnation, "by", c.By, "why", c.Why)
			done(true)
			return
		}
		if ns := found.NotStarted; ns != nil && found.Report == nil {
			// Claimed by a worker that then decided not to start the body
			// and said so in its claim: no body of the attempt ever
			// started, and none starts now. The attempt's end is the
			// run's to record (its close counts the claim closed); the
			// mark is reported (lost not_started) in case its marker
			// died before its own report — but a report its worker saved
			// (the lost timed_out of a deadline that passed before the
			// body) is delivered instead, as any saved report.
			w.log.Info("worker: attempt claimed and released as not started, not started", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "incarnation", t.Incarnation, "by", found.Worker, "why", ns.Why)
			// Its marker may have died before its report: this
			// redelivery reports the mark in its place.
			w.reportNotStarted(t, rep, ns.Why)
			done(true)
			return
		}
		// Claimed before: its body may have started (a worker that
		// vanished, or a server that forgot the delivery). It never
		// starts again; the run decides from its replay budget — unless
		// the worker that ran it saved its report.
		if found.Report != nil {
			rep = *found.Report
			w.log.Info("worker: delivering the report saved with the attempt's claim", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "by", found.Worker)
		} else {
			by := found.Worker
			if by == "" {
				by = "unknown"
			}
			rep.Outcome, rep.Cause = api.OutcomeLost, "worker_lost"
			rep.Evidence = fmt.Sprintf("attempt %d was claimed before by worker %s (claim %s): its body may have run; not started again", t.Attempt, by, key)
		}
		done(w.deliver(t, rep, nil))
		return
	}
	w.claimedHeld(held)
	if w.afterClaim != nil {
		w.afterClaim(t) // tests: between the claim and the body
	}
	// From here on, every path that does not start the body marks the
	// claim as not started before the task is acked or reported
	// (markNotStarted): a decision about the attempt that reads the claim
	// afterwards knows the body never started
	// (docs/adr/0023-closing-attempts.md, "Claims released as not
	// started").
	//
	// The run may have ended the attempt while it was checked and claimed
	// (a cancellation, a recovery, a timeout): read it again now that the
	// claim is taken. An attempt ended before its claim never starts; one
	// ended after it ended while a worker held it, which the recorded loss
	// accounts for (its body may have run). A run that cannot be read now
	// was read once: the body starts.
	if w.current(t) == attemptStale {
		w.log.Info("worker: attempt ended while it was claimed, not started", "run", t.Run, "action", t.Action, "attempt", t.Attempt, "incarnation", t.Incarnation)
		if w.markNotStarted(t, &own, api.ClaimEnded) {
			w.reportNotStarted(t, rep, api.ClaimEnded)
		}
		done(true)
		return
	}
	// The last look before the start, after everything that may take a
	// while: what happened while the attempt was checked, claimed and read
	// again decides too.
	if context.Cause(ctx) == errStopped {
		// Its run was cancelled (or ended) meanwhile and recorded the
		// attempt stopped: the body never starts. The mark is reported
		// (lost, not_started): a decision that found the claim before the
		// mark recorded the action uncertain, and the runner reads the
		// mark to correct it (docs/adr/0023-closing-attempts.md, "Late
		// evidence: a mark after the decision").
		w.log.Info("worker: task stopped before its body started, not started", "run", t.Run, "action", t.Action, "attempt", t.Attempt)
		if w.markNotStarted(t, &own, api.ClaimStopped) {
			w.reportNotStarted(t, rep, api.ClaimStopped)
		}
		done(true)
		return
	}
	if t.Deadline != nil && !time.Now().Before(*t.Deadline) {
		// The deadline passed while the attempt was checked, claimed or
		// read again: the run's timer decides the attempt at its deadline
		// (or decided it), so a body started now would start after its
		// attempt was recorded lost (rule 1 of the task protocol). The
		// claim stays, marked not started: no other delivery starts it
		// either, and the close of the loss this reports counts it closed.
		w.markNotStarted(t, &own, api.ClaimDeadline)
		rep.Outcome, rep.Cause = api.OutcomeLost, "timed_out"
		rep.Evidence = "the deadline passed before the body started; the body was not started"
		done(w.deliver(t, rep, &own))
		return
	}
	if !w.startBody() {
		// The worker stopped (or its drain window ended, Abandon) while
		// the attempt was checked, claimed and read again: it starts no
		// new body (docs/semantics.md §8 graceful drain). It knows the body
		// never
		// started, so it releases the claim and requeues the task: the
		// next worker runs it as a first delivery, instead of reporting
		// it worker_lost (a replay or an uncertain effect for nothing).
		w.releaseClaim(t, &own)
		requeue("the worker stopped before the body started", own.val.Token)
		return
	}
	rep = w.run(ctx, h, t, rep, &own)
	done(w.deliver(t, rep, &own))
}

// startBody is the last look before a body starts: false once the worker
// is stopping or abandoned. It is decided under w.mu, as Abandon is, so a
// body either started before Abandon (and is stopped by it) or never
// starts.
func (w *Worker) startBody() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.abandoned && !w.stopping.Load()
}

// track makes the attempt of claim key stoppable by its run's stops; its
// entry is the attempt's own, so that attempts of one action running at
// once in this worker are all stopped.
func (w *Worker) track(key, run string, cancel context.CancelCauseFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running[key] = &running{run: run, cancel: cancel}
}

// untrack ends track.
func (w *Worker) untrack(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.running, key)
}

// held is an attempt this worker holds: from the check before its claim
// until its task was acked or nak'd.
type held struct {
	done  chan struct{}
	acked bool
	// claimed: the holder took the attempt's claim (under w.mu).
	claimed bool
	// unstarted is the token of a claim a handed task took, or may have
	// taken, without starting the body and could not remove
	// (dropUnstarted): a delivery that waited for the hold requeues its
	// task naming it. Set before the hold ends.
	unstarted string
}

// enter registers the attempt of claim key as held by this worker; first
// is false (and h the holder) when it already was.
func (w *Worker) enter(key string) (h *held, first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.held[key]; ok {
		return h, false
	}
	h = &held{done: make(chan struct{})}
	w.held[key] = h
	return h, true
}

// leave ends the hold of key: deliveries waiting for it end as it did.
func (w *Worker) leave(key string, h *held, acked bool) {
	w.mu.Lock()
	delete(w.held, key)
	w.mu.Unlock()
	h.acked = acked
	close(h.done)
}

// requeue puts m, a task whose body this worker did not start, back on
// the queue as a new message and acks m. It is not nak'd: a worker that
// knows the body did not start makes another try decide rather than the
// server's delivery count. The copy keeps the headers (traceparent) under
// a Nats-Msg-Id of its own, and adds to api.HeaderUnstartedClaim the tokens of
// claims this delivery took, or may have taken, without starting the body
// (unstarted): the delivery of the copy takes such a claim over. If the
// copy cannot be published, m is nak'd: its redelivery starts the body if
// the attempt is unclaimed, and reports it worker_lost if a claim this
// delivery took unanswered stayed (conservative: nothing started).
func (w *Worker) requeue(m jetstream.Msg, t api.Task, why string, unstarted ...string) {
	msg := nats.NewMsg(m.Subject())
	msg.Data = m.Data()
	for k, v := range m.Headers() {
		msg.Header[k] = slices.Clone(v)
	}
	// A requeued copy is nobody's handed task any more: not delayed.
	msg.Header.Del(HeaderHandedTo)
	for _, tok := range unstarted {
		if tok != "" && !slices.Contains(msg.Header.Values(api.HeaderUnstartedClaim), tok) {
			msg.Header.Add(api.HeaderUnstartedClaim, tok)
		}
	}
	id := fmt.Sprintf("%s/%s/%d/%d", t.Run, t.Action, t.Attempt, t.Incarnation)
	if md, err := m.Metadata(); err == nil {
		id = fmt.Sprintf("%s/requeued/%d", id, md.Sequence.Stream)
	}
	msg.Header.Set(api.HeaderMsgID, id)
	ctx, cancel := context.WithTimeout(w.late, 10*time.Second) // cut short LateAfterAbandon after Abandon
	defer cancel()
	if _, err := w.js.PublishMsg(ctx, msg); err != nil {
		w.log.Error("worker: cannot requeue a task not started; nak'd", "why", why, "run", t.Run, "action", t.Action, "err", err)
		_ = m.Nak()
		return
	}
	w.log.Info("worker: task not started and requeued", "why", why, "run", t.Run, "action", t.Action, "attempt", t.Attempt)
	_ = m.Ack()
}

type currency int

const (
	attemptCurrent currency = iota
	attemptStale
	attemptUnknown
)

// current checks that t's attempt is still the one its run waits for,
// retrying a run that cannot be read for a while (the task is kept alive
// by progress acks meanwhile).
func (w *Worker) current(t api.Task) currency {
	if w.check == nil {
		return attemptCurrent
	}
	back := backoff.New(50*time.Millisecond, 2*time.Second)
	for range 8 {
		ctx, cancel := context.WithTimeout(w.stopped, 5*time.Second)
		ok, err := w.check(ctx, t)
		cancel()
		if err == nil {
			if ok {
				return attemptCurrent
			}
			return attemptStale
		}
		w.log.Warn("worker: cannot check the attempt", "run", t.Run, "action", t.Action, "err", err)
		if back.Wait(w.stopped) != nil {
			// The worker stopped: it starts no new body, so whether
			// this one may start no longer matters (the task is requeued).
			break
		}
	}
	return attemptUnknown
}

// run runs the body under ctx (cancelled by its run's stops, with cause
// errStopped) and the task's timeout, and fills the report. It renews own,
// the attempt's claim, every ClaimRenew while the body runs.
func (w *Worker) run(ctx context.Context, h Handler, t api.Task, rep api.Report, own *ownClaim) api.Report {
	if t.TimeoutMS >= 0 {
		// The body's context carries the attempt's deadline (ctx.Deadline),
		// not only a cancellation when a timer fires: a body this process
		// gets to run late (paused, starved of CPU) still sees by the
		// clock that its time is up, and so does every call it makes under
		// its context (a dial, a request: Go's I/O sets the deadline on the
		// socket and fails at once once it passed).
		deadline := time.Now().Add(time.Duration(t.TimeoutMS) * time.Millisecond)
		if t.Deadline != nil {
			deadline = *t.Deadline
		}
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadlineCause(ctx, deadline, errTimedOut)
		defer cancelDeadline()
	}
	var (
		bodyMu   sync.Mutex
		returned bool
		stopped  bool // the task is over: timed out or stopped
	)
	// A handler settling its own call is refused only while its body
	// runs: once the body was stopped (its timeout, a cancellation) the run
	// waits for a settlement, and the body's own is that settlement
	// (docs/semantics.md §3, §9).
	settle := func(sctx context.Context, s api.Settlement) error {
		bodyMu.Lock()
		own := !returned && !stopped && s.Run == t.Run && s.Action == t.Action
		bodyMu.Unlock()
		if own {
			return &weft.Error{Code: weft.CodeNotAwaited, Reason: ReasonOwnCall, Message: "a handler cannot settle its own running call"}
		}
		if s.Queue == nil {
			s.Queue = rep.Queue // settled on this queue's subject
		}
		return SettleError(w.settle(sctx, s))
	}
	done := make(chan Result, 1)
	go func() {
		res := func() (res Result) {
			defer func() {
				if p := recover(); p != nil {
					res = Result{Outcome: api.OutcomeUncertain, Evidence: fmt.Sprintf("the body panicked: %v", p)}
				}
			}()
			return h(ctx, t, settle)
		}()
		bodyMu.Lock()
		returned = true
		bodyMu.Unlock()
		done <- res
	}()
	renew := time.NewTicker(ClaimRenew)
	defer renew.Stop()
	for {
		select {
		case res := <-done:
			rep.Outcome, rep.Content, rep.Message, rep.Evidence = res.Outcome, res.Content, res.Message, res.Evidence
			if res.Outcome == api.OutcomeOutput && t.MaxResultBytes > 0 && int64(len(res.Content)) > t.MaxResultBytes {
				rep.Outcome, rep.Content, rep.Bytes = api.OutcomeOversize, nil, int64(len(res.Content))
			}
			return rep
		case <-ctx.Done():
			bodyMu.Lock()
			stopped = true
			bodyMu.Unlock()
			if cause := context.Cause(ctx); cause == errTimedOut {
				rep.Outcome, rep.Cause = api.OutcomeLost, "timed_out"
				rep.Evidence = fmt.Sprintf("the body was still running at its %d ms timeout", t.TimeoutMS)
			} else if cause == errAbandoned {
				rep.Outcome, rep.Cause = api.OutcomeLost, "worker_lost"
				rep.Evidence = "the body was still running when its worker's drain window ended; it was stopped"
			} else {
				// Stopped by a cancellation: the task is over whatever the
				// body still does; its run decides (settle window or
				// uncertain).
				rep.Outcome, rep.Cause = api.OutcomeLost, "stopped"
				rep.Evidence = "stopped while running"
			}
			w.settleLate(t, done)
			return rep
		case <-renew.C:
			// A long body's claim must outlive it: a later delivery of its
			// task must find it.
			if err := w.updateClaim(own); err != nil {
				w.log.Warn("worker: cannot renew the claim of a running body", "run", t.Run, "action", t.Action, "err", err)
			}
		}
	}
}

// settleLate makes a settling tool's own return value win whenever it
// returns after its task was stopped (docs/semantics.md §3): a definite result
// (output within max result bytes, or explain) is offered as the action's
// settlement once the body returns. The run accepts it while it waits for
// a settlement, or once later as a definite settlement of the uncertain
// action.
//
// It runs in the worker's group, so Run waits for it: a stopped settling
// body is like a running one (docs/semantics.md §8), and its result, once it
// returned, is known only here — the task was acked with its stopped
// report, so no later delivery could offer it. Stopping the worker never
// cuts the offer short: the tries (at most lateTries, each bounded) run
// to their end before Run returns. Only Abandon (the drain window ended:
// the embedding process's, or Run's drain grace) ends the wait for a body
// that has not returned yet: there is no result
// to lose then, and the run decides as after a lost worker (its settle
// window, then uncertain; one definite settlement or a person reconciles).
// After Abandon the offers of a body that did return go on for
// LateAfterAbandon at most, then the result is logged (error level) for
// the person who reconciles: the embedding runner's Run must return.
func (w *Worker) settleLate(t api.Task, done <-chan Result) {
	if t.SettleWithinMS <= 0 {
		return
	}
	w.group.Go(func() error {
		var res Result
		select {
		case res = <-done:
		case <-w.abandon:
			select {
			case res = <-done: // returned as the window ended: still offered
			default:
				w.log.Info("worker: abandoned a stopped body's wait for its return; no late settlement", "run", t.Run, "action", t.Action)
				return nil
			}
		}
		switch {
		case res.Outcome == api.OutcomeOutput && (t.MaxResultBytes <= 0 || int64(len(res.Content)) <= t.MaxResultBytes):
		case res.Outcome == api.OutcomeExplain:
		default:
			w.log.Info("worker: a stopped body returned no definite result", "run", t.Run, "action", t.Action, "outcome", res.Outcome)
			return nil
		}
		s := api.Settlement{Schema: api.Schema, CommandID: fmt.Sprintf("return/%s/%s/%d/%d", t.Run, t.Action, t.Attempt, t.Incarnation),
			Run: t.Run, Action: t.Action, Outcome: res.Outcome, Content: res.Content, Message: res.Message,
			Summary: fmt.Sprintf("the body of attempt %d returned %s after it was stopped", t.Attempt, res.Outcome)}
		back := backoff.New(w.retryBase, w.retryCap)
		// Once the worker is abandoned (the embedding runner's drain
		// window ended, or Run's drain grace) the offers go on for
		// LateAfterAbandon at most (w.late, which also cuts short a try
		// in flight): Run returns within the runner's wait, and the
		// result is logged for the person who reconciles the action.
		giveUp := func(tries int) error {
			w.log.Error("worker: a stopped body's late settlement was not confirmed; a person reconciles the action with the result logged here",
				"run", t.Run, "action", t.Action, "attempt", t.Attempt, "tries", tries, "outcome", res.Outcome, "content", string(res.Content), "message", res.Message)
			return nil
		}
		for try := 1; try <= lateTries; try++ {
			limit := 15 * time.Second
			select {
			case <-w.abandon:
				limit = LateAfterAbandon / 2
			default:
			}
			ctx, cancel := context.WithTimeout(w.late, limit)
			err := w.settle(ctx, s)
			cancel()
			var coded *weft.Error
			if err == nil || errors.As(err, &coded) && !retryable(coded.Code) {
				if err != nil {
					w.log.Info("worker: late return refused", "run", t.Run, "action", t.Action, "err", err)
				}
				return nil
			}
			if w.late.Err() != nil || back.Wait(w.late) != nil {
				return giveUp(try)
			}
		}
		return giveUp(lateTries)
	})
}

// lateTries is how many times a stopped body's late settlement is offered
// before the worker gives up (the run then decides: uncertain, reconciled).
const lateTries = 20

// LateAfterAbandon is how long a stopped body's late settlement, or an
// undelivered report, is still offered once the worker is abandoned
// (Abandon: the embedding runner's drain window ended, or Run's drain
// grace); it is shorter than the runner's wait for the worker's Run after
// Abandon.
const LateAfterAbandon = 5 * time.Second

// retryable reports whether a refusal of a report or a settlement says
// "try again": the retryable codes (weft.Code.Retryable); quarantined —
// the run's log holds a message no reader can fold; the report is kept
// (never dropped: the body ran) until a repair voids it (docs/adr/0011);
// and internal — the runtime's own fault, never the report's: a real
// result is not given up for it (docs/semantics.md §8).
func retryable(c weft.Code) bool {
	return c.Retryable() || c == weft.CodeQuarantined || c == weft.CodeInternal
}

// stopTries is how many more times a stopping worker tries a report it
// could neither deliver nor save before it gives the task back.
const stopTries = 20

// deliver sends a report until a runner answered it (success or a coded
// refusal), backing off between tries, keeping the task (progress acks)
// as long as its attempt lives: a real result is never given up for
// failed deliveries (docs/semantics.md §8). own is the claim of the attempt
// whose
// body this worker ran (nil for a report it did not produce): on the first
// failed try the report is saved in it, so that the task delivered again —
// to another worker, after this one stopped or vanished — delivers it
// instead of reporting the attempt lost. deliver reports whether the task
// is to be acked: the report was answered, or the attempt is no longer
// current (its report would change nothing). It gives the task back (nak)
// only when the worker stops, once the report is saved — or, if it cannot
// be saved either, after stopTries more tries.
func (w *Worker) deliver(t api.Task, rep api.Report, own *ownClaim) bool {
	back := backoff.New(w.retryBase, w.retryCap)
	saved := own == nil
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(w.late, 10*time.Second)
		err := w.report(ctx, rep)
		cancel()
		var coded *weft.Error
		if errors.As(err, &coded) && coded.Code == weft.CodePayloadTooLarge && (rep.Outcome == api.OutcomeOutput || rep.Outcome == api.OutcomeExplain || len(rep.Evidence) > api.MaxText) {
			// The result cannot be carried or recorded (the NATS server's
			// max_payload is too small for it, or a message or evidence is
			// over the command API's field limit, api.MaxText). The body
			// ran, so its effect may have happened: report the attempt
			// uncertain, saying why, instead of retrying a report that can
			// never land or dropping it.
			w.log.Error("worker: report too large for the NATS server; reporting the attempt uncertain", "run", rep.Run, "action", rep.Action, "err", err)
			rep = tooLarge(rep, coded)
			saved = own == nil
			continue
		}
		if err == nil || errors.As(err, &coded) && !retryable(coded.Code) {
			if err != nil {
				w.log.Info("worker: report refused", "run", rep.Run, "action", rep.Action, "err", err)
			}
			return true
		}
		if !saved {
			own.val.Report = &rep
			if serr := w.updateClaim(own); serr != nil {
				own.val.Report = nil
				w.log.Warn("worker: cannot save the undelivered report with the attempt's claim", "run", rep.Run, "action", rep.Action, "err", serr)
			} else {
				saved = true
			}
		}
		if try%10 == 0 && w.stale(t) {
			w.log.Info("worker: the attempt is no longer current; its undelivered report is dropped", "run", rep.Run, "action", rep.Action, "err", err)
			return true
		}
		if w.stopping.Load() && (saved || try >= stopTries) {
			if own != nil && saved {
				w.log.Warn("worker: stopping with an undelivered report, saved with the attempt's claim; the task goes back to the queue", "run", rep.Run, "action", rep.Action, "err", err)
			} else {
				w.log.Error("worker: stopping with an undelivered report; the task goes back to the queue", "run", rep.Run, "action", rep.Action, "saved", saved, "err", err)
			}
			return false
		}
		if try%50 == 0 {
			w.log.Warn("worker: report not delivered yet; still trying", "run", rep.Run, "action", rep.Action, "tries", try, "err", err)
		}
		if w.late.Err() != nil || back.Wait(w.late) != nil {
			// Abandoned, and LateAfterAbandon is over: the task goes
			// back as a lost worker's would (a saved report is still
			// delivered by the next worker; else its redelivery
			// reports the attempt worker_lost).
			w.log.Error("worker: abandoned with an undelivered report; the task goes back to the queue", "run", rep.Run, "action", rep.Action,
				"saved", saved, "outcome", rep.Outcome, "content", string(rep.Content), "message", rep.Message, "evidence", rep.Evidence, "err", err)
			return false
		}
	}
}

// stale reports whether t's attempt is known to be no longer current.
func (w *Worker) stale(t api.Task) bool {
	if w.check == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(w.late, 5*time.Second)
	defer cancel()
	ok, err := w.check(ctx, t)
	return err == nil && !ok
}

// tooLarge turns rep, whose result could not be reported or recorded, into
// an uncertain report that says why.
func tooLarge(rep api.Report, cause *weft.Error) api.Report {
	size := len(rep.Content) + len(rep.Message) + len(rep.Evidence)
	rep.Outcome, rep.Content, rep.Message = api.OutcomeUncertain, nil, ""
	rep.Evidence = fmt.Sprintf("the attempt's %d-byte result could not be recorded (payload_too_large: %s); the effect may have happened", size, cause.Message)
	return rep
}
