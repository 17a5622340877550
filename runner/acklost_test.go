package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// lossyJS is the runner's real JetStream, except that when armed, the next
// append to the event log lands on the server but its acknowledgement is
// lost to a dropped connection (a non-retryable error: outcome unknown),
// and the first taskFails task publishes and evFails event appends fail
// without publishing.
type lossyJS struct {
	jetstream.JetStream
	armed     atomic.Bool
	taskFails atomic.Int64 // task publishes that fail (nothing published)
	evFails   atomic.Int64 // event appends that fail (nothing published)
}

func (l *lossyJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	if strings.HasPrefix(m.Subject, "weft.task.") && l.taskFails.Add(-1) >= 0 {
		return nil, errors.Join(errors.New("JetStream did not answer"), nats.ErrNoResponders)
	}
	if strings.HasPrefix(m.Subject, "weft.ev.") && l.evFails.Add(-1) >= 0 {
		return nil, errors.Join(errors.New("the connection dropped before the append was sent"), nats.ErrConnectionClosed)
	}
	ack, err := l.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && strings.HasPrefix(m.Subject, "weft.ev.") && l.armed.CompareAndSwap(true, false) {
		return nil, errors.Join(errors.New("the connection dropped before the acknowledgement"), nats.ErrConnectionClosed)
	}
	return ack, err
}

// ARCHITECTURE "append first, then act" with a lost acknowledgement: an
// approval whose append (answer + queue + fence) landed but whose ack was
// lost is re-read: the runner finds its own decision in the log, answers
// the approval as applied (the same answer again for the same command id)
// and dispatches the committed fence at once, so the approved tool runs
// exactly once (scenario 15) — instead of answering unavailable and leaving
// a fence nobody dispatches until the tool timeout declares a body that
// never ran uncertain.
func TestScenario15_ApprovalWhoseAckWasLost(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	js := &lossyJS{JetStream: h.srv.JS}
	nc := h.srv.Connect()
	h.runOn(nc, js, []*agent.Agent{a}, runner.WithLease(2*1e9))

	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "r15l", Agent: "desk", Input: "x"})
	s := h.waitStatus("r15l", aggregate.StatusSuspended)
	act := s.Actions()[0]
	js.armed.Store(true)
	approve := api.ApproveRequest{CommandID: "a", Run: "r15l", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}
	if _, err := h.client.Approve(c, approve); err != nil {
		t.Fatalf("approve whose decision landed with a lost ack: %v", err)
	}
	if _, err := h.client.Approve(c, approve); err != nil {
		t.Fatalf("the same approval (same command id) again: %v, want the same answer", err)
	}
	s, out := finished(t, h, "r15l")
	if out.Kind != events.OutcomeCompleted || s.Actions()[0].State != aggregate.ActionSucceeded || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, action %s, starts %d", out.Kind, s.Actions()[0].State, b.starts.Load())
	}
}

// "Append first, then act" when the act fails: a fenced attempt whose task
// could not be published (JetStream did not answer) is published again
// soon, so the body runs once and the run completes — instead of nobody
// ever publishing it and the tool timeout (here infinite) never coming.
func TestScenario15_TaskPublishFailsOnce(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{tools.WithTimeout(b.tool(), tools.Infinity())}, policy.Func(allow))
	h := newHarness(t)
	js := &lossyJS{JetStream: h.srv.JS}
	js.taskFails.Store(2)
	h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithLease(2*1e9))
	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "r15d", Agent: "desk", Input: "x"})
	s, out := finished(t, h, "r15d")
	if out.Kind != events.OutcomeCompleted || s.Actions()[0].State != aggregate.ActionSucceeded || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, action %s, starts %d", out.Kind, s.Actions()[0].State, b.starts.Load())
	}
}
