package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// tasksWritten is how many messages WEFT_TASKS ever stored (its last
// sequence: a work queue removes the acked ones).
func tasksWritten(t *testing.T, h *harness) uint64 {
	t.Helper()
	s, err := h.srv.JS.Stream(ctx(t), api.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestSemantics8_AHandedTaskThatRunsHerePublishesNoStreamCopy: the
// runner's own worker runs every tool step of its runs to its report; by
// default no stream copy of those tasks is written to WEFT_TASKS — the
// copy is published only when a handed task does not run its attempt
// (docs/adr/0039-the-stream-copy-only-when-needed.md) — and each body
// starts once, every action done at its first attempt (docs/semantics.md
// §7). With runner.WithEagerTaskCopy every hand-off writes its copy, as
// before.
func TestSemantics8_AHandedTaskThatRunsHerePublishesNoStreamCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		eager bool
	}{{"lazy (default)", false}, {"eager", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := &bodies{}
			m := model.NewScripted("s", model.CallTools(payCall(1, "")), model.CallTools(payCall(1, "")), model.Answer("ok"))
			a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
			h := newHarness(t)
			var opts []runner.Option
			if tc.eager {
				opts = append(opts, runner.WithEagerTaskCopy())
			}
			r, _ := h.startRunner([]*agent.Agent{a}, opts...)
			// A task dispatched before the worker is ready is published,
			// not handed: measured once it took one.
			warmHandOff(t, h, r)
			warmStarts, warmHanded, warmWritten := b.starts.Load(), r.HandedOff(), tasksWritten(t, h)
			const n = 5
			for i := range n {
				h.startServed(ctx(t), api.StartRequest{Run: fmt.Sprint("plain-", i), Agent: "desk", Input: "x"})
			}
			for i := range n {
				completedAtFirstAttempts(t, h, fmt.Sprint("plain-", i))
			}
			if got := b.starts.Load() - warmStarts; got != 2*n {
				t.Errorf("%d body starts, want %d", got, 2*n)
			}
			handed := r.HandedOff() - warmHanded
			if handed == 0 {
				t.Fatal("the runner handed no task to its worker")
			}
			written := tasksWritten(t, h) - warmWritten
			if !tc.eager && written != 0 {
				t.Errorf("WEFT_TASKS stored %d messages for %d handed tasks that ran here, want 0", written, handed)
			}
			if tc.eager && written < uint64(handed) {
				t.Errorf("WEFT_TASKS stored %d messages for %d handed tasks, want one copy each", written, handed)
			}
		})
	}
}

