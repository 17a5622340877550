package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
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

// beating keeps runner id's key in weft_runners put with value v until
// the returned stop is called, which deletes the key (a drained runner's
// release: gone at once). It puts the key every 200 ms of the wall clock,
// not of a fake ownership clock: the bucket's max age, which lapses the
// key, is the server's time.
func (h *harness) beating(id string, v []byte) (stop func()) {
	h.t.Helper()
	live, err := h.srv.JS.KeyValue(ctx(h.t), runner.RunnersBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := live.Put(ctx(h.t), id, v); err != nil {
		h.t.Fatal(err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			_, _ = live.Put(context.Background(), id, v)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			<-stopped
			_ = live.Delete(context.Background(), id)
		})
	}
	h.t.Cleanup(stop)
	return stop
}

// partRev is the revision of partition p's key in weft_partitions and
// the runner it names.
func (h *harness) partRev(p int) (string, uint64) {
	h.t.Helper()
	kv, err := h.srv.JS.KeyValue(ctx(h.t), runner.PartitionsBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	e, err := kv.Get(ctx(h.t), fmt.Sprintf("p.%04d", p))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(e.Value()), e.Revision()
}

// waitNotOwning waits until r's table no longer lists partition p.
func waitNotOwning(t *testing.T, r *runner.Runner, p int) {
	t.Helper()
	c := ctx(t)
	for slices.Contains(r.Stats().Partitions, p) {
		if c.Err() != nil {
			t.Fatalf("the runner still owns partition %d", p)
		}
		// wall clock: a poll of the runner's table, which its watch of weft_partitions updates: not ownership's time
		time.Sleep(10 * time.Millisecond)
	}
}

// startedBy appends the start of run driven by runner driver (turn 1
// requested, no reply: work in flight), with its weft_drivers entry.
func startedBy(t *testing.T, h *harness, a *agent.Agent, run, driver string) {
	t.Helper()
	var s aggregate.State
	appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: driver})
	drivers, err := h.srv.JS.KeyValue(ctx(t), runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drivers.Put(ctx(t), runner.DriverKey(run, runner.DefaultPartitions), []byte(driver)); err != nil {
		t.Fatal(err)
	}
}

// docs/semantics.md §8 "only a runner that is gone is recovered from": a runner
// whose view of weft_partitions is stale — paused or cut
// off while another runner ("other", alive) claimed a partition — still
// believes it owns the partition. A command for a run of it with work in
// flight, driven by a runner gone, must not be answered by a takeover
// decided on that view: the partition's key, read from the stream's
// leader, names "other"; the runner forgets the partition and forwards
// (here "other" does not answer: the command is not applied), and the
// run is not recovered by it.
func TestSemantics8_AStaleOwnerDoesNotTakeOverARunWithWorkInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow), agent.WithCommandTimeout(time.Second))
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithoutScan())
	const run = "stale-1"
	p := partition.Of(run, runner.DefaultPartitions)
	_, claimed := h.partRev(p)
	h.beating("other", []byte(`{"schema":1,"at":"x"}`)) // alive, assigned nothing: r keeps its other partitions
	h.owns("other", run)
	waitNotOwning(t, r, p)
	startedBy(t, h, a, run, "ghost")
	r.StaleView(p, claimed)
	c := ctx(t)
	_, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c1", Run: run, Reason: "x"})
	if err == nil {
		t.Fatalf("the cancel was applied by the runner that lost the partition")
	}
	if rr := h.recoveries(run); len(rr) != 0 {
		t.Fatalf("the run was recovered %+v by a runner that does not own its partition", rr)
	}
	if s := h.state(run); s.Runner() != "ghost" {
		t.Errorf("the run is driven by %s", s.Runner())
	}
	waitNotOwning(t, r, p)
	if st := r.Stats(); st.TakenOver != 0 || st.Driven != 0 {
		t.Errorf("stats %+v, want nothing taken over or held", st)
	}
}

