package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/partition"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// owners reads weft_partitions: partition → owner.
func (h *harness) owners() map[int]string {
	h.t.Helper()
	kv, err := h.srv.JS.KeyValue(ctx(h.t), runner.PartitionsBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[int]string{}
	for p := range runner.DefaultPartitions {
		if e, err := kv.Get(ctx(h.t), fmt.Sprintf("p.%04d", p)); err == nil {
			out[p] = string(e.Value())
		}
	}
	return out
}

// The number of partitions is fixed per deployment. The
// first runner records it; a runner configured with another number
// refuses to start, naming both; a runner configured with none follows
// the deployment's.
func TestPartitions_AnotherNumberIsRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.partitions = 16
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	first, _ := h.startRunner([]*agent.Agent{a}, runner.WithPartitions(16))
	if got := first.Stats().Partitions; len(got) != 16 {
		t.Fatalf("the first runner owns %v, want all 16 partitions", got)
	}
	nc := h.srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runner.New(nc, js, []*agent.Agent{a}, runner.WithPartitions(32))
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "32") || !strings.Contains(err.Error(), "16") {
		t.Fatalf("a runner configured with 32 partitions in a deployment of 16: Run returned %v, want an error naming both", err)
	}
	follower, _ := h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "p16", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("p16", aggregate.StatusFinished)
	all := append(first.Stats().Partitions, follower.Stats().Partitions...)
	slices.Sort(all)
	if len(all) != 16 || all[15] != 15 {
		t.Fatalf("two runners of a 16-partition deployment own %v", all)
	}
}

// Two runners split the partitions by the assignment
// (partition.Owner over the live runners) and every partition has
// exactly one owner, in weft_partitions and in the runners' own view.
func TestPartitions_TwoRunnersSplitThemAndEachHasOneOwner(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	// Both runners on one fake ownership clock (ownClock), stepped a
	// round of rebalancing at a time until the partitions settled.
	clk := newOwnClock(t)
	clk2 := clk.another()
	h.unbalanced = true // the partitions move on the clock's steps
	r1, _ := h.startRunner([]*agent.Agent{a}, clk.options(nil)...)
	clk.balance(t, r1)
	r2, _ := h.startRunner([]*agent.Agent{a}, clk2.options(nil)...)
	clk.balance(t, r1, r2)
	ids := []string{r1.ID(), r2.ID()}
	kv := h.owners()
	seen := map[int]string{}
	for _, r := range []*runner.Runner{r1, r2} {
		for _, p := range r.Stats().Partitions {
			if other, dup := seen[p]; dup {
				t.Errorf("partition %d owned by %s and %s", p, other, r.ID())
			}
			seen[p] = r.ID()
		}
	}
	for p := range runner.DefaultPartitions {
		want := partition.Owner(p, ids)
		if seen[p] != want || kv[p] != want {
			t.Errorf("partition %d: owned by %q (weft_partitions %q), assigned to %s", p, seen[p], kv[p], want)
		}
	}
	if n1, n2 := len(r1.Stats().Partitions), len(r2.Stats().Partitions); n1 < 16 || n2 < 16 {
		t.Errorf("a lopsided split: %d and %d", n1, n2)
	}
}

// slowBodies is a pay tool whose body takes d, counting its starts per run.
type slowBodies struct {
	d      time.Duration
	mu     sync.Mutex
	starts map[string]int
}

