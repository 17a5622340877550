package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// passCounter counts a runner's rounds of rebalancing (hook
// "partition-pass") and notes the runners its view saw leave (hook
// "runners-changed").
type passCounter struct {
	passes atomic.Int64
	mu     sync.Mutex
	left   map[string]int64 // runner id → passes counted when the view saw it leave
	check  func(n int64)    // called at the end of every pass with its number
}

func (c *passCounter) hook(event string, _ int, key string) {
	switch event {
	case "partition-pass":
		n := c.passes.Add(1)
		c.mu.Lock()
		check := c.check
		c.mu.Unlock()
		if check != nil {
			check(n)
		}
	case "runners-changed":
		c.mu.Lock()
		if c.left == nil {
			c.left = map[string]int64{}
		}
		if _, ok := c.left[key]; !ok {
			c.left[key] = c.passes.Load()
		}
		c.mu.Unlock()
	}
}

func (c *passCounter) leftAt(id string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.left[id]
	return n, ok
}

// waitPasses waits until n more passes than now were made.
func (c *passCounter) waitPasses(t *testing.T, n int64) {
	t.Helper()
	target := c.passes.Load() + n
	until(t, fmt.Sprintf("%d partition passes", n), func() bool { return c.passes.Load() >= target })
}

// ghostBeat is the liveness value of a stand-in runner that takes part in
// the partitions (the deployment's number of them).
func ghostBeat() []byte {
	b, _ := json.Marshal(map[string]any{"schema": 1, "at": time.Now().UTC().Format(time.RFC3339Nano), "partitions": runner.DefaultPartitions})
	return b
}

// beatAs puts id's liveness key every lease/8 until the returned stop is
// called (a stand-in runner's heartbeat, as runners beat).
func beatAs(t *testing.T, live jetstream.KeyValue, id string, lease time.Duration) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if _, err := live.Put(ctx, id, ghostBeat()); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(lease / 8):
			}
			_, _ = live.Put(ctx, id, ghostBeat())
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// ownsAll reports whether r owns every partition.
func ownsAll(r *runner.Runner) bool { return len(r.Stats().Partitions) == runner.DefaultPartitions }

// docs/semantics.md §8 "only a runner that is gone is recovered from", and the
// availability budget (docs/reliability.md): a peer that stops beating
// (SIGKILLed) is seen to leave by the runners view when the server expires
// its key — the bucket's marker of a key that reached its max age, a
// change the watcher delivers — and its partitions are claimed on that
// change: by the end of the second round of rebalancing after it (one may
// have begun before it), not a lease and a tick of the partition loop
// later as when the view aged the key by its own clock alone.
func TestSemantics8_ASurvivorClaimsAGonePeersPartitionsOnTheViewChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// On the wall clock, not a fake ownership clock: the stand-in leaves
	// when the server expires its key (the bucket's max age, the server's
	// time), and the judgement maps the marker's time onto this runner's
	// clock as an interval, which a clock stepped ahead of the server's
	// would distort.
	pc := &passCounter{}
	b := &bodies{}
	r, _ := h.startRunner([]*agent.Agent{build(t, payThenAnswer(50), []tools.Tool{b.tool()}, policy.Func(allow))}, runner.WithHook(pc.hook))
	// The stand-in joins: r releases the partitions assigned to it, which
	// it then claims (as a runner would) while it beats.
	const lease = 2 * time.Second // the harness's bucket max age
	stopGhost := beatAs(t, live, "ghost", lease)
	var ghosts []int
	for p := range runner.DefaultPartitions {
		if partition.Owner(p, []string{"ghost", r.ID()}) == "ghost" {
			ghosts = append(ghosts, p)
		}
	}
	until(t, "r released the stand-in's partitions", func() bool {
		return len(r.Stats().Partitions) == runner.DefaultPartitions-len(ghosts)
	})
	for _, p := range ghosts {
		key := fmt.Sprintf("p.%04d", p)
		if _, err := parts.Create(c, key, []byte("ghost")); err != nil {
			t.Fatalf("the stand-in's claim of %s: %v", key, err)
		}
	}
	pc.waitPasses(t, 4) // r looked at the stand-in's claims, and left them
	if len(r.Stats().Partitions) != runner.DefaultPartitions-len(ghosts) {
		t.Fatalf("r owns %d partitions while the stand-in lives, want %d", len(r.Stats().Partitions), runner.DefaultPartitions-len(ghosts))
	}
	var claimedAt atomic.Int64
	pc.mu.Lock()
	pc.check = func(n int64) {
		if claimedAt.Load() == 0 && ownsAll(r) {
			claimedAt.Store(n)
		}
	}
	pc.mu.Unlock()
	stopGhost()
	var left int64
	until(t, "the runners view saw the stand-in's key expire", func() bool {
		var ok bool
		left, ok = pc.leftAt("ghost")
		return ok
	})
	until(t, "r claimed the gone stand-in's partitions", func() bool { return claimedAt.Load() != 0 })
	if got := claimedAt.Load() - left; got > 2 {
		t.Errorf("the partitions were claimed %d rounds after the view saw the stand-in leave, want within 2 (claimed on that change)", got)
	}
}

