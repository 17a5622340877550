package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// runningExternal starts run on a runner whose pay tool (timeout given) is
// external with no worker, so its fenced attempt stays running until its
// deadline (if any), and returns the runner.
func runningExternal(t *testing.T, run string, timeout tools.Timeout, opts ...runner.Option) (*harness, *runner.Runner) {
	t.Helper()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{tools.WithTimeout(b.tool(), timeout)}, policy.Func(allow))
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{a}, append([]runner.Option{runner.WithExternalTools("pay"), runner.WithDrainWindow(100 * time.Millisecond)}, opts...)...)
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor(run, "running", func(s aggregate.State) bool {
		return len(s.Actions()) == 1 && s.Actions()[0].State == aggregate.ActionRunning
	})
	// An external worker claimed the attempt: its body runs (it may act),
	// so its deadline cannot close it.
	claimAsWorker(t, h, run, "1/call_1_1", 1, 1)
	return h, r
}

func offer(r *runner.Runner, c context.Context, run string) error {
	_, err := r.Settle(c, api.Settlement{Schema: api.Schema, CommandID: "s-1", Run: run, Action: "1/call_1_1", Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"id":"settled"}`), Summary: "confirmed"})
	return err
}

// Scenario 27 / docs/semantics.md §9: a settlement offered while a body with an
// Infinity timeout runs waits for it as long as the request's context
// allows — no fixed cap — and then says why: settle_unconfirmed, reason
// body_running, naming the context's end.
//
// The wait is measured by the runner's clock, not the wall clock: each time
// the settlement looks at the run (it reads the runner's clock holding the
// run), that clock moves an hour further, and at its third look the
// settlement's context is cancelled, so the settlement has waited hours of
// the clock the runner decides at. Only the settlement's own looks count:
// the runner's heartbeat reads the same clock every quarter lease, and a
// cancel at one of its reads could come while the settlement waits for the
// run, which is answered runner_busy (docs/protocol.md). The context's time
// limit only bounds a hang: a settlement that never looks at the runner's
// clock fails naming that.
func TestScenario27_SettleWaitsForInfiniteBodyUntilContextEnds(t *testing.T) {
	t.Parallel()
	const run = "r27-inf"
	noLook := errors.New("the settlement never looked at the runner's clock a third time (holding the run) before the test's time limit")
	limited, stop := context.WithTimeoutCause(context.Background(), hangBound, noLook)
	defer stop()
	c, cancel := context.WithCancel(limited)
	defer cancel()
	var looks atomic.Int64
	clock := runner.WithClock(func() time.Time {
		now := time.Now()
		if !settlementLooks() {
			return now
		}
		n := looks.Add(1)
		if n == 3 {
			cancel() // the settlement holds the run: it answers at its next wait
		}
		return now.Add(time.Duration(n) * time.Hour)
	})
	h, r := runningExternal(t, run, tools.Infinity(), clock)
	// The runner is done with the attempt: its task is on the queue and no
	// command holds the run.
	sctx := ctx(t)
	untilSeen(t, "the task of "+run+" on the queue", func() (bool, string) {
		st, err := h.srv.JS.Stream(sctx, api.TaskStream)
		if err != nil {
			return false, err.Error()
		}
		return st.CachedInfo().State.Msgs == 1, fmt.Sprintf("%d tasks", st.CachedInfo().State.Msgs)
	})
	unlock, ok := runner.HoldRun(r, run)
	if !ok {
		t.Fatal("the run is not held in memory")
	}
	unlock()
	err := offer(r, c, run)
	if cause := context.Cause(limited); cause != nil {
		t.Fatalf("%v (%d looks; answer: %v)", cause, looks.Load(), err)
	}
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeSettleUnconfirmed || we.Reason != runner.ReasonBodyRunning {
		t.Fatalf("settle while an infinite body runs: %v, want settle_unconfirmed(body_running)", err)
	}
	if !strings.Contains(we.Message, context.Canceled.Error()) {
		t.Fatalf("the settlement stopped waiting before its context ended: %v", err)
	}
}

// settlementLooks reports whether the runner's clock is being read by a
// settlement holding its run (the func Runner.Settle runs on the locked
// run), not by another of the runner's goroutines (its heartbeat, a timer).
func settlementLooks() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/weftrun/weft/runner.(*Runner).Settle.func") {
			return true
		}
		if !more {
			return false
		}
	}
}

// Scenario 27 / docs/semantics.md §9: with a short tool timeout, a settlement
// offered while the body runs waits across the attempt's deadline: the
// timeout makes the action uncertain and the waiting settlement is then
// recorded as its one definite settlement; the run continues.
func TestScenario27_SettleWaitsForBodyUntilItsDeadline(t *testing.T) {
	t.Parallel()
	h, r := runningExternal(t, "r27-dl", tools.After(200*time.Millisecond))
	if err := offer(r, ctx(t), "r27-dl"); err != nil {
		t.Fatalf("settle across the deadline: %v", err)
	}
	s, out := finished(t, h, "r27-dl")
	if out.Kind != events.OutcomeCompleted || s.Actions()[0].State != aggregate.ActionReconciled {
		t.Fatalf("outcome %s, action %s", out.Kind, s.Actions()[0].State)
	}
}

// Scenario 27 / docs/semantics.md §9 with the store clock: whether a
// settlement still waits for the running body is judged at the store time
// the runner decides at (its clock, never before the run's last event),
// like every other decision, not at this machine's wall clock. The
// runner's clock is a minute behind and the tool's timeout 30 s: the
// attempt's recorded deadline is in the wall clock's past (by more than
// the lease), yet in store time the body may still run, so the settlement
// waits for it until the request's context ends.
func TestScenario27_SettleWaitsByTheStoreClock(t *testing.T) {
	t.Parallel()
	behind := runner.WithClock(func() time.Time { return time.Now().Add(-time.Minute) })
	_, r := runningExternal(t, "r27-sc", tools.After(30*time.Second), behind)
	// The tool timeout's local timer is armed by the wall clock, at which
	// the deadline has passed: it fires at once and its (not due) decision
	// holds the run for a moment. The context leaves room for that on a
	// loaded machine (with 300 ms the settlement was once answered
	// runner_busy, the run held for the whole context).
	// runner_busy (the run held for the whole context: the CI's clean
	// run met it once with 2 s) is retryable (docs/protocol.md): the
	// worker sends the settlement again, as a worker does, a few times.
	var err error
	for try := 0; try < 3; try++ {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = offer(r, c, "r27-sc")
		cancel()
		if weft.ErrorCode(err) != weft.CodeRunnerBusy {
			break
		}
		t.Logf("try %d: %v; sent again", try+1, err)
	}
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeSettleUnconfirmed || we.Reason != runner.ReasonBodyRunning {
		t.Fatalf("settle while the body runs: %v, want settle_unconfirmed(body_running)", err)
	}
	if !strings.Contains(we.Message, context.DeadlineExceeded.Error()) {
		t.Fatalf("the settlement stopped waiting before its context ended (judged by the wall clock): %v", err)
	}
}