func (b *slowBodies) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		b.mu.Lock()
		b.starts[call.Run]++
		b.mu.Unlock()
		select {
		case <-time.After(b.d):
		case <-ctx.Done():
			return payOut{}, ctx.Err()
		}
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// docs/semantics.md §8, graceful row, for a partition that moves: a third
// runner joins two that drive runs with bodies running; it
// takes about P/3 partitions, which their owners release with a hand-off:
// the bodies in flight there finish within the drain window and are
// recorded, nothing is uncertain, no body starts twice, every run
// completes, and the runs of the moved partitions are recovered with
// cause handed_off.
func TestPartitions_AJoiningRunnerTakesItsShareGracefully(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &slowBodies{d: 400 * time.Millisecond, starts: map[string]int{}}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(50, "ok"))})
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)) }
	// The three runners on one fake ownership clock (ownClock): stepped
	// until the first two split the partitions and, once the third
	// joined, until a release began; it follows the wall clock while the
	// runs' work goes on and the releases wait for the bodies (within the
	// drain window, ownership's time: stepped ahead, it would pass before
	// the bodies end).
	clk := newOwnClock(t)
	clk2, clk3 := clk.another(), clk.another()
	h.unbalanced = true // the partitions move on the clock's steps
	var releases atomic.Int64
	counting := func(event string, _ int, _ string) {
		if event == "release-check" {
			releases.Add(1)
		}
	}
	r1, _ := h.startRunner([]*agent.Agent{mk()}, clk.options(counting)...)
	clk.balance(t, r1)
	r2, _ := h.startRunner([]*agent.Agent{mk()}, clk2.options(counting)...)
	clk.balance(t, r1, r2)
	clk.follow()
	const n = 60
	c := ctx(t)
	for i := range n {
		run := fmt.Sprint("j-", i)
		if err := retrying(c, func() error {
			_, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	before := map[int]string{}
	for _, r := range []*runner.Runner{r1, r2} {
		for _, p := range r.Stats().Partitions {
			before[p] = r.ID()
		}
	}
	r3, _ := h.startRunner([]*agent.Agent{mk()}, clk3.options(nil)...)
	from := releases.Load()
	clk.advanceUntil(t, "a release of a partition assigned to the joiner began", 40, func() bool { return releases.Load() > from })
	clk.follow()
	until(t, "the partitions settled among the three runners", func() bool { return assigned(r1, r2, r3) })
	got := len(r3.Stats().Partitions)
	if got < runner.DefaultPartitions/3/3 || got > 3*runner.DefaultPartitions/3 {
		t.Errorf("the joining runner took %d partitions, want about %d", got, runner.DefaultPartitions/3)
	}
	for _, p := range r3.Stats().Partitions {
		delete(before, p)
	}
	for _, r := range []*runner.Runner{r1, r2} {
		for _, p := range r.Stats().Partitions {
			if before[p] != r.ID() {
				t.Errorf("partition %d moved to %s, not to the joiner", p, r.ID())
			}
		}
	}
	moved := 0
	for i := range n {
		run := fmt.Sprint("j-", i)
		s := h.waitStatus(run, aggregate.StatusFinished)
		if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
			t.Errorf("%s ended %s", run, events.DescribeOutcome(out))
		}
		for _, a := range s.Actions() {
			if a.State != aggregate.ActionSucceeded {
				t.Errorf("%s: action %s ended %s (nothing may be uncertain after a hand-off)", run, a.ID, a.State)
			}
		}
		b.mu.Lock()
		if b.starts[run] != 1 {
			t.Errorf("%s: body started %d times", run, b.starts[run])
		}
		b.mu.Unlock()
		for _, rr := range h.recoveries(run) {
			if rr.Cause != events.RecoveredHandedOff {
				t.Errorf("%s: recovered with cause %s, want handed_off (a graceful move)", run, rr.Cause)
			}
			moved++
		}
	}
	t.Logf("%d of %d runs were handed off to the partitions' new owners", moved, n)
}

// docs/semantics.md §8 (recovery after loss) for partitions: a
// runner ("ghost") that owned every partition stopped heartbeating, with a
// body running on one run and a model call without a reply on another.
// The runner that starts claims the partitions once it can judge the
// ghost gone (never before: "cannot tell" is never "gone") and recovers
// the runs per §8's table: the running body is lost (uncertain, with the
// lost runner's evidence: the tool is not replayable), the model call is
// issued again and the run completes.
func TestPartitions_AGoneRunnersPartitionsAreClaimedAndItsRunsRecovered(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	ghostOwnsEveryPartition(t, h)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { return r.Turn > 1 }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(50, "ok"))})
	b := &bodies{}
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	drivers, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	// g-run: a body running (fenced, no result). g-model: turn 1
	// requested, no reply.
	var s aggregate.State
	hd := appendDecided(t, h, "g-run", &s, aggregate.Start{Run: "g-run", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	call := payCall(50, "ok")
	call.ID = "call_1_1"
	hd = appendDecidedAt(t, h, "g-run", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	appendDecidedAt(t, h, "g-run", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments, Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}}}})
	if act, _ := s.Action("1/call_1_1"); act.State != aggregate.ActionRunning {
		t.Fatalf("crafted history: action %s", act.State)
	}
	var s2 aggregate.State
	appendDecided(t, h, "g-model", &s2, aggregate.Start{Run: "g-model", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	for _, run := range []string{"g-run", "g-model"} {
		if _, err := drivers.Put(c, runner.DriverKey(run, runner.DefaultPartitions), []byte("ghost")); err != nil {
			t.Fatal(err)
		}
	}
	claimAsWorker(t, h, "g-run", "1/call_1_1", 1, 1) // the ghost's body may have run
	// On the fake ownership clock: the judgement's grace (the ghost's key
	// was never written: partition.JudgeGrace) passes by hand, a round of
	// rebalancing and its scan at each step; from the claims on, the
	// clock follows the wall clock while the runs are recovered.
	clk := newOwnClock(t)
	h.unbalanced = true // nothing is claimed before the clock moves
	r, _ := h.startRunner([]*agent.Agent{a}, clk.options(nil)...)
	clk.advanceUntil(t, "the runner claimed every partition of the gone ghost", 40, func() bool { return ownsAll(r) })
	clk.follow()
	fs := h.waitStatus("g-run", aggregate.StatusSuspended) // the uncertain action waits for a person
	if act, _ := fs.Action("1/call_1_1"); act.State != aggregate.ActionUncertain {
		t.Errorf("g-run: the ghost's running body is %s, want uncertain", act.State)
	}
	if out := h.waitStatus("g-model", aggregate.StatusFinished); true {
		if o, _ := out.Finished(); o.Kind != events.OutcomeCompleted {
			t.Errorf("g-model ended %s", events.DescribeOutcome(o))
		}
	}
	for _, run := range []string{"g-run", "g-model"} {
		rr := h.recoveries(run)
		if len(rr) != 1 || rr[0].Cause != events.RecoveredRunnerLost || rr[0].Previous != "ghost" || rr[0].Runner != r.ID() {
			t.Errorf("%s: recoveries %+v, want one from ghost, cause runner_lost", run, rr)
		}
	}
	if b.starts.Load() != 0 {
		t.Errorf("the lost body was started again (%d), though the tool is not replayable", b.starts.Load())
	}
	if own := h.owners(); len(own) != runner.DefaultPartitions {
		t.Errorf("weft_partitions has %d owners", len(own))
	} else {
		for p, o := range own {
			if o != r.ID() {
				t.Errorf("partition %d owned by %s", p, o)
			}
		}
	}
	if st := r.Stats(); st.TakenOver != 2 {
		t.Errorf("Stats.TakenOver = %d, want 2", st.TakenOver)
	}
}

// eventsCount is the number of messages in the event log.
func (h *harness) eventsCount() uint64 {
	h.t.Helper()
	st, err := h.srv.JS.Stream(ctx(h.t), provision.EventsStream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(ctx(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.Msgs
}

// docs/adr/0019-partitions.md (idle runs cost their runner nothing),
// docs/semantics.md §8
// "awaiting approval: unchanged": a runner that drove 2,000 runs waiting
// for an approval drains; the runner that takes its partitions over
// appends nothing for them, starts no goroutine per run and reads none of
// them (Stats.Loaded, Stats.Driven, Stats.TakenOver stay 0, the log holds
// the same messages); yet an approval of one of them completes it, with
// one takeover recorded in the same append as the answer, cause idle: its
// runner drained, nothing was lost.
func TestPartitions_TakingOverIdleRunsCostsNothing(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	const n = 2000
	h := newHarness(t)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	b := &bodies{}
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)) }
	first, stopFirst := h.startRunner([]*agent.Agent{mk()})
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			run := fmt.Sprint("idle-", i)
			if err := retrying(c, func() error {
				_, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
				return err
			}); err != nil {
				t.Errorf("start %s: %v", run, err)
			}
		}()
	}
	wg.Wait()
	for first.Stats().Driven > 0 {
		if c.Err() != nil {
			t.Fatalf("the first runner still holds %d runs", first.Stats().Driven)
		}
		// wall clock: a poll of the idle runs' eviction (idle.go), which follows their suspension, not ownership's time
		time.Sleep(50 * time.Millisecond)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		h.waitStatus(fmt.Sprint("idle-", i), aggregate.StatusSuspended)
	}
	stopFirst()
	msgs := h.eventsCount()
	goroutines := runtime.NumGoroutine()

	passes := make(chan struct{}, 1)
	second, _ := h.startRunner([]*agent.Agent{mk()}, runner.WithHook(func(event string, _ int, _ string) {
		if event == "partition-pass" {
			select {
			case passes <- struct{}{}:
			default:
			}
		}
	}))
	// The partition loop claimed every partition, then scanned what it
	// claimed: a round that ends after the claims is followed by its
	// scan, which ends before the next round does
	// (ownership.Coordinator's partition loop). Counted in rounds, not
	// waited for by the clock.
	until(t, "the second runner owns every partition", func() bool { return ownsAll(second) })
	for range 3 {
		select {
		case <-passes:
		case <-c.Done():
			t.Fatal("the partition loop stopped passing")
		}
	}
	st := second.Stats()
	if len(st.Partitions) != runner.DefaultPartitions || st.Driven != 0 || st.Loaded != 0 || st.TakenOver != 0 {
		t.Errorf("after taking %d partitions of %d idle runs over: %+v, want no run driven, loaded or taken over", len(st.Partitions), n, st)
	}
	if got := h.eventsCount(); got != msgs {
		t.Errorf("the takeover appended %d messages for idle runs", got-msgs)
	}
	// The second runner's own goroutines are not per run: among them one
	// per lane of its command API (api.WithLanes: a subscription each, for
	// each of its endpoints). 200 more would be a goroutine per idle run.
	lanes := 0
	if info, err := h.srv.Conn.Request("$SRV.INFO.weft", nil, 5*time.Second); err == nil {
		var mi micro.Info
		if json.Unmarshal(info.Data, &mi) == nil {
			lanes = len(mi.Endpoints)
		}
	}
	if g := runtime.NumGoroutine(); g > goroutines+lanes+200 {
		t.Errorf("%d goroutines after the takeover, %d before (%d command API lanes): a goroutine per run?", g, goroutines, lanes)
	}
	s := h.state("idle-7")
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if err := retrying(c, func() error {
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: "idle-7", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if o, _ := h.waitStatus("idle-7", aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("idle-7 ended %s", events.DescribeOutcome(o))
	}
	if rr := h.recoveries("idle-7"); len(rr) != 1 || rr[0].Previous != first.ID() || rr[0].Cause != events.RecoveredIdle {
		t.Errorf("idle-7 recoveries %+v, want one, from %s, cause idle (nothing was lost)", rr, first.ID())
	}
	if st := second.Stats(); st.TakenOver != 1 || st.Loaded != 1 {
		t.Errorf("after the approve: %+v, want one run loaded and taken over", st)
	}
	if b.starts.Load() != 1 {
		t.Errorf("bodies started %d times, want 1", b.starts.Load())
	}
}

// A command for a run of another runner's partition is
// forwarded to that runner at once, without reading the run (the
// receiver's Stats.Loaded does not move), and answered by the owner.
func TestPartitions_ACommandIsForwardedToTheOwnerWithoutALogRead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	mk := func() *agent.Agent { return build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove)) }
	// Both runners on one fake ownership clock (ownClock), stepped until
	// the partitions settled; it follows the wall clock while the run's
	// work goes on.
	clk := newOwnClock(t)
	clk2 := clk.another()
	h.unbalanced = true // the partitions move on the clock's steps
	r1, _ := h.startRunner([]*agent.Agent{mk()}, clk.options(nil)...)
	clk.balance(t, r1)
	r2, _ := h.startRunner([]*agent.Agent{mk()}, clk2.options(nil)...)
	clk.balance(t, r1, r2)
	clk.follow()
	// A run of r1's partitions.
	run := ""
	for i := 0; run == ""; i++ {
		id := fmt.Sprint("fw-", i)
		if slices.Contains(r1.Stats().Partitions, partition.Of(id, runner.DefaultPartitions)) {
			run = id
		}
	}
	c := ctx(t)
	// Started through r2: forwarded to r1.
	loaded := r2.Stats().Loaded
	if _, err := r2.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus(run, aggregate.StatusSuspended)
	if s.Runner() != r1.ID() {
		t.Errorf("%s is driven by %s, want the owner of its partition %s", run, s.Runner(), r1.ID())
	}
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	reply, err := r2.Approve(c, api.ApproveRequest{CommandID: "a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Run != run || reply.Status == "" {
		t.Errorf("forwarded reply %+v", reply)
	}
	if got := r2.Stats().Loaded; got != loaded {
		t.Errorf("the receiver read the run %d times before forwarding, want 0", got-loaded)
	}
	h.waitStatus(run, aggregate.StatusFinished)
}

