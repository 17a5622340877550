package e2e_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
)

// TestChaos is the runner-level randomized test (docs/reliability.md): three
// real
// runner processes (this binary re-executed, each with its in-process
// worker) and two standalone worker processes (reporting over
// weft.api.report), serving agent "chaos" versions 1 and 2 (see
// chaosAgents: bodies that sometimes outlive their timeout, model calls
// that time out, approvals that expire, one or two tool turns) over a
// real nats-server, and a seeded schedule of random commands (start,
// approve, reject, cancel, reconcile), SIGKILL, SIGSTOP/SIGCONT and
// SIGTERM of runners and workers, their restarts, restarts of the server
// on the same store and port — clean or as a crash (the consumers'
// delivery state rolled back, natstest.CrashRestart) — and a store that
// refuses writes for a while (the event log, the drivers bucket). Then the
// chaos stops and every run must settle. Checked against an fsynced ledger
// of real body starts, the log and the schedule itself:
//
//   - no attempt's body starts twice; no non-replayable action ("pay") has
//     two attempts; no body starts without its attempt's fence in the log;
//   - no body starts after its attempt was recorded lost, after its
//     recorded deadline, or after its run was cancelled (startMargin after
//     them, allowing for the worker's last check);
//   - an output recorded for an attempt is the one its body returned (so
//     a body that never started reports nothing);
//   - a run of agent version V only ever runs V's body;
//   - an action with a fenced attempt never ends not_started, rejected or
//     denied (docs/semantics.md §5);
//   - no runner recovers a run from itself (but one it handed off itself:
//     a partition released and claimed again), none takes over a runner that
//     was alive all along (not killed, paused or draining within slack:
//     liveness survives server restarts), and a hand-off re-asks no
//     approval;
//   - no definite refusal is contradicted by the log: of an approve or
//     reject (the request was pending before and after), a cancel or an
//     answer (run_ended while the run was live before and after), a
//     reconcile (the action was uncertain before and after), a start (a new
//     run id of a served agent);
//   - every run ends finished or suspended waiting for a person, and
//     then finishes once a person answers what it asks (answerEveryone:
//     every pending request rejected, every uncertain action reconciled,
//     each answer accepted or refused for a reason the log shows); no
//     well-formed command is answered invalid_request or internal
//     (docs/semantics.md §8, "A run can always be answered").
//
// The schedule is seeded, but the processes' timing is not: a seed finds
// the same kind of trouble, not the same interleaving. The default suite
// runs two seeds of 10 s of chaos each (about 30 s in all). More, through
// environment variables:
//
//	WEFT_CHAOS_SEEDS=40 go test ./e2e -run TestChaos -timeout 60m   # seeds 1..40
//	WEFT_CHAOS_SEED=17 go test ./e2e -run TestChaos -v               # only seed 17
//	WEFT_CHAOS_DURATION=1m                                           # chaos phase per seed
//	WEFT_CHAOS_LOGS=/tmp/chaos                                       # keep each runner's debug log and the schedule, per seed
//
// A failure names its seed.
func TestChaos(t *testing.T) {
	seeds := []uint64{1, 2}
	if n, err := strconv.Atoi(os.Getenv("WEFT_CHAOS_SEEDS")); err == nil && n > 0 {
		seeds = nil
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	if s, err := strconv.ParseUint(os.Getenv("WEFT_CHAOS_SEED"), 10, 64); err == nil {
		seeds = []uint64{s}
	}
	dur := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("WEFT_CHAOS_DURATION")); err == nil {
		dur = d
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) { runChaos(t, seed, dur) })
	}
}

// slack is how far before a takeover its previous runner must have been
// seen down (killed, paused, draining, exited) for the takeover to be
// legitimate: the lease, the judging grace after a reconnection (lease/4
// + reconnect wait and jitter) and a margin for a loaded machine.
var slack = lease + lease/4 + 2100*time.Millisecond + 2*time.Second

// startMargin is how long after its attempt was recorded lost (or its run
// cancelled) a body start still counts as racing the record (the worker
// checked the attempt just before).
const startMargin = 500 * time.Millisecond

