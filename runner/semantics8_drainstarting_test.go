package runner_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// docs/semantics.md §8, graceful drain: what was in flight at SIGTERM is
// recorded within the window — also when SIGTERM comes while the runner's
// in-process worker is still setting up its consumers (a runner that just
// started, on a loaded machine: e2e's Scenario 33 failed so). The worker's
// consumer of the first tool is set up and delivers the task, whose body
// runs; the consumer of the second tool is still being made when the drain
// stops the worker, so the worker's setup fails. The worker must still
// drain the body it runs and deliver its report: its Run returned at once,
// which ended the time its reports have (worker.LateAfterAbandon's
// context), so the report was given up at its first try and the action
// stayed running, the run handed off with its result lost.
func TestSemantics8_DrainRecordsTheBodyOfAWorkerStillSettingUp(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	pay := tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		started <- struct{}{}
		<-gate
		return payOut{ID: "p"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	ship := tools.Bind(tools.Define[payIn, payOut]("ship", "Ship an order."), func(context.Context, tools.Call, payIn) (payOut, error) {
		return payOut{ID: "s"}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(1, "ok"))})
	a := build(t, m, []tools.Tool{pay, ship}, policy.Func(allow))

	// The worker sets its consumers up in the agent's tool order: the
	// create of ship's waits until the drain stopped the worker.
	setup := make(chan struct{})
	var held sync.Once
	trace := jetstream.WithClientTrace(&jetstream.ClientTrace{RequestSent: func(subj string, _ []byte) {
		if strings.Contains(subj, ".CONSUMER.CREATE.") && strings.Contains(subj, deskQueue("ship").Consumer()) {
			held.Do(func() { <-setup })
		}
	}})
	stoppedSetup := make(chan struct{})
	h := newHarness(t)
	_, stop := h.startRunnerJS([]jetstream.JetStreamOpt{trace}, []*agent.Agent{a},
		runner.WithLogger(slog.New(signalLog{msg: worker.SetupStopped, once: &sync.Once{}, ch: stoppedSetup})),
		runner.WithHook(func(event string, _ int, _ string) {
			if event == "worker-stopped" {
				close(setup) // the create is sent on a context that ended
			}
		}))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r33s", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	receive(t, "the pay body started", started)

	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }() // SIGTERM
	// The body ends once the worker's setup failed (the worker says so;
	// before it did, its Run returned there, without a word). Without that
	// failure this test proves nothing, so it fails when the log never comes.
	select {
	case <-stoppedSetup:
	case <-time.After(hangBound): // a bound on a hang, not a timing assertion
		close(gate)
		t.Fatalf("the worker never logged %q: its setup was not stopped by the drain (this test's precondition)", worker.SetupStopped)
	}
	close(gate)
	receive(t, "the drain ended (its stop returned)", stopped)

	s := h.state("r33s")
	act := s.Actions()[0]
	if act.State != aggregate.ActionSucceeded || !s.HandedOff() {
		t.Fatalf("after the drain: action %s %q, handed off %v; want succeeded (the body's result recorded within the window) and handed off", act.State, act.Detail, s.HandedOff())
	}
}

// docs/semantics.md §8 ("a run can always be answered"), with the drain's
// window: a command that waits for a run another command holds when the
// drain window ends is answered runner_busy (retry), and says that the
// runner stopped serving — not that the run was busy for the whole command
// timeout, which had not passed (a worker's log said so for a report cut
// off by the end of the window, which sent the search for a lock held for
// five seconds).
func TestSemantics8_ACommandWaitingWhenTheWindowEndsSaysTheRunnerStoppedServing(t *testing.T) {
	t.Parallel()
	// The run stays in memory, nothing of it running but its model call,
	// held until the test ends.
	m := &heldCall{Model: model.NewScripted("s", model.Answer("ok")), called: make(chan struct{})}
	h := newHarness(t)
	const run = "ws-0"
	r, stop := h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))},
		runner.WithDrainWindow(300*time.Millisecond), runner.WithHandOffLockTimeout(50*time.Millisecond))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	receive(t, "the model called", m.called)
	unlock, ok := runner.HoldRun(r, run)
	if !ok {
		t.Fatal("the run is not held in memory")
	}
	defer unlock()
	answered := make(chan error, 1)
	go func() {
		// The agent's command timeout (5 s) is longer than the window.
		_, err := r.Report(context.Background(), api.Report{Schema: api.Schema, Run: run, Action: "1/call_1_1", Attempt: 1, Worker: "w",
			Outcome: api.OutcomeOutput, Content: []byte(`{"id":"p"}`)})
		answered <- err
	}()
	stopped := make(chan struct{})
	go func() { defer close(stopped); stop() }()
	err := receive(t, "the report answered", answered)
	unlock()
	receive(t, "the drain ended (its stop returned)", stopped)
	if weft.ErrorCode(err) != weft.CodeRunnerBusy || !strings.Contains(err.Error(), "this runner stopped serving (its drain window ended)") {
		t.Fatalf("a report waiting for the run at the end of the window: %v, want runner_busy saying the runner stopped serving", err)
	}
}

// docs/semantics.md §8 ("a run can always be answered"): a command whose own
// context ends while it waits for a run another command holds — its
// deadline shorter than the command timeout, as a worker's report context
// may be — is answered runner_busy saying that the command ended, not
// that the run was busy for the whole command timeout (every deadline
// was taken for the command timeout's).
func TestSemantics8_ACommandWhoseOwnDeadlineEndsItsWaitSaysSo(t *testing.T) {
	t.Parallel()
	m := &heldCall{Model: model.NewScripted("s", model.Answer("ok")), called: make(chan struct{})}
	h := newHarness(t)
	const run = "wd-0"
	r, _ := h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	receive(t, "the model called", m.called)
	unlock, ok := runner.HoldRun(r, run)
	if !ok {
		t.Fatal("the run is not held in memory")
	}
	defer unlock()
	// The agent's command timeout is 5 s; the report's own deadline ends
	// first.
	rctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.Report(rctx, api.Report{Schema: api.Schema, Run: run, Action: "1/call_1_1", Attempt: 1, Worker: "w",
		Outcome: api.OutcomeOutput, Content: []byte(`{"id":"p"}`)})
	if weft.ErrorCode(err) != weft.CodeRunnerBusy || !strings.Contains(err.Error(), "the command ended while it waited for the run") {
		t.Fatalf("a report whose own deadline ended while it waited for the run: %v, want runner_busy saying the command ended", err)
	}
}

// heldCall holds its first call until its context ends, saying on called
// that the call was made.
type heldCall struct {
	model.Model
	called chan struct{}
	once   sync.Once
}

func (m *heldCall) Complete(ctx context.Context, req model.Request) (model.Reply, error) {
	m.once.Do(func() { close(m.called); <-ctx.Done() })
	if err := ctx.Err(); err != nil {
		return model.Reply{}, err
	}
	return m.Model.Complete(ctx, req)
}