// docs/semantics.md §8 "a live runner never takes over a run it drives itself"
// (chaos seed 2 found it: runner-3-1 recovered a run from itself): a
// runner loses the partition of a run whose body runs in its worker (here
// another runner's claim is written over its key, as when it was judged
// gone while paused) and forgets the run; when the partition comes back
// to it, it drives the run as its own — the log still names it — and the
// body's report completes the run, with no run_recovered at all.
func TestPartitions_ALostPartitionComesBackWithoutASelfTakeover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	gate := make(chan struct{})
	var starts sync.Map
	tool := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		starts.Store(call.Run, true)
		select {
		case <-gate:
		case <-ctx.Done():
			return payOut{}, ctx.Err()
		}
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(50, "ok"))})
	// On the fake ownership clock (ownClock): stepped until the runner
	// owns every partition and until the given-back partition is claimed
	// again (a round of rebalancing); it follows the wall clock while the
	// run's work goes on.
	clk := newOwnClock(t)
	h.unbalanced = true // nothing is claimed before the clock moves
	r, _ := h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{tool}, policy.Func(approvalAbove))}, clk.options(nil)...)
	clk.advanceUntil(t, "the runner owns every partition", 40, func() bool { return ownsAll(r) })
	clk.follow()
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "lp", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("lp", "the body running", func(aggregate.State) bool { _, ok := starts.Load("lp"); return ok })
	p := partition.Of("lp", runner.DefaultPartitions)
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("p.%04d", p)
	if _, err := kv.Put(c, key, []byte("ghost")); err != nil {
		t.Fatal(err)
	}
	// The runner learns of the claim from its watch of weft_partitions,
	// not on ownership's time: a poll.
	for slices.Contains(r.Stats().Partitions, p) || r.Stats().Driven != 0 {
		if c.Err() != nil {
			t.Fatalf("the runner still owns partition %d or holds the run: %+v", p, r.Stats())
		}
		// wall clock: a poll of the runner's table, which its watch of weft_partitions updates (see above)
		time.Sleep(10 * time.Millisecond)
	}
	if err := kv.Delete(c, key); err != nil { // ghost gives it back
		t.Fatal(err)
	}
	clk.advanceUntil(t, fmt.Sprintf("partition %d came back", p), 40, func() bool { return slices.Contains(r.Stats().Partitions, p) })
	clk.follow()
	close(gate)
	s := h.waitStatus("lp", aggregate.StatusFinished)
	if o, _ := s.Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("lp ended %s", events.DescribeOutcome(o))
	}
	if rr := h.recoveries("lp"); len(rr) != 0 {
		t.Errorf("the run was recovered %+v; its runner drove it all along", rr)
	}
}

