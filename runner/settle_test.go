package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
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
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// settling is a settling pay tool whose body blocks until released or
// stopped; selfSettle makes the body settle its own running call.
type settling struct {
	starts     atomic.Int64
	release    chan struct{}
	selfSettle bool
	selfErr    chan error
}

func (s *settling) tool(window time.Duration) tools.Tool {
	return tools.BindSettling(payDef, func(ctx context.Context, call tools.Call, in payIn, st *tools.Settler[payOut]) (payOut, error) {
		s.starts.Add(1)
		if s.selfSettle {
			s.selfErr <- st.Settle(ctx, payOut{ID: "self"}, "own call")
		}
		select {
		case <-s.release:
			return payOut{ID: "returned"}, nil
		case <-ctx.Done():
			return payOut{}, ctx.Err()
		}
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) }, window)
}

type events_ struct {
	mu  sync.Mutex
	got []telemetry.Event
}

func (e *events_) handler(_ context.Context, ev telemetry.Event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events_) find(name telemetry.Name) (telemetry.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.got {
		if ev.Name == name {
			return ev, true
		}
	}
	return telemetry.Event{}, false
}

func settle(h *harness, t *testing.T, run, action, id string) error {
	_, err := h.client.Settle(ctx(t), api.Settlement{CommandID: "s-" + id, Run: run, Action: action, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"id":"settled"}`), Summary: "refund " + id + " confirmed"})
	return err
}

// Scenario 25: a settling tool cancelled mid-body settles within the
// window → succeeded, run cancelled; a second settle → already_recorded.
func TestScenario25_SettleAfterCancel(t *testing.T) {
	t.Parallel()
	st := &settling{release: make(chan struct{})}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{st.tool(10 * time.Second)}, policy.Func(allow)), "r25", "x")
	h.waitFor("r25", "running", func(s aggregate.State) bool { return len(s.Actions()) == 1 && st.starts.Load() == 1 })
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r25"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("r25", "settling", func(s aggregate.State) bool { return s.Actions()[0].State == aggregate.ActionSettling })
	if err := settle(h, t, "r25", "1/call_1_1", "1"); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r25")
	if out.Kind != events.OutcomeCancelled || s.Actions()[0].State != aggregate.ActionSucceeded {
		t.Fatalf("outcome %+v action %s", out, s.Actions()[0].State)
	}
	if err := settle(h, t, "r25", "1/call_1_1", "2"); weft.ErrorCode(err) != weft.CodeAlreadyRecorded {
		t.Fatalf("second settle: %v", err)
	}
}

// Scenario 26: a settling tool cancelled mid-body gets no settlement
// within its 20 ms window → uncertain (evidence says no settlement), the run
// finishes cancelled; a later settle → not_awaited, nothing changes, and
// settlement_refused is emitted with the summary.
func TestScenario26_NoSettlementInWindow(t *testing.T) {
	t.Parallel()
	st := &settling{release: make(chan struct{})}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{st.tool(20 * time.Millisecond)}, policy.Func(allow))
	h := newHarness(t)
	tel := &events_{}
	h.startRunner([]*agent.Agent{a}, runner.WithTelemetry(telemetry.New(telemetry.WithHandler(tel.handler))))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r26", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("r26", "running", func(s aggregate.State) bool { return st.starts.Load() == 1 })
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r26"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r26")
	act := s.Actions()[0]
	if out.Kind != events.OutcomeCancelled || act.State != aggregate.ActionUncertain || !strings.Contains(act.Detail, "settle") {
		t.Fatalf("outcome %s, action %s %q", out.Kind, act.State, act.Detail)
	}
	if err := settle(h, t, "r26", act.ID, "late"); weft.ErrorCode(err) != weft.CodeNotAwaited {
		t.Fatalf("late settle: %v", err)
	}
	ev, ok := tel.find(telemetry.SettlementRefused)
	if !ok || !strings.Contains(ev.Attrs[len(ev.Attrs)-1].Value.AsString(), "refund late confirmed") {
		t.Fatalf("settlement_refused not emitted with the summary: %+v", tel.got)
	}
	if a2, _ := h.state("r26").Action(act.ID); a2.State != aggregate.ActionUncertain {
		t.Fatalf("late settlement changed the action to %s", a2.State)
	}
}

// Scenario 27: a settlement offered while the body runs waits; the body
// returns → already_recorded. A handler settling its own call → not_awaited
// at once.
func TestScenario27_SettleWhileRunning(t *testing.T) {
	t.Parallel()
	st := &settling{release: make(chan struct{})}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{st.tool(time.Second)}, policy.Func(allow)), "r27", "x")
	h.waitFor("r27", "running", func(s aggregate.State) bool { return st.starts.Load() == 1 })
	errc := make(chan error, 1)
	go func() { errc <- settle(h, t, "r27", "1/call_1_1", "early") }()
	select {
	case err := <-errc:
		t.Fatalf("settle did not wait for the running body: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(st.release)
	if err := <-errc; weft.ErrorCode(err) != weft.CodeAlreadyRecorded {
		t.Fatalf("settle after the body returned: %v", err)
	}
	s, _ := finished(t, h, "r27")
	if c := string(s.Actions()[0].Content); !strings.Contains(c, "returned") {
		t.Fatalf("the body's own result must win, got %s", c)
	}

	self := &settling{release: make(chan struct{}), selfSettle: true, selfErr: make(chan error, 1)}
	close(self.release)
	m2 := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h2 := one(t, build(t, m2, []tools.Tool{self.tool(time.Second)}, policy.Func(allow)), "r27b", "x")
	if err := <-self.selfErr; weft.ErrorCode(err) != weft.CodeNotAwaited {
		t.Fatalf("self settle: %v", err)
	}
	finished(t, h2, "r27b")
}

// Scenario 28: a worker dies (the action becomes uncertain); an uncertain
// settle → not_awaited; a definite settle → accepted, the run continues;
// had a reconcile come first → already_recorded.
func TestScenario28_WorkerDiesThenSettle(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewRules("s", model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(1, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	// The worker that dies: takes both tasks, claims their attempts (as a
	// worker does before it starts a body) and never acks.
	c := ctx(t)
	claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := h.srv.JS.CreateOrUpdateConsumer(c, api.TaskStream, worker.ConsumerConfig(deskQueue("pay"), 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	h.startRunner([]*agent.Agent{a}, runner.WithoutWorker())
	for _, run := range []string{"r28", "r28b"} {
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
		msgs, err := cons.Fetch(1, jetstreamWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for msg := range msgs.Messages() {
			var task api.Task
			if err := json.Unmarshal(msg.Data(), &task); err != nil {
				t.Fatal(err)
			}
			if _, err := claims.Create(c, task.Claim, []byte("dying-worker")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A live worker gets the redeliveries and reports them worker_lost.
	w := worker.New(h.srv.Connect(), h.srv.JS, worker.WithAckWait(300*time.Millisecond))
	w.Handle(deskQueue("pay"), runner.ToolHandler(b.tool(), nil))
	wctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _ = w.Run(wctx) }()

	s := h.waitStatus("r28", aggregate.StatusSuspended)
	act := s.Actions()[0]
	if act.State != aggregate.ActionUncertain || b.starts.Load() != 0 {
		t.Fatalf("action %s, starts %d", act.State, b.starts.Load())
	}
	_, err = h.client.Settle(c, api.Settlement{CommandID: "u", Run: "r28", Action: act.ID, Outcome: events.OutcomeUncertain, Evidence: "?", Summary: "s"})
	if weft.ErrorCode(err) != weft.CodeNotAwaited {
		t.Fatalf("uncertain settle: %v", err)
	}
	if err := settle(h, t, "r28", act.ID, "def"); err != nil {
		t.Fatalf("definite settle: %v", err)
	}
	if _, out := finished(t, h, "r28"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}

	s = h.waitStatus("r28b", aggregate.StatusSuspended)
	act = s.Actions()[0]
	if _, err := h.client.Reconcile(c, api.ReconcileRequest{CommandID: "r", Run: "r28b", Action: act.ID, Content: json.RawMessage(`{"id":"by hand"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := settle(h, t, "r28b", act.ID, "after"); weft.ErrorCode(err) != weft.CodeAlreadyRecorded {
		t.Fatalf("settle after reconcile: %v", err)
	}
}

// Scenario 25 / docs/semantics.md §3 ("the handler's own return value wins
// whenever it returns"): a settling tool cancelled mid-body that does not
// call Settle but returns a definite output a moment after it was stopped
// ends succeeded with that output, and the run cancelled.
func TestScenario25_ReturnAfterStopWins(t *testing.T) {
	t.Parallel()
	var starts atomic.Int64
	tool := tools.BindSettling(payDef, func(ctx context.Context, call tools.Call, in payIn, _ *tools.Settler[payOut]) (payOut, error) {
		starts.Add(1)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // the gateway answers anyway
		return payOut{ID: "returned-after-stop"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) }, 30*time.Second)
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{tool}, policy.Func(allow)), "r25r", "x")
	h.waitFor("r25r", "running", func(s aggregate.State) bool { return starts.Load() == 1 })
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r25r"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r25r")
	act := s.Actions()[0]
	if out.Kind != events.OutcomeCancelled || act.State != aggregate.ActionSucceeded || !strings.Contains(string(act.Content), "returned-after-stop") {
		t.Fatalf("outcome %s, action %s %s %q", out.Kind, act.State, act.Content, act.Detail)
	}
}

// Scenario 27 / docs/semantics.md §9: a handler settling its own running call
// is
// refused not_awaited at once, and — like every not_awaited refusal —
// settlement_refused is emitted with the summary.
func TestScenario27_OwnCallRefusalEmitsTelemetry(t *testing.T) {
	t.Parallel()
	self := &settling{release: make(chan struct{}), selfSettle: true, selfErr: make(chan error, 1)}
	close(self.release)
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{self.tool(time.Second)}, policy.Func(allow))
	h := newHarness(t)
	tel := &events_{}
	h.startRunner([]*agent.Agent{a}, runner.WithTelemetry(telemetry.New(telemetry.WithHandler(tel.handler))))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r27t", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := <-self.selfErr; weft.ErrorCode(err) != weft.CodeNotAwaited {
		t.Fatalf("self settle: %v", err)
	}
	finished(t, h, "r27t")
	ev, ok := tel.find(telemetry.SettlementRefused)
	if !ok || !strings.Contains(ev.Attrs[len(ev.Attrs)-1].Value.AsString(), "own call") {
		t.Fatalf("settlement_refused not emitted with the summary: %+v", tel.got)
	}
}