// docs/semantics.md §8 "only a runner that is gone is recovered from", at a
// runner's start: a run whose driver never wrote a liveness key (nor
// holds its partitions' keys any more) is judged by the same rule as one
// whose key expired so long ago that the server dropped its marker —
// there is no telling the two apart, and the server drops a marker about
// a lease after the expiry whatever its TTL — gone once this runner has
// watched the bucket for the whole grace (a lease, a heartbeat interval
// and the reconnect wait added for a peer cut off by a server restart),
// never before. The run's partition is then claimed and its running body
// recovered (cause runner_lost). Before, a fresh runner judged a key
// without a marker gone after a lease and a heartbeat interval, and took
// over a peer that might still be reconnecting (docs/scaling.md, "A lost runner is detected by its lease").
func TestSemantics8_AFreshRunnerJudgesADriverThatNeverBeatAsGoneLikeAnExpiredOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true
	c := ctx(t)
	ghostOwnsEveryPartition(t, h)
	b := &bodies{}
	a := build(t, payThenAnswer(50), []tools.Tool{b.tool()}, policy.Func(allow))
	var s aggregate.State
	hd := appendDecided(t, h, "g-run", &s, aggregate.Start{Run: "g-run", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	call := payCall(50, "ok")
	call.ID = "call_1_1"
	hd = appendDecidedAt(t, h, "g-run", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	appendDecidedAt(t, h, "g-run", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}}}})
	drivers, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drivers.Put(c, runner.DriverKey("g-run", runner.DefaultPartitions), []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	const reconnectWait = 3 * time.Second
	// On the fake ownership clock, which reads the same time at the
	// runner's start as at its view's beginning: the grace is stepped
	// through by hand, a round of rebalancing at each step, and checked
	// on both sides of its end — the rule's safety (never before the
	// whole grace, reconnect wait included: a round made at the last
	// step before it ends claimed nothing) and its liveness (claimed
	// within a few rounds after it).
	clk := newOwnClock(t)
	started := clk.Now()
	grace := clk.lease + clk.lease/4 + reconnectWait + nats.DefaultReconnectJitter // a lease, a heartbeat interval, the reconnect wait and jitter
	r, _ := h.startRunnerConn([]nats.Option{nats.ReconnectWait(reconnectWait)}, nil, []*agent.Agent{a}, clk.options(nil)...)
	for clk.Since(started)+clk.lease/4 < grace {
		if !clk.step() {
			t.Logf("a step to %s after the start saw no round, scan or beat in 5 s", clk.Since(started))
		}
	}
	// The check below proves nothing unless a round judged at the last
	// step before the grace ends.
	if last := clk.lastRoundAt(); last.Before(started.Add(grace - clk.lease/4)) {
		t.Fatalf("the last round of rebalancing before the check was %s after the start, want one at %s or later (a heartbeat interval before the grace, %s, ends): the check before the grace would prove nothing",
			last.Sub(started), grace-clk.lease/4, grace)
	}
	if n := len(r.Stats().Partitions); n != 0 {
		t.Fatalf("r owned %d partitions %s after it started, before the whole grace (%s, the reconnect wait %s included) had passed: a peer cut off by a server restart may have been taken over",
			n, clk.Since(started), grace, reconnectWait)
	}
	if rr := h.recoveries("g-run"); len(rr) != 0 {
		t.Fatalf("g-run recovered %+v before the whole grace had passed", rr)
	}
	clk.advanceUntil(t, "r owns every partition once the whole grace passed", 4, func() bool { return ownsAll(r) })
	clk.follow()
	h.waitFor("g-run", "recovered", func(s aggregate.State) bool { return s.Runner() == r.ID() })
	rr := h.recoveries("g-run")
	if len(rr) != 1 || rr[0].Cause != events.RecoveredRunnerLost || rr[0].Previous != "ghost" {
		t.Errorf("recoveries %+v, want one from ghost, cause runner_lost", rr)
	}
	// The run settles before the test ends: a runner stopped while the
	// recovered attempt is recorded running, its task not yet started by
	// the stopped worker, waits out its whole drain window.
	h.waitStatus("g-run", aggregate.StatusFinished)
}