// docs/semantics.md §8, the lazy takeover of an idle run: its
// first recorded step (an approval) is the takeover's record, so it too
// is decided on the store's owner of the partition, not on a stale view.
func TestSemantics8_AStaleOwnerDoesNotRecordALazyTakeover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	b := &bodies{}
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithCommandTimeout(time.Second))
	// Both runners on one fake ownership clock (ownClock): stepped until
	// the first owns every partition and, once it drained and the second
	// started, until the second claimed the run's partition; it follows
	// the wall clock while the runs' work and the drain go on. The polls
	// left wait on the eviction and on the watch of weft_partitions, not
	// on ownership's time. The second runner makes no scan, so a step
	// cannot tell its partition loop armed (armed): none is needed, as
	// the lone runner claims every partition in its first round, before
	// it serves; a step that waited on it would give up after still.
	clk := newOwnClock(t)
	clk2 := clk.another().withoutScan()
	h.unbalanced = true // the partitions move on the clock's steps
	first, stopFirst := h.startRunner([]*agent.Agent{a}, clk.options(nil)...)
	clk.advanceUntil(t, "the first runner owns every partition", 40, func() bool { return ownsAll(first) })
	clk.follow()
	const run = "stale-idle"
	c := ctx(t)
	if err := retrying(c, func() error {
		_, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus(run, aggregate.StatusSuspended)
	for first.Stats().Driven > 0 {
		if c.Err() != nil {
			t.Fatal("the run was never evicted")
		}
		// wall clock: a poll of the idle run's eviction (idle.go), which follows its suspension, not ownership's time
		time.Sleep(10 * time.Millisecond)
	}
	stopFirst()
	clk.leave()
	r, _ := h.startRunner([]*agent.Agent{a}, append(clk2.options(nil), runner.WithoutScan())...)
	p := partition.Of(run, runner.DefaultPartitions)
	clk.advanceUntil(t, "the second runner claimed the partition", 40, func() bool { return slices.Contains(r.Stats().Partitions, p) })
	clk.follow()
	_, claimed := h.partRev(p)
	h.beating("other", []byte(`{"schema":1,"at":"x"}`))
	h.owns("other", run)
	waitNotOwning(t, r, p)
	r.StaleView(p, claimed)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"}); err == nil {
		t.Fatal("the approval was applied by a runner that does not own the partition")
	}
	if rr := h.recoveries(run); len(rr) != 0 {
		t.Fatalf("the run was recovered %+v by a runner that does not own its partition", rr)
	}
	if b.starts.Load() != 0 {
		t.Errorf("the body was started %d times", b.starts.Load())
	}
}