type chaosEnv struct {
	t     *testing.T
	e     *env
	rng   *rand.Rand
	seed  uint64
	slots []*slot // three runners, then two standalone workers
	gen   int
	runs  []string
	saved *natstest.DeliveryState

	runnerEnv []string
	schedule  *os.File // WEFT_CHAOS_LOGS: one line per operation

	mu       sync.Mutex
	down     map[string][]interval // runner id → when it was not (known) alive
	lapses   map[string][]interval // runner id → when its heartbeat had lapsed (watchBeats)
	lastUp   time.Time             // when the server came up last
	problems []string
	ops      map[string]int
	refused  map[string]time.Time // stream → when it accepts writes again
}

type slot struct {
	worker    bool // a standalone worker process, not a runner
	id        string
	p         *proc
	state     string // alive, paused, draining, dead
	respawnAt time.Time
}

type interval struct{ from, to time.Time } // to zero: still down

// note writes one line of the schedule (with WEFT_CHAOS_LOGS).
func (c *chaosEnv) note(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.schedule != nil {
		fmt.Fprintf(c.schedule, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

func (c *chaosEnv) problem(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func (c *chaosEnv) markDown(id string, from time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down[id] = append(c.down[id], interval{from: from})
}

func (c *chaosEnv) markUp(id string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if iv := c.down[id]; len(iv) > 0 && iv[len(iv)-1].to.IsZero() {
		iv[len(iv)-1].to = at
	}
}

// wasDown reports whether runner id was down at some time in [from, to]:
// killed, paused, draining or exited, or its heartbeat had lapsed.
func (c *chaosEnv) wasDown(id string, from, to time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, iv := range slices.Concat(c.down[id], c.lapses[id]) {
		end := iv.to
		if end.IsZero() {
			end = to
		}
		if !iv.from.After(to) && !end.Before(from) {
			return true
		}
	}
	return false
}

func runChaos(t *testing.T, seed uint64, dur time.Duration) {
	c := &chaosEnv{t: t, e: newEnv(t), rng: rand.New(rand.NewPCG(seed, 0x07)), seed: seed, down: map[string][]interval{}, lapses: map[string][]interval{},
		ops: map[string]int{}, refused: map[string]time.Time{}, lastUp: time.Now()}
	c.runnerEnv = []string{"WEFT_E2E_CHAOS=1", "WEFT_E2E_DRAIN=3s", "WEFT_E2E_QUIET=1", "WEFT_E2E_RECONNECT_WAIT=500ms"}
	if dir := os.Getenv("WEFT_CHAOS_LOGS"); dir != "" {
		c.e.logDir = filepath.Join(dir, fmt.Sprint("seed-", seed))
		if err := os.MkdirAll(c.e.logDir, 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(c.e.logDir, "schedule"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Close() })
		c.schedule = f
		c.runnerEnv = append(c.runnerEnv, "WEFT_E2E_LOG_LEVEL=debug")
		t.Logf("seed %d: runner logs and the schedule in %s", seed, c.e.logDir)
	}
	for i := range 5 {
		c.slots = append(c.slots, &slot{state: "dead", worker: i >= 3})
		c.spawn(i)
	}
	beats, stopBeats := context.WithCancel(context.Background())
	beatsDone := make(chan struct{})
	go func() { defer close(beatsDone); c.watchBeats(beats) }()
	defer func() { stopBeats(); <-beatsDone }()
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		c.respawnDue()
		c.restoreDue(false)
		c.step()
		time.Sleep(time.Duration(20+c.rng.IntN(180)) * time.Millisecond)
	}
	c.restoreDue(true)
	c.quiesce()
	c.answerEveryone()
	n := c.check()
	t.Logf("seed %d: operations %v; %d runs, %d body starts, %d recoveries", seed, c.ops, len(c.runs), n.starts, n.recoveries)
	p := c.precision() // chaos_precision_test.go
	t.Logf("seed %d: precision: %s", seed, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.problems {
		if i == 30 {
			t.Errorf("seed %d: … %d more", seed, len(c.problems)-i)
			break
		}
		t.Errorf("seed %d: %s", seed, p)
	}
}

// watchBeats records when a live runner's heartbeat lapsed: its liveness
// key showed no new revision for more than a lease (counted, after a
// server restart, from when peers may judge again: the server's return
// plus the judging grace). A runner whose heartbeat lapsed may be taken
// over — slow is not distinguishable from gone — and a loaded machine
// starves processes for seconds; what must never happen is a takeover of
// a runner that was heartbeating all along.
func (c *chaosEnv) watchBeats(ctx context.Context) {
	nc := c.e.srv.Connect(nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	js, err := jetstream.New(nc)
	if err != nil {
		c.problem("watch heartbeats: %v", err)
		return
	}
	grace := lease + lease/4 + 600*time.Millisecond // the runners' judging grace (reconnect wait 500 ms + jitter)
	type beat struct {
		rev    uint64
		at     time.Time
		lapsed bool
	}
	beats := map[string]*beat{}
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		kv, err := js.KeyValue(ctx, runner.RunnersBucket)
		if err != nil {
			continue // cannot tell
		}
		c.mu.Lock()
		var ids []string
		for _, s := range c.slots {
			if !s.worker && s.p != nil && s.state != "dead" {
				ids = append(ids, s.id)
			}
		}
		lastUp := c.lastUp
		c.mu.Unlock()
		for _, id := range ids {
			var rev uint64
			e, err := kv.Get(ctx, id)
			switch {
			case err == nil:
				rev = e.Revision()
			case !errors.Is(err, jetstream.ErrKeyNotFound):
				continue // cannot tell
			}
			now := time.Now()
			b := beats[id]
			if b == nil {
				b = &beat{rev: rev, at: now}
				beats[id] = b
			}
			if rev != 0 && rev != b.rev {
				b.rev, b.at = rev, now
				if b.lapsed {
					b.lapsed = false
					c.mu.Lock()
					iv := c.lapses[id]
					iv[len(iv)-1].to = now
					c.mu.Unlock()
					c.note("heartbeat of %s back", id)
				}
				continue
			}
			if from := maxTime(b.at.Add(lease), lastUp.Add(grace)); !b.lapsed && now.After(from) {
				b.lapsed = true
				c.mu.Lock()
				c.lapses[id] = append(c.lapses[id], interval{from: from})
				c.mu.Unlock()
				c.note("heartbeat of %s lapsed since %s", id, from.Format("15:04:05.000"))
			}
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// spawn starts a runner (or worker) process in slot i under a new id.
func (c *chaosEnv) spawn(i int) {
	c.gen++
	s := c.slots[i]
	var id string
	var p *proc
	if s.worker {
		id = fmt.Sprintf("w%d-%d", i, c.gen)
		p = c.e.spawnWorker(id, c.runnerEnv...)
		c.note("spawned worker %s", id)
	} else {
		id = fmt.Sprintf("r%d-%d", i, c.gen)
		c.note("spawn %s", id)
		p = c.e.spawnWith(id, c.runnerEnv...)
		c.note("serving %s", id)
	}
	c.mu.Lock()
	s.id, s.p, s.state = id, p, "alive"
	c.mu.Unlock()
	go func() {
		<-p.done
		c.markDown(id, time.Now())
		c.note("exited %s: %v", id, p.cmd.ProcessState)
		c.mu.Lock()
		expected := s.p != p || s.state != "alive"
		c.mu.Unlock()
		if !expected {
			c.problem("process %s exited by itself: %v", id, p.cmd.ProcessState)
		}
	}()
}

// alive lists the slots of live runners (or workers).
func (c *chaosEnv) alive(workers bool) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, s := range c.slots {
		if s.state == "alive" && s.worker == workers {
			out = append(out, i)
		}
	}
	return out
}

func (c *chaosEnv) respawnDue() {
	for i, s := range c.slots {
		c.mu.Lock()
		due := s.state == "dead" && time.Now().After(s.respawnAt)
		c.mu.Unlock()
		if due {
			c.spawn(i)
		}
	}
}

func (c *chaosEnv) setState(s *slot, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.state = state
}

func (c *chaosEnv) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
}

// ops are the operations of the schedule with their weights: about 70 %
// commands, the rest faults — dense enough that most runs meet one, sparse
// enough that bodies run between them (a runner fault takes a lease and
// more to recover from).
var ops = []struct {
	name   string
	weight int
	do     func(c *chaosEnv)
}{
	{"start", 26, (*chaosEnv).start},
	{"approve", 24, func(c *chaosEnv) { c.answer(true) }},
	{"reject", 5, func(c *chaosEnv) { c.answer(false) }},
	{"cancel", 7, (*chaosEnv).cancel},
	{"reconcile", 8, (*chaosEnv).reconcile},
	{"kill", 6, func(c *chaosEnv) { c.kill(false, syscall.SIGKILL) }},
	{"pause", 6, func(c *chaosEnv) { c.pause(false) }},
	{"term", 4, func(c *chaosEnv) { c.kill(false, syscall.SIGTERM) }},
	{"kill-worker", 2, func(c *chaosEnv) { c.kill(true, syscall.SIGKILL) }},
	{"pause-worker", 2, func(c *chaosEnv) { c.pause(true) }},
	{"term-worker", 1, func(c *chaosEnv) { c.kill(true, syscall.SIGTERM) }},
	{"restart", 2, func(c *chaosEnv) { c.restartServer(false) }},
	{"crash", 2, func(c *chaosEnv) { c.restartServer(true) }},
	{"refuse-log", 3, func(c *chaosEnv) { c.refuse(provision.EventsStream) }},
	{"refuse-drivers", 2, func(c *chaosEnv) { c.refuse("KV_" + runner.DriversBucket) }},
	{"save", 3, (*chaosEnv).save},
}

// step performs one random operation.
func (c *chaosEnv) step() {
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	x := c.rng.IntN(total)
	for _, o := range ops {
		if x < o.weight {
			c.ops[o.name]++
			o.do(c)
			return
		}
		x -= o.weight
	}
}

// save keeps the consumers' delivery state for a later crash restart
// (which rolls them back to it).
func (c *chaosEnv) save() {
	if c.saved == nil || c.rng.IntN(2) == 0 {
		st := c.e.srv.SaveDeliveryState()
		c.saved = &st
		c.note("saved the delivery state")
	}
}

func (c *chaosEnv) start() {
	run := fmt.Sprintf("c%d-%d", c.seed, len(c.runs))
	// One or two tool turns of one to three calls; bodies of up to 1.5 s
	// (fetch, timeout 1.2 s) and 2 s (pay, timeout 1.5 s) so that some
	// time out; model calls of up to 300 ms (version 1's time out after
	// 250 ms).
	in := chaosInput{ModelMS: int64(c.rng.IntN(300)), Turns: make([][]chaosCall, 1+c.rng.IntN(10)/7)}
	for t := range in.Turns {
		for range 1 + c.rng.IntN(3) {
			cl := chaosCall{Tool: "fetch", Args: chaosIn{MS: int64(c.rng.IntN(1500))}}
			if c.rng.IntN(2) == 0 {
				cl = chaosCall{Tool: "pay", Args: chaosIn{MS: int64(c.rng.IntN(2000)), Amount: []int64{50, 500}[c.rng.IntN(2)]}}
			}
			in.Turns[t] = append(in.Turns[t], cl)
		}
	}
	version := []string{"1", "2"}[c.rng.IntN(2)]
	ctx, cancel := c.ctx()
	defer cancel()
	_, err := c.e.client.Start(ctx, api.StartRequest{CommandID: run, Run: run, Agent: "chaos", Version: version, Input: in.String()})
	c.note("start %s v%s %s: %v", run, version, in, err)
	// A new run id of a served agent: no definite refusal is right.
	switch code := weft.ErrorCode(err); code {
	case weft.CodeAlreadyStarted, weft.CodeUnknownAgent, weft.CodeInvalidRequest, weft.CodeInvalidName:
		c.problem("%s: start refused %s (%v), but the run id is new and chaos v%s is served", run, code, err, version)
	}
	c.runs = append(c.runs, run)
}

// pick returns a random started run whose state satisfies ok (up to 4
// tries), with its state.
func (c *chaosEnv) pick(ok func(aggregate.State) bool) (string, aggregate.State, bool) {
	if len(c.runs) == 0 {
		return "", aggregate.State{}, false
	}
	for range 4 {
		run := c.runs[c.rng.IntN(len(c.runs))]
		s, err := c.load(run)
		if err == nil && s.Exists() && ok(s) {
			return run, s, true
		}
	}
	return "", aggregate.State{}, false
}

func (c *chaosEnv) load(run string) (aggregate.State, error) {
	envs, _, err := c.e.srv.Log.Load(context.Background(), run)
	if err != nil {
		return aggregate.State{}, err
	}
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			return aggregate.State{}, err
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return aggregate.Fold(recs), nil
}

func pendingRequest(s aggregate.State) (aggregate.Action, bool) {
	for _, a := range s.Actions() {
		if a.State == aggregate.ActionAwaitingApproval && a.Request.Pending() {
			return a, true
		}
	}
	return aggregate.Action{}, false
}

func stillPending(s aggregate.State, action string, revision int) bool {
	a, ok := s.Action(action)
	return ok && a.State == aggregate.ActionAwaitingApproval && a.Request.Revision == revision && a.Request.Pending()
}

func live(s aggregate.State) bool {
	_, fin := s.Finished()
	return s.Exists() && !fin && !s.Cancelling()
}

// answer approves (or rejects) a pending request and checks that a
// definite refusal is not contradicted by the log.
func (c *chaosEnv) answer(approve bool) {
	run, s1, ok := c.pick(func(s aggregate.State) bool { _, ok := pendingRequest(s); return ok })
	if !ok {
		return
	}
	a, _ := pendingRequest(s1)
	ctx, cancel := c.ctx()
	defer cancel()
	id := fmt.Sprintf("%s/%s/%d/%v/%d", run, a.ID, a.Request.Revision, approve, c.rng.Int())
	var err error
	if approve {
		_, err = c.e.client.Approve(ctx, api.ApproveRequest{CommandID: id, Run: run, Action: a.ID, Revision: a.Request.Revision, Approver: "desk", Credential: "chaos"})
	} else {
		_, err = c.e.client.Reject(ctx, api.RejectRequest{CommandID: id, Run: run, Action: a.ID, Revision: a.Request.Revision, Approver: "desk", Credential: "chaos", Reason: "chaos"})
	}
	c.note("%s %s %s revision %d: %v", map[bool]string{true: "approve", false: "reject"}[approve], run, a.ID, a.Request.Revision, err)
	c.notTheCallersFault(map[bool]string{true: "approve", false: "reject"}[approve], run, err)
	switch code := weft.ErrorCode(err); code {
	case weft.CodeWrongReference, weft.CodeStaleReference, weft.CodeAlreadyAnswered, weft.CodeApprovalExpired:
		if s2, lerr := c.load(run); lerr == nil && stillPending(s2, a.ID, a.Request.Revision) {
			c.problem("%s: %s of %s revision %d refused %s (%v), but the request was pending before and after", run, map[bool]string{true: "approve", false: "reject"}[approve], a.ID, a.Request.Revision, code, err)
		}
	case weft.CodeRunEnded:
		if s2, lerr := c.load(run); lerr == nil && live(s1) && live(s2) {
			c.problem("%s: answer refused run_ended (%v), but the run was live before and after", run, err)
		}
	}
}

func (c *chaosEnv) cancel() {
	run, s1, ok := c.pick(live)
	if !ok {
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	_, err := c.e.client.Cancel(ctx, api.CancelRequest{CommandID: fmt.Sprint(run, "/cancel/", c.rng.Int()), Run: run, By: "chaos"})
	c.note("cancel %s: %v", run, err)
	c.notTheCallersFault("cancel", run, err)
	if weft.ErrorCode(err) == weft.CodeRunEnded {
		if s2, lerr := c.load(run); lerr == nil && live(s1) && live(s2) {
			c.problem("%s: cancel refused run_ended (%v), but the run was live before and after", run, err)
		}
	}
}

func (c *chaosEnv) reconcile() {
	run, s, ok := c.pick(func(s aggregate.State) bool { return len(aggregate.Status(s).Uncertain) > 0 })
	if !ok {
		return
	}
	a := aggregate.Status(s).Uncertain[0]
	_, fin := s.Finished()
	ctx, cancel := c.ctx()
	defer cancel()
	req := api.ReconcileRequest{CommandID: fmt.Sprint(run, "/rc/", a, "/", c.rng.Int()), Run: run, Action: a, Content: []byte(`{"done":"by hand"}`), By: "chaos"}
	var err error
	if fin {
		_, err = c.e.client.ReconcileStored(ctx, req)
	} else {
		_, err = c.e.client.Reconcile(ctx, req)
	}
	c.note("reconcile %s %s (finished %v): %v", run, a, fin, err)
	c.notTheCallersFault("reconcile", run, err)
	code := weft.ErrorCode(err)
	switch code {
	case weft.CodeNotReconcilable, weft.CodeAlreadyRecorded, weft.CodeWrongReference, weft.CodeRunEnded, weft.CodeRunActive:
	default:
		return
	}
	s2, lerr := c.load(run)
	if lerr != nil {
		return
	}
	_, fin2 := s2.Finished()
	uncertain := func(s aggregate.State) bool {
		act, ok := s.Action(a)
		return ok && act.State == aggregate.ActionUncertain
	}
	switch {
	case (code == weft.CodeRunEnded && !fin && !fin2) || (code == weft.CodeRunActive && fin && fin2):
		c.problem("%s: reconcile of %s refused %s (%v), but the run was %s before and after", run, a, code, err, map[bool]string{true: "finished", false: "live"}[fin])
	case code != weft.CodeRunEnded && code != weft.CodeRunActive && uncertain(s) && uncertain(s2):
		c.problem("%s: reconcile of %s refused %s (%v), but the action was uncertain before and after", run, a, code, err)
	}
}

// kill sends sig to a random live runner, keeping at least one alive
// (or to a random live worker: the runners' in-process workers serve too).
func (c *chaosEnv) kill(workers bool, sig syscall.Signal) {
	al := c.alive(workers)
	if len(al) < 2 && !(workers && len(al) == 1) {
		return
	}
	s := c.slots[al[c.rng.IntN(len(al))]]
	now := time.Now()
	c.markDown(s.id, now)
	if sig == syscall.SIGKILL {
		c.setState(s, "dead")
	} else {
		c.setState(s, "draining")
	}
	_ = s.p.cmd.Process.Signal(sig)
	c.note("%v %s", sig, s.id)
	c.mu.Lock()
	s.respawnAt = now.Add(time.Duration(300+c.rng.IntN(1500)) * time.Millisecond)
	c.mu.Unlock()
	if sig == syscall.SIGTERM {
		p := s.p
		go func() {
			<-p.done
			c.mu.Lock()
			if s.p == p {
				s.state = "dead"
			}
			c.mu.Unlock()
		}()
	}
}

// pause stops a random live runner or worker (SIGSTOP) and continues it
// later.
func (c *chaosEnv) pause(workers bool) {
	al := c.alive(workers)
	if len(al) < 2 && !(workers && len(al) == 1) {
		return
	}
	s := c.slots[al[c.rng.IntN(len(al))]]
	c.markDown(s.id, time.Now())
	c.setState(s, "paused")
	_ = s.p.cmd.Process.Signal(syscall.SIGSTOP)
	d := time.Duration(300+c.rng.IntN(2700)) * time.Millisecond
	p, id := s.p, s.id
	c.note("SIGSTOP %s for %s", id, d)
	time.AfterFunc(d, func() {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		c.note("SIGCONT %s", id)
		c.markUp(id, time.Now())
		c.mu.Lock()
		if s.p == p && s.state == "paused" {
			s.state = "alive"
		}
		c.mu.Unlock()
	})
}

// refuse makes stream refuse every new message (full, discard new) for a
// while: a store that fails appends or KV puts (restoreDue ends it; a
// server restart provisions the declared configuration again).
func (c *chaosEnv) refuse(stream string) {
	if _, on := c.refused[stream]; on {
		return
	}
	ctx, cancel := c.ctx()
	defer cancel()
	st, err := c.e.srv.JS.Stream(ctx, stream)
	if err != nil {
		return
	}
	info, err := st.Info(ctx)
	if err != nil {
		return
	}
	cfg := info.Config
	cfg.MaxMsgs, cfg.Discard = int64(max(info.State.Msgs, 1)), jetstream.DiscardNew
	if _, err := c.e.srv.JS.UpdateStream(ctx, cfg); err != nil {
		return
	}
	c.refused[stream] = time.Now().Add(time.Duration(200+c.rng.IntN(1000)) * time.Millisecond)
	c.note("refuse %s until %s", stream, c.refused[stream].Format("15:04:05.000"))
}

// restoreDue gives the refusing streams their declared configuration
// back when their time is up (all of them with now).
func (c *chaosEnv) restoreDue(now bool) {
	for stream, at := range c.refused {
		if !now && time.Now().Before(at) {
			continue
		}
		ctx, cancel := c.ctx()
		cfg := provision.EventsConfig()
		if stream != provision.EventsStream {
			if st, err := c.e.srv.JS.Stream(ctx, stream); err == nil {
				cfg = st.CachedInfo().Config
				cfg.MaxMsgs, cfg.Discard = -1, jetstream.DiscardOld
			}
		}
		if _, err := c.e.srv.JS.UpdateStream(ctx, cfg); err == nil {
			delete(c.refused, stream)
			c.note("restored %s", stream)
		}
		cancel()
	}
}

func (c *chaosEnv) restartServer(crash bool) {
	c.note("server restart (crash %v)", crash && c.saved != nil)
	defer c.note("server up")
	if crash && c.saved != nil {
		c.e.srv.CrashRestart(*c.saved)
		c.saved = nil
	} else {
		c.e.srv.Restart()
	}
	c.mu.Lock()
	c.lastUp = time.Now()
	c.mu.Unlock()
	c.e.client = api.NewClient(c.e.srv.Conn)
	c.refused = map[string]time.Time{} // provisioned again as declared
}

// quiesce stops the chaos: paused runners continue, at least two runners
// serve, and every run must settle (finished, or suspended waiting for a
// person) within a deadline.
func (c *chaosEnv) quiesce() {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c.mu.Lock()
		busy := false
		for _, s := range c.slots {
			if s.state == "paused" || s.state == "draining" {
				busy = true
			}
		}
		c.mu.Unlock()
		if !busy || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, s := range c.slots {
		c.mu.Lock()
		dead := s.state == "dead"
		c.mu.Unlock()
		if dead {
			c.spawn(i)
		}
	}
	deadline = time.Now().Add(45 * time.Second)
	for {
		var unsettled []string
		for _, run := range c.runs {
			s, err := c.load(run)
			if err != nil {
				unsettled = append(unsettled, run+": "+err.Error())
				continue
			}
			if !s.Exists() {
				continue // its start was never applied
			}
			switch st := aggregate.Status(s); st.Kind {
			case aggregate.StatusFinished, aggregate.StatusSuspended:
			default:
				unsettled = append(unsettled, fmt.Sprintf("%s: %s (runner %s, actions %s)", run, st.Kind, s.Runner(), describeActions(s)))
			}
		}
		if len(unsettled) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, u := range unsettled {
				c.problem("run never settled (finished or waiting for a person): %s", u)
			}
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func describeActions(s aggregate.State) string {
	var b strings.Builder
	for _, a := range s.Actions() {
		fmt.Fprintf(&b, "%s=%s/%d ", a.ID, a.State, a.Attempts)
	}
	return b.String()
}

// start is one ledger line: a real body start.
type start struct {
	at      time.Time
	run     string
	action  string
	attempt int
	tool    string
	version string
}

func (c *chaosEnv) ledger() []start {
	f, err := os.Open(c.e.ledger)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []start
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 7 {
			continue
		}
		ns, _ := strconv.ParseInt(fs[0], 10, 64)
		attempt, _ := strconv.Atoi(fs[3])
		out = append(out, start{at: time.Unix(0, ns), run: fs[1], action: fs[2], attempt: attempt, tool: fs[4], version: fs[5]})
	}
	return out
}

// counts are what a seed did, for its log line.
type counts struct{ starts, recoveries int }

// check runs the invariants on the settled log, the ledger and the
// schedule.
func (c *chaosEnv) check() (n counts) {
	type key struct {
		run, action string
		attempt     int
	}
	starts := map[key][]start{}
	byRun := map[string][]start{}
	for _, s := range c.ledger() {
		n.starts++
		k := key{s.run, s.action, s.attempt}
		starts[k] = append(starts[k], s)
		byRun[s.run] = append(byRun[s.run], s)
	}
	for k, ss := range starts {
		if len(ss) > 1 {
			c.problem("%s %s: the body of attempt %d started %d times", k.run, k.action, k.attempt, len(ss))
		}
	}
	for _, run := range c.runs {
		envs, _, err := c.e.srv.Log.Load(context.Background(), run)
		if err != nil {
			c.problem("%s: load: %v", run, err)
			continue
		}
		if len(envs) == 0 {
			continue
		}
		s, _ := c.load(run)
		version := s.Started().Agent.Version
		for _, st := range byRun[run] {
			if st.version != version {
				c.problem("%s %s attempt %d: the body of chaos v%s ran for a run of v%s", run, st.action, st.attempt, st.version, version)
			}
		}
		payAttempts := map[string]map[int]bool{}
		for _, st := range byRun[run] {
			if st.tool == "pay" {
				if payAttempts[st.action] == nil {
					payAttempts[st.action] = map[int]bool{}
				}
				payAttempts[st.action][st.attempt] = true
			}
		}
		for action, as := range payAttempts {
			if len(as) > 1 {
				c.problem("%s %s: the non-replayable pay body ran in %d attempts", run, action, len(as))
			}
		}
		for _, a := range s.Actions() {
			for _, st := range byRun[run] {
				if st.action == a.ID && slices.Contains(a.Closed, st.attempt) {
					c.problem("%s %s: attempt %d started a body after its claim was closed (attempt_closed)", run, a.ID, st.attempt)
				}
			}
			if a.Tool == "pay" && a.Attempts-len(a.Closed) > 1 { // closed attempts did not act
				c.problem("%s %s: the non-replayable pay action has %d attempts", run, a.ID, a.Attempts)
			}
			if a.Attempts > len(a.Closed) && slices.Contains([]aggregate.ActionState{aggregate.ActionNotStarted, aggregate.ActionRejected, aggregate.ActionDenied}, a.State) {
				c.problem("%s %s: an action with %d fenced attempts ended %s (%s): it may have acted", run, a.ID, a.Attempts, a.State, a.Detail)
			}
		}
		fences := map[key]events.AttemptFenced{}
		for _, env := range envs {
			ev, err := env.Event()
			if err != nil {
				break
			}
			switch e := ev.(type) {
			case events.AttemptFenced:
				fences[key{run, e.Action, e.Attempt}] = e
			case events.AttemptReported:
				k := key{run, e.Action, e.Attempt}
				if e.Outcome == events.OutcomeOutput && len(starts[k]) == 0 {
					c.problem("%s %s: attempt %d reported an output (%s) but its body never started", run, e.Action, e.Attempt, e.Content)
				}
				if e.Outcome == events.OutcomeOutput && len(starts[k]) > 0 {
					want := fmt.Sprintf(`{"done":"%s v%s attempt %d"}`, starts[k][0].tool, version, e.Attempt)
					if string(e.Content) != want {
						c.problem("%s %s: attempt %d recorded the output %s, want %s", run, e.Action, e.Attempt, e.Content, want)
					}
				}
			}
		}
		for _, st := range byRun[run] {
			f, ok := fences[key{run, st.action, st.attempt}]
			switch {
			case !ok:
				c.problem("%s %s: the body of attempt %d started at %s, but the log has no fence of that attempt", run, st.action, st.attempt, st.at.Format("15:04:05.000"))
			case f.Deadline != nil && st.at.After(f.Deadline.Add(startMargin)):
				c.problem("%s %s: the body of attempt %d started at %s, after its deadline %s", run, st.action, st.attempt, st.at.Format("15:04:05.000"), f.Deadline.Format("15:04:05.000"))
			}
		}
		var handedOffRecovery bool
		for _, env := range envs {
			ev, err := env.Event()
			if err != nil {
				c.problem("%s: event %d: %v", run, env.Version, err)
				break
			}
			switch e := ev.(type) {
			case events.RunRecovered:
				n.recoveries++
				handedOffRecovery = e.Cause == events.RecoveredHandedOff
				// A runner resuming a run it handed off itself (a partition
				// it released, then claimed again) drove it no more: cause
				// handed_off. Any other recovery from itself took over a
				// run it drove (docs/semantics.md §8).
				if e.Previous == e.Runner && e.Cause != events.RecoveredHandedOff {
					c.problem("%s: runner %s recovered the run from itself (incarnation %d, cause %s)", run, e.Runner, e.Incarnation, e.Cause)
				}
				if e.Cause == events.RecoveredRunnerLost && !c.wasDown(e.Previous, env.Recorded.Add(-slack), env.Recorded) {
					c.problem("%s: %s took the run over from %s at %s, which was alive all along (not killed, paused, draining or without heartbeat since %s)", run, e.Runner, e.Previous, env.Recorded.Format("15:04:05.000"), env.Recorded.Add(-slack).Format("15:04:05.000"))
				}
				continue
			case events.AttemptLost:
				for _, st := range starts[key{run, e.Action, e.Attempt}] {
					if st.at.After(env.Recorded.Add(startMargin)) {
						c.problem("%s %s: the body of attempt %d started at %s, after the attempt was recorded lost at %s", run, e.Action, e.Attempt, st.at.Format("15:04:05.000"), env.Recorded.Format("15:04:05.000"))
					}
				}
				continue // part of a recovery's own events
			case events.ActionUncertain:
				continue
			case events.CancelRequested:
				for _, st := range byRun[run] {
					if st.at.After(env.Recorded.Add(startMargin)) {
						c.problem("%s %s: the body of attempt %d started at %s, after the run was cancelled at %s", run, st.action, st.attempt, st.at.Format("15:04:05.000"), env.Recorded.Format("15:04:05.000"))
					}
				}
			case events.ApprovalRequested:
				if handedOffRecovery && e.Why == events.AskRecovery {
					c.problem("%s %s: a graceful hand-off re-asked an approval (revision %d)", run, e.Action, e.Revision)
				}
				continue
			}
			handedOffRecovery = false
		}
	}
	return n
}