// docs/semantics.md §8 "only a runner that is gone is recovered from": the
// sooner judgement of a fresh runner never takes a key that expired just
// before it started for a gone runner — a server restart may have cut
// its runner off, which comes back within its reconnect wait. With the
// stand-in's key expired (the server's marker) as the runner starts and a
// reconnect wait of an hour, its partitions stay the stand-in's for three
// leases of rounds.
func TestSemantics8_AFreshRunnerWaitsForAPeerWhoseKeyExpiredJustBeforeItStarted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true
	c := ctx(t)
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(c, "config", []byte(fmt.Sprintf(`{"schema":1,"partitions":%d}`, runner.DefaultPartitions))); err != nil {
		t.Fatal(err)
	}
	for p := range runner.DefaultPartitions {
		if _, err := kv.Put(c, fmt.Sprintf("p.%04d", p), []byte("ghost")); err != nil {
			t.Fatal(err)
		}
	}
	stop := beatAs(t, live, "ghost", 2*time.Second)
	stop()
	until(t, "the stand-in's key expired", func() bool {
		_, err := live.Get(c, "ghost")
		return err != nil
	})
	// On the wall clock, not a fake ownership clock: the judgement maps
	// the server's times (the marker's expiry, this runner's own key's
	// put) onto this runner's clock as intervals, which holds only while
	// both run at the same rate; a fake clock stepped ahead of the server
	// makes a key that expired before the view began look expired well
	// inside it (partition.Judge, WhyExpiredWatched), and the stand-in's
	// expiry itself is the bucket's max age, the server's time.
	pc := &passCounter{}
	r, _ := h.startRunnerConn([]nats.Option{nats.ReconnectWait(time.Hour)}, nil, []*agent.Agent{build(t, payThenAnswer(50), nil, policy.Func(allow))}, runner.WithHook(pc.hook))
	pc.waitPasses(t, 12)
	if n := len(r.Stats().Partitions); n != 0 {
		t.Errorf("a fresh runner claimed %d partitions of a runner whose key expired as it started (it may be reconnecting)", n)
	}
}

// gate is a pay tool whose body waits until open is closed.
type gate struct {
	open   chan struct{}
	starts atomic.Int64
}