// docs/semantics.md §8: a partition key that names this runner at
// a revision lower than the one it claimed is no claim of its own (a
// re-created weft_partitions bucket, a server that lost writes): after a
// reconnection the runner verifies its partitions before acquiring
// anything, takes such a key as a loss, and claims the partition anew —
// at a fresh revision — before it drives the partition's runs again.
func TestSemantics8_AKeyBelowTheClaimedRevisionIsALoss(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	r, _ := h.startRunner([]*agent.Agent{a})
	const run = "recreated-1"
	p := partition.Of(run, runner.DefaultPartitions)
	_, rev := h.partRev(p)
	r.StaleView(p, rev+1000) // claimed at a revision the key is below
	r.ForgetReconnectCheck()
	c := ctx(t)
	if err := retrying(c, func() error {
		_, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if o, _ := h.waitStatus(run, aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("%s ended %s", run, events.DescribeOutcome(o))
	}
	owner, now := h.partRev(p)
	if owner != r.ID() || now <= rev {
		t.Errorf("partition %d: key names %s at revision %d (was %d): want a fresh claim by %s", p, owner, now, rev, r.ID())
	}
}

// driversMaxMsgSize sets the max message size of weft_drivers' stream (1:
// every put fails; -1: none).
func (h *harness) driversMaxMsgSize(n int32) {
	h.t.Helper()
	c := ctx(h.t)
	st, err := h.srv.JS.Stream(c, "KV_"+runner.DriversBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(c)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgSize = n
	if _, err := h.srv.JS.UpdateStream(c, cfg); err != nil {
		h.t.Fatal(err)
	}
}

// docs/semantics.md §8 "pending work is retried, never dropped": an
// idle run has no weft_drivers entry; the approval that fences its
// attempt gives it work in flight. Its entry must be put before that
// append — had the runner died between the append and a later put, no
// partition scan would ever find the run. When the put fails, nothing is
// recorded or performed: the approval answers unavailable, and applied
// again once the store takes writes it completes the run.
func TestSemantics8_AnIdleRunsDriverEntryIsPutBeforeItsWorkIsRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	b := &bodies{}
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	r, _ := h.startRunner([]*agent.Agent{a})
	const run = "idle-key"
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus(run, aggregate.StatusSuspended)
	drivers, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	for r.Stats().Driven > 0 {
		if c.Err() != nil {
			t.Fatal("the idle run was never evicted")
		}
		// wall clock: a poll of the idle run's eviction (idle.go), which follows its suspension, not ownership's time
		time.Sleep(10 * time.Millisecond)
	}
	// The eviction removes the entry after it stops driving the run (a
	// read of the message at its revision, then its delete): wait for it.
	for {
		if _, err := drivers.Get(c, runner.DriverKey(run, runner.DefaultPartitions)); errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if c.Err() != nil {
			t.Fatal("the idle run kept its driver entry")
		}
		// wall clock: a poll of the eviction's delete of the run's driver entry: not ownership's time
		time.Sleep(10 * time.Millisecond)
	}
	h.driversMaxMsgSize(1)
	version := h.state(run).Version()
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	approve := func() error {
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
		return err
	}
	if err := approve(); weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Errorf("approve with no driver entry possible: %v, want unavailable", err)
	}
	if got := h.state(run).Version(); got != version {
		t.Errorf("the run moved from version %d to %d without a driver entry", version, got)
	}
	if b.starts.Load() != 0 {
		t.Errorf("the body started %d times without a driver entry", b.starts.Load())
	}
	h.driversMaxMsgSize(-1)
	if err := retrying(c, approve); err != nil {
		t.Fatal(err)
	}
	if o, _ := h.waitStatus(run, aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("%s ended %s", run, events.DescribeOutcome(o))
	}
}

// docs/semantics.md §8 "work not recorded is derived again from the log, never
// dropped": the rebuild of the driver entries from the log
// is marked done ("rebuilt") only once every unfinished run has its
// entry. Here the first attempt cannot create the entry of a gone
// runner's run (weft_drivers refuses writes): "rebuilt" is not put, the
// rebuild is made again, and once the store takes writes the entry is
// rebuilt and the run recovered.
func TestSemantics8_ARebuildThatLeftRunsIsMadeAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	var s aggregate.State
	appendDecided(t, h, "rb-1", &s, aggregate.Start{Run: "rb-1", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	h.driversMaxMsgSize(1)
	failed := make(chan struct{})
	logger := slog.New(signalLog{msg: "rebuild driver keys from the log", once: &sync.Once{}, ch: failed})
	// On the fake ownership clock: the judgement's grace (the ghost's key
	// was never written: partition.JudgeGrace) passes by hand; before it
	// (the rebuild's failure, waited for in real time) and after it (the
	// rebuild made again: its backoff) the clock follows the wall clock.
	clk := newOwnClock(t)
	r, _ := h.startRunner([]*agent.Agent{a}, append(clk.options(nil), runner.WithLogger(logger))...)
	clk.follow()
	c := ctx(t)
	select {
	case <-failed:
	case <-c.Done():
		t.Fatal("the rebuild never reported runs left without an entry")
	}
	clk.pass(clk.judgeGrace())
	clk.follow()
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(c, "rebuilt"); err == nil {
		t.Fatal(`the rebuild was marked done ("rebuilt") with a run left without its driver entry`)
	}
	h.driversMaxMsgSize(-1)
	if o, _ := h.waitStatus("rb-1", aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("rb-1 ended %s", events.DescribeOutcome(o))
	}
	if rr := h.recoveries("rb-1"); len(rr) != 1 || rr[0].Previous != "ghost" || rr[0].Runner != r.ID() {
		t.Errorf("recoveries %+v, want one from ghost", rr)
	}
	for {
		if _, err := kv.Get(c, "rebuilt"); err == nil {
			break
		}
		if c.Err() != nil {
			t.Fatal(`"rebuilt" was never put`)
		}
		// wall clock: a poll of the rebuild made again, on its backoff (the wall clock's), not ownership's time
		time.Sleep(10 * time.Millisecond)
	}
}

// docs/semantics.md §8 "only a runner that is gone is recovered from", a
// rolling deploy: a live runner of an older release ("old": its
// heartbeat names no partitions) still drives a run with work in flight
// in a partition this runner owns. The run is not taken over while "old"
// lives — a command is answered runner_busy — and it is taken over, by
// the partition scan, once "old" is gone. A run driven by a live runner
// that takes part in the partitions ("paused": it lost the partition
// while paused and forgot its runs) is taken over at once.
func TestSemantics8_ALiveRunnerOfAnOlderReleaseKeepsItsRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a := build(t, answering(), []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	stopOld := h.beating("old", []byte(time.Now().UTC().Format(time.RFC3339Nano)))
	pb, _ := json.Marshal(map[string]any{"schema": 1, "at": "x", "partitions": 99})
	h.beating("older", pb)
	pp, _ := json.Marshal(map[string]any{"schema": 1, "at": "x", "partitions": runner.DefaultPartitions, "draining": true})
	h.beating("paused", pp) // draining: assigned nothing, yet a participant
	startedBy(t, h, a, "old-1", "old")
	startedBy(t, h, a, "older-1", "older")
	startedBy(t, h, a, "paused-1", "paused")
	kv, err := h.srv.JS.KeyValue(ctx(t), runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx(t), "rebuilt", []byte(`{"schema":1}`)); err != nil {
		t.Fatal(err)
	}
	r, _ := h.startRunner([]*agent.Agent{a})
	if o, _ := h.waitStatus("paused-1", aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("paused-1 ended %s", events.DescribeOutcome(o))
	}
	c := ctx(t)
	for _, run := range []string{"old-1", "older-1"} {
		_, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c-" + run, Run: run, Reason: "x"})
		if weft.ErrorCode(err) != weft.CodeRunnerBusy {
			t.Errorf("cancel %s while its runner of an older release lives: %v, want runner_busy", run, err)
		}
		if rr := h.recoveries(run); len(rr) != 0 {
			t.Errorf("%s was recovered %+v from a live runner", run, rr)
		}
	}
	stopOld() // drained: its key deleted
	if o, _ := h.waitStatus("old-1", aggregate.StatusFinished).Finished(); o.Kind != events.OutcomeCompleted {
		t.Errorf("old-1 ended %s", events.DescribeOutcome(o))
	}
	if rr := h.recoveries("old-1"); len(rr) != 1 || rr[0].Previous != "old" || rr[0].Runner != r.ID() {
		t.Errorf("old-1 recoveries %+v, want one from old", rr)
	}
	if rr := h.recoveries("older-1"); len(rr) != 0 {
		t.Errorf("older-1 was recovered %+v from a live runner", rr)
	}
}

// answering is a model that answers every turn.
func answering() model.Model {
	return model.NewRules("s", model.Rule{Name: "ok", Match: func(model.Request) bool { return true }, Step: model.Answer("ok")})
}
