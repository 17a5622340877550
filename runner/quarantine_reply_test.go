package runner_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// signalLog is a slog handler that closes ch at the first record whose
// message is msg.
type signalLog struct {
	msg  string
	once *sync.Once
	ch   chan struct{}
}

func (h signalLog) Enabled(context.Context, slog.Level) bool { return true }
func (h signalLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.ch) })
	}
	return nil
}
func (h signalLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalLog) WithGroup(string) slog.Handler      { return h }

// docs/semantics.md §8 ("a run's pending work that failed to be recorded — a
// model
// reply, … — is retried, never dropped"), with
// docs/adr/0011-quarantine-and-repair-of-malformed-messages.md (a quarantined
// run is repaired and goes on): a malformed message lands on a
// run's subject while its model call is in flight. The reply cannot be
// recorded (the run is quarantined); it is kept like a worker's report,
// and recorded once the message is voided — the model is called once for
// the turn, not again after the repair (a second call would spend tokens
// the run never counts and drop what the first reply said).
func TestPendingWorkRetriedNeverDropped_ModelReplyOfAQuarantinedRunIsKept(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	entered := make(chan struct{}, 1)
	gate := make(chan struct{})
	m := model.NewRules("s", model.Rule{Name: "answer", Match: func(model.Request) bool { return true },
		Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
			if calls.Add(1) == 1 {
				entered <- struct{}{}
				select {
				case <-gate:
				case <-ctx.Done():
					return model.Reply{}, ctx.Err()
				}
			}
			return model.Answer("ok")(ctx, req)
		}})
	refused := make(chan struct{})
	logger := slog.New(signalLog{msg: "model answer", once: &sync.Once{}, ch: refused})
	h := newHarness(t)
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))}, runner.WithLogger(logger))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "rm", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	receive(t, "the model call entered", entered)
	ack, err := h.srv.JS.Publish(c, eventlog.Subject("rm"), []byte("garbage"))
	if err != nil {
		t.Fatal(err)
	}
	close(gate) // the reply meets the quarantine
	select {
	case <-refused:
	case <-c.Done():
		t.Fatal("the reply was never refused")
	}
	if _, err := h.srv.Log.Void(c, "rm", ack.Sequence, "published by a test", "tester", time.Now()); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "rm")
	if out.Kind != events.OutcomeCompleted || s.Turn() != 1 || calls.Load() != 1 {
		t.Fatalf("after repair: outcome %s, turns %d, model calls %d; want completed, 1 turn, 1 call", out.Kind, s.Turn(), calls.Load())
	}
}