func (g *gate) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		g.starts.Add(1)
		select {
		case <-g.open:
		case <-ctx.Done():
			return payOut{}, ctx.Err()
		}
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// docs/semantics.md §8 (graceful row; only a runner that is gone is recovered
// from) and the availability budget: a partition whose runner runs a body
// without a deadline (tools.Infinity) is not released to a joining runner
// while it runs — a release would answer every other run of the
// partition runner_busy for as long as the body runs, or make the body
// uncertain though its runner lives. Its runs are served meanwhile (a new
// run of the partition starts at once, not runner_busy); once the body
// ended the partition moves, with nothing uncertain.
func TestSemantics8_AReleaseNeverHoldsAPartitionsRunsHostageToAnInfiniteBody(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true
	const run = "inf-0"
	first, second := moving(run)
	p := partition.Of(run, runner.DefaultPartitions)
	other := ""
	for i := 1; other == ""; i++ {
		if id := fmt.Sprint("inf-", i); partition.Of(id, runner.DefaultPartitions) == p {
			other = id
		}
	}
	g := &gate{open: make(chan struct{})}
	var opened sync.Once
	open := func() { opened.Do(func() { close(g.open) }) }
	t.Cleanup(open)
	mk := func() *agent.Agent {
		return build(t, payThenAnswer(50), []tools.Tool{g.tool()}, policy.Func(allow), agent.WithToolTimeout(tools.Infinity()))
	}
	pc := &passCounter{}
	// Both runners on one fake ownership clock (ownClock): stepped until
	// the first owns every partition, once the second joined until it
	// took its other partitions and for four more rounds of the first
	// (the busy partition stays), and once the body ended until the
	// partition moved; it follows the wall clock while the runs' work
	// goes on.
	clk := newOwnClock(t).as(first)
	clk2 := clk.another().as(second)
	r1, _ := h.startRunner([]*agent.Agent{mk()}, append(clk.options(pc.hook), runner.WithDrainWindow(200*time.Millisecond))...)
	clk.advanceUntil(t, "the first runner owns every partition", 40, func() bool { return ownsAll(r1) })
	clk.follow()
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "its body running", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	r2, _ := h.startRunner([]*agent.Agent{mk()}, append(clk2.options(nil), runner.WithDrainWindow(200*time.Millisecond))...)
	clk.advanceUntil(t, "the joiner took its other partitions", 40, func() bool { return len(r2.Stats().Partitions) > 0 })
	from := pc.passes.Load()
	clk.advanceUntil(t, "4 partition passes", 16, func() bool { return pc.passes.Load() >= from+4 }) // the first runner saw the joiner, and let the busy partition be
	clk.follow()
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: other, Agent: "desk", Input: "x"}); err != nil {
		t.Errorf("a start in the partition of a body without a deadline: %v (want it started at once)", err)
	}
	if s := h.state(run); len(s.Actions()) != 1 || s.Actions()[0].State != aggregate.ActionRunning || s.Runner() != first {
		t.Errorf("the infinite body's run moved while it ran (runner %s)", s.Runner())
	}
	open()
	for _, id := range []string{run, other} {
		s := h.waitStatus(id, aggregate.StatusFinished)
		if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
			t.Errorf("%s ended %s", id, events.DescribeOutcome(out))
		}
		checkGraceful(t, h, id, s)
	}
	clk.advanceUntil(t, "the partition moved once its body ended", 40, func() bool {
		for _, q := range r2.Stats().Partitions {
			if q == p {
				return true
			}
		}
		return false
	})
}

// judgedLog is a slog handler that keeps the reason of every "runner
// judged gone" record, by peer.
type judgedLog struct {
	mu  *sync.Mutex
	why map[string][]string
}

func newJudgedLog() judgedLog { return judgedLog{mu: &sync.Mutex{}, why: map[string][]string{}} }

func (h judgedLog) Enabled(context.Context, slog.Level) bool { return true }
func (h judgedLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "runner judged gone" {
		return nil
	}
	var peer, why string
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "peer":
			peer = a.Value.String()
		case "why":
			why = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.why[peer] = append(h.why[peer], why)
	h.mu.Unlock()
	return nil
}
func (h judgedLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h judgedLog) WithGroup(string) slog.Handler      { return h }

func (h judgedLog) of(peer string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.why[peer])
}