// TestSemantics8_AVanishedWorkersClaimOfAHandedAttemptIsRecordedLost: the
// claim of each handed attempt is held by a worker that vanished; the
// runner's worker takes no claim and starts no body, and its handed task
// publishes the stream copy (docs/adr/0039), whose delivery reports the
// attempt lost (worker_lost): every run records its attempt lost and goes
// on, none is stranded with its action running and no copy to report it
// (docs/semantics.md §8: never dropped; §5: the body never starts under
// another's claim).
func TestSemantics8_AVanishedWorkersClaimOfAHandedAttemptIsRecordedLost(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	for i := range n {
		run := fmt.Sprint("vanished-", i)
		for inc := 0; inc <= 1; inc++ {
			v, _ := json.Marshal(api.Claim{Schema: 1, Worker: "vanished", Token: "feed", Claimed: time.Now().UTC()})
			if _, err := kv.Create(c, api.ClaimKey(run, "1/call_1_1", 1, inc), v); err != nil {
				t.Fatal(err)
			}
		}
		h.startServed(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	}
	for i := range n {
		run := fmt.Sprint("vanished-", i)
		// pay is not replayable: lost, its action is uncertain and the
		// run waits for its resolution.
		for lost := false; !lost; {
			for _, msg := range messagesOf(t, h, run) {
				lost = lost || slices.Contains(msg, events.NameAttemptLost)
			}
			if lost {
				break
			}
			select {
			case <-c.Done():
				t.Fatalf("run %s: its first attempt, claimed by a vanished worker, was not recorded lost: %v", run, messagesOf(t, h, run))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if r.HandedOff() == 0 {
		t.Error("the runner handed no task to its worker")
	}
}

// TestSemantics8_ADrainPublishesTheCopiesOfItsUnstartedHandedTasks: a
// runner drains (SIGTERM) while its worker holds handed tasks whose bodies
// have not started (its attempt check waits until the worker stops). Its
// worker's stop ends them unstarted; each removes its claim and publishes
// its stream copy before the drain releases its partitions, and a second
// runner's worker runs each body once from its copy. Every run completes
// with its action done at the first attempt: no attempt was left without
// a copy or a report, and none was reported lost for a body that never
// started (docs/semantics.md §8, graceful drain; §5).
func TestSemantics8_ADrainPublishesTheCopiesOfItsUnstartedHandedTasks(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	waitStop := func(ctx context.Context, _ api.Task) (bool, error) {
		<-ctx.Done() // the worker stops: its checks are cut short then
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return false, ctx.Err() // a check's own bound: asked again
		}
		return true, nil
	}
	r1, stop1 := h.startRunner([]*agent.Agent{a}, runner.WithID("drains"), runner.WithWorkerOptions(worker.WithAttemptCheck(waitStop)))
	c := ctx(t)
	const n = 4
	for i := range n {
		h.startServed(c, api.StartRequest{Run: fmt.Sprint("drain-", i), Agent: "desk", Input: "x"})
	}
	// A task dispatched before the worker was ready is published, not
	// handed (its delivery waits in the same check).
	for r1.HandedOff()+int64(tasksWritten(t, h)) < n {
		if c.Err() != nil {
			t.Fatalf("the draining runner's worker took %d of %d tasks", r1.HandedOff(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	handed, before := r1.HandedOff(), tasksWritten(t, h)
	if handed == 0 {
		t.Fatal("the runner handed no task to its worker")
	}
	h.startRunner([]*agent.Agent{a}, runner.WithID("takes-over"))
	stop1()
	if got := tasksWritten(t, h); got < before+uint64(handed) {
		t.Errorf("WEFT_TASKS stored %d messages once the drain ended (%d before), want a copy of each of the %d unstarted handed tasks", got, before, handed)
	}
	for i := range n {
		completedAtFirstAttempts(t, h, fmt.Sprint("drain-", i))
	}
	if got := b.starts.Load(); got != n {
		t.Errorf("%d body starts for %d attempts, want %d", got, n, n)
	}
}

// TestSemantics8_AHandedTasksFallbackCopyThatIsRefusedIsPublishedAgain: a
// handed task that cannot run its attempt (its claim held by a worker that
// vanished) publishes the stream copy (copyFallback); WEFT_TASKS refuses
// it (its max message size cut to 16 bytes), so the attempt is marked
// copy-lost and the run's next act dispatches it again — handed again,
// whose task falls back again — until the stream accepts the copy, whose
// delivery reports the attempt lost: the refused copy is not dropped and
// the run not stranded (docs/semantics.md §8; docs/adr/0039).
func TestSemantics8_AHandedTasksFallbackCopyThatIsRefusedIsPublishedAgain(t *testing.T) {
	t.Parallel()
	const run = "fallback-again"
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	lost := make(chan struct{}, 16)
	hook := func(event string, _ int, id string) {
		if event == "copy-lost" && id == run {
			select {
			case lost <- struct{}{}:
			default:
			}
		}
	}
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithHook(hook))
	warmHandOff(t, h, r)
	warm := b.starts.Load()
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for inc := 0; inc <= 1; inc++ {
		v, _ := json.Marshal(api.Claim{Schema: 1, Worker: "vanished", Token: "feed", Claimed: time.Now().UTC()})
		if _, err := kv.Create(c, api.ClaimKey(run, "1/call_1_1", 1, inc), v); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := h.srv.JS.Stream(c, api.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tasks.CachedInfo().Config
	limit := cfg
	limit.MaxMsgSize = 16
	if _, err := h.srv.JS.UpdateStream(c, limit); err != nil {
		t.Fatal(err)
	}
	h.startServed(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	for range 2 { // refused, dispatched again, refused again
		select {
		case <-lost:
		case <-c.Done():
			t.Fatal("the refused fallback copy was not marked for its republish")
		}
	}
	if _, err := h.srv.JS.UpdateStream(c, cfg); err != nil {
		t.Fatal(err)
	}
	for recorded := false; !recorded; {
		for _, msg := range messagesOf(t, h, run) {
			recorded = recorded || slices.Contains(msg, events.NameAttemptLost)
		}
		if recorded {
			break
		}
		select {
		case <-c.Done():
			t.Fatalf("no attempt_lost recorded once the stream accepted the copy: %v", messagesOf(t, h, run))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if n := b.starts.Load() - warm; n != 0 {
		t.Errorf("%d body starts, want none under the vanished worker's claim", n)
	}
}