// docs/adr/0019-partitions.md (a runner's per-tick work follows its own runs):
// the
// partition loop follows weft_runners with one long-lived watcher, not a
// new one (an ordered consumer on KV_weft_runners) every round.
func TestPartitions_OneWatcherOfTheRunnersBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var creates atomic.Int64
	for _, subj := range []string{"$JS.API.CONSUMER.CREATE.KV_" + runner.RunnersBucket, "$JS.API.CONSUMER.CREATE.KV_" + runner.RunnersBucket + ".>"} {
		sub, err := h.srv.Conn.Subscribe(subj, func(*nats.Msg) { creates.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := h.srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	passes := make(chan struct{}, 64)
	hook := func(ev string, _ int, _ string) {
		if ev == "partition-pass" {
			select {
			case passes <- struct{}{}:
			default:
			}
		}
	}
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	h.startRunner([]*agent.Agent{a}, runner.WithHook(hook))
	c := ctx(t)
	for range 2 { // the first rounds, and whatever watch they made
		select {
		case <-passes:
		case <-c.Done():
			t.Fatal("no partition pass")
		}
	}
	base := creates.Load()
	const rounds = 6
	for range rounds {
		select {
		case <-passes:
		case <-c.Done():
			t.Fatal("no partition pass")
		}
	}
	if err := h.srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := creates.Load() - base; got > 0 {
		t.Errorf("%d rounds of rebalancing created %d consumers on KV_%s; want none (one watcher for the runner's life)", rounds, got, runner.RunnersBucket)
	}
}

// TestPartitions_TheDriverIndexRebuildHoldsNoPartitionBack (ownership
// rebalances when runners join, bounded in time; docs/adr/0019-partitions.md):
// the once-per-deployment rebuild of the driver index reads every
// unfinished run of the log back — minutes at a million runs — and a
// runner making it still releases the partitions assigned to a runner
// that joins meanwhile. The 1M-run scale run found the partition loop
// waiting for the rebuild: one runner kept all 64 partitions for minutes
// while two others owned none.
func TestPartitions_TheDriverIndexRebuildHoldsNoPartitionBack(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, model.NewScripted("s", model.Answer("ok")), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	block := make(chan struct{})
	var once sync.Once
	held := make(chan struct{}, 1)
	// Both runners on one fake ownership clock (ownClock), stepped a
	// round of rebalancing at a time until the partitions settled.
	clk := newOwnClock(t)
	clk2 := clk.another()
	h.unbalanced = true // the partitions move on the clock's steps
	r1, _ := h.startRunner([]*agent.Agent{a}, clk.options(func(event string, _ int, _ string) {
		if event == "rebuild" {
			select {
			case held <- struct{}{}:
			default:
			}
			<-block
		}
	})...)
	t.Cleanup(func() { once.Do(func() { close(block) }) }) // before the runners stop
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first runner of the deployment made no rebuild of the driver index")
	}
	clk.advanceUntil(t, "the first runner owns every partition", 40, func() bool { return ownsAll(r1) })
	r2, _ := h.startRunner([]*agent.Agent{a}, clk2.options(nil)...)
	ids := []string{r1.ID(), r2.ID()}
	const steps = 40 // heartbeat intervals of the ownership clock
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		mine := 0
		for _, p := range r2.Stats().Partitions {
			if partition.Owner(p, ids) == r2.ID() {
				mine++
			}
		}
		want := 0
		for p := range runner.DefaultPartitions {
			if partition.Owner(p, ids) == r2.ID() {
				want++
			}
		}
		if mine == want && len(r1.Stats().Partitions) == runner.DefaultPartitions-want {
			break
		}
		if i == steps || time.Now().After(deadline) {
			t.Fatalf("%d heartbeat intervals of the ownership clock (%s; within 30 s of the wall clock) after a second runner joined, with the first one's rebuild of the driver index still going: the joiner owns %d of its %d partitions, the first runner %d",
				i, time.Duration(i)*clk.lease/4, mine, want, len(r1.Stats().Partitions))
		}
		clk.step()
	}
	once.Do(func() { close(block) })
}