// docs/semantics.md §8 "only a runner that is gone is recovered from", and the
// availability budget (docs/reliability.md) for a survivor that started
// shortly before its peer was SIGKILLed (weft bench's): a peer that beat
// after this runner's first heartbeat — a put the runners view saw at a
// higher revision of the bucket — and whose key then expired (the
// server's marker) stopped beating while this runner's view was
// continuous, so no server restart can have cut it off; it is judged gone
// on the marker, by the bucket's order. Not by the clock rules, which
// need the key to expire a lease and two heartbeat intervals after the
// view began (here it expires a lease and a little after) or the
// reconnect wait (here a minute, past the test's patience). The reason
// logged names the path taken.
func TestSemantics8_AFreshSurvivorJudgesAPeerThatBeatInItsViewOnTheMarker(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	logs := newJudgedLog()
	b := &bodies{}
	// startRunnerConn returns once r's own key exists: its first beat
	// precedes every beat of the stand-in below.
	r, _ := h.startRunnerConn([]nats.Option{nats.ReconnectWait(time.Minute)}, nil,
		[]*agent.Agent{build(t, payThenAnswer(50), []tools.Tool{b.tool()}, policy.Func(allow))},
		runner.WithLogger(slog.New(logs)))
	const lease = 2 * time.Second // the harness's bucket max age
	stopGhost := beatAs(t, live, "ghost", lease)
	var ghosts []int
	for p := range runner.DefaultPartitions {
		if partition.Owner(p, []string{"ghost", r.ID()}) == "ghost" {
			ghosts = append(ghosts, p)
		}
	}
	for _, p := range ghosts {
		key := fmt.Sprintf("p.%04d", p)
		until(t, "r released "+key, func() bool {
			e, err := parts.Get(c, key)
			return errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && e.Operation() != jetstream.KeyValuePut)
		})
		if _, err := parts.Create(c, key, []byte("ghost")); err != nil {
			t.Fatalf("the stand-in's claim of %s: %v", key, err)
		}
	}
	stopGhost()
	until(t, "r judged the stand-in gone", func() bool { return len(logs.of("ghost")) > 0 })
	if why := logs.of("ghost")[0]; why != "liveness key expired after a beat within this runner's view" {
		t.Errorf("r judged the stand-in gone because %q, want on the marker after a beat within its view", why)
	}
	until(t, "r owns every partition", func() bool { return ownsAll(r) })
}

// docs/semantics.md §8 "only a runner that is gone is recovered from": the
// judgement on the bucket's order takes only a key beaten after this
// runner's first heartbeat. A stand-in whose last beat precedes the
// runner's start, and whose key expires (the server's marker) while the
// runner watches, may have been cut off by a server restart just before
// the runner started: with a reconnect wait of an hour, its partitions
// stay the stand-in's for twelve rounds after the view saw its key leave.
func TestSemantics8_AFreshRunnerWaitsForAPeerWhoseLastBeatPrecedesItsView(t *testing.T) {
	t.Parallel()
	// On the wall clock, not a fake ownership clock: the stand-in's key
	// expires by the bucket's max age (the server's time) while the runner
	// watches, and the judgement maps the marker's time onto this runner's
	// clock, which a clock stepped ahead of the server's would distort.
	h := newHarness(t)
	h.unbalanced = true
	c := ctx(t)
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(c, "config", []byte(fmt.Sprintf(`{"schema":1,"partitions":%d}`, runner.DefaultPartitions))); err != nil {
		t.Fatal(err)
	}
	for p := range runner.DefaultPartitions {
		if _, err := kv.Put(c, fmt.Sprintf("p.%04d", p), []byte("ghost")); err != nil {
			t.Fatal(err)
		}
	}
	beatAs(t, live, "ghost", 2*time.Second)() // one beat, before the runner starts
	pc := &passCounter{}
	logs := newJudgedLog()
	r, _ := h.startRunnerConn([]nats.Option{nats.ReconnectWait(time.Hour)}, nil, []*agent.Agent{build(t, payThenAnswer(50), nil, policy.Func(allow))},
		runner.WithHook(pc.hook), runner.WithLogger(slog.New(logs)))
	until(t, "the stand-in's key expired", func() bool {
		_, err := live.Get(c, "ghost")
		return err != nil
	})
	pc.waitPasses(t, 12)
	if n := len(r.Stats().Partitions); n != 0 {
		t.Errorf("a fresh runner claimed %d partitions of a runner whose last beat preceded its view (judged gone: %q)", n, logs.of("ghost"))
	}
}
