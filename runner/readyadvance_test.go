package runner_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/tools"
)

// refuseAppends makes WEFT_EVENTS refuse every new message (a full stream
// with discard new: each append fails with a store error, nothing lands)
// until the returned allow is called.
func (h *harness) refuseAppends() (allow func()) {
	h.t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := h.srv.JS.Stream(c, provision.EventsStream)
	if err != nil {
		h.t.Fatal(err)
	}
	info, err := st.Info(c)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := info.Config
	cfg.MaxMsgs, cfg.Discard = int64(max(info.State.Msgs, 1)), jetstream.DiscardNew
	if _, err := h.srv.JS.UpdateStream(c, cfg); err != nil {
		h.t.Fatal(err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := h.srv.JS.UpdateStream(c, provision.EventsConfig()); err != nil {
				h.t.Error(err)
			}
		})
	}
}

// docs/semantics.md §8 (pending work is derived again from the log and retried,
// never dropped; raft's Ready/Advance): the model's reply could not be
// recorded (the store refused the append). The runner keeps the work
// pending and records it once the store accepts again, instead of leaving
// the run working with nothing in flight.
func TestPendingWorkIsRetried_ModelReplyAppendFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	refused := make(chan func(), 1)
	var once sync.Once
	m := model.NewScripted("s", func(ctx context.Context, req model.Request) (model.Reply, error) {
		once.Do(func() { refused <- h.refuseAppends() })
		return model.Answer("done")(ctx, req)
	})
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "ra1", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	accept := receive(t, "the reply's append refused", refused)
	time.Sleep(time.Second) // wall clock: the reply's append is refused meanwhile (the runner's retries, on the wall clock: not ownership's time)
	accept()
	if _, out := finished(t, h, "ra1"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
}

// The same for the resolution of a tool request's calls (validation and
// policy): its append failed; it is decided again and recorded.
func TestPendingWorkIsRetried_CallResolutionAppendFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	refused := make(chan func(), 1)
	var once sync.Once
	p := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		once.Do(func() { refused <- h.refuseAppends() })
		return policy.Allow(), nil
	})
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(5, "ok")), model.Answer("done"))
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{b.tool()}, p)})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "ra2", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	accept := receive(t, "the resolution's append refused", refused)
	time.Sleep(time.Second) // wall clock: the resolution's append is refused meanwhile (the runner's retries, on the wall clock: not ownership's time)
	accept()
	if _, out := finished(t, h, "ra2"); out.Kind != events.OutcomeCompleted || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, starts %d", events.DescribeOutcome(out), b.starts.Load())
	}
}

// The same for a due timer: a body's timeout fired while the store refused
// appends, so neither the local timer, nor its durable backstop, nor the
// worker's timed_out report could record the attempt's loss. The loss is
// decided again and recorded once the store accepts, instead of the run
// staying working with a running action that nothing will ever end.
func TestPendingWorkIsRetried_DueTimerAppendFailed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var accept func()
	var once sync.Once
	started := make(chan struct{})
	hang := tools.WithTimeout(tools.Bind(payDef, func(ctx context.Context, _ tools.Call, _ payIn) (payOut, error) {
		once.Do(func() { accept = h.refuseAppends(); close(started) })
		<-ctx.Done()
		return payOut{}, ctx.Err()
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) }), tools.After(300*time.Millisecond))
	m := model.NewScripted("s", model.CallTools(payCall(5, "hang")), model.Answer("done"))
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{hang}, policy.Func(allow))})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "ra3", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	receive(t, "the timer's append started", started)
	// The timeout (300 ms) fires, its retries and the durable timer's
	// deliveries are refused meanwhile.
	time.Sleep(4 * time.Second) // wall clock: the timeout, the retries and the deliveries, none on ownership's time
	accept()
	s := h.waitStatus("ra3", aggregate.StatusSuspended)
	if a := s.Actions()[0]; a.State != aggregate.ActionUncertain || a.Outcome != events.CauseTimedOut {
		t.Fatalf("action %s (%s), want uncertain after timed_out", a.State, a.Outcome)
	}
}
