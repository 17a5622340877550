package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// blindJS is lossyJS whose armed append, when its acknowledgement is
// lost, also makes the event stream stop answering direct gets
// (AllowDirect off, through the server's own stream update) until see is
// called: the runner cannot read the run to learn whether its decision
// landed, and can once the test lets it.
type blindJS struct {
	*lossyJS
	t     *testing.T
	admin jetstream.JetStream // the test's own, to update the stream
}

func (b *blindJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := b.lossyJS.PublishMsg(ctx, m, opts...)
	if errors.Is(err, nats.ErrConnectionClosed) && strings.HasPrefix(m.Subject, "weft.ev.") {
		b.direct(false)
	}
	return ack, err
}

// see turns the event stream's direct gets on again.
func (b *blindJS) see() { b.direct(true) }

func (b *blindJS) direct(on bool) {
	c, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	s, err := b.admin.Stream(c, eventlog.Stream)
	if err != nil {
		b.t.Error(err)
		return
	}
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = on
	if _, err := b.admin.UpdateStream(c, cfg); err != nil {
		b.t.Error(err)
	}
}

// newBlindRunner runs a runner of a on a blindJS until the test ends.
func newBlindRunner(t *testing.T, h *harness, a *agent.Agent) *blindJS {
	t.Helper()
	js := &blindJS{lossyJS: &lossyJS{JetStream: h.srv.JS}, t: t, admin: h.srv.JS}
	h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithLease(2*1e9))
	return js
}

// docs/semantics.md §8, "A run can always be answered", and docs/protocol.md's
// outcome_unknown: an approval whose append landed, its acknowledgement
// lost, on a run the runner then cannot read, is answered outcome_unknown
// (kept for its command id: the same approval again answers it again) —
// never unavailable ("not applied — retry"), whose retry would be refused
// already_answered for the approval's own answer. Once the run can be read
// the approved tool runs once and the run completes.
func TestSemantics8_UnknownAppendOutcomeIsNotAnsweredNotApplied(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	js := newBlindRunner(t, h, a)
	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: "ru8", Agent: "desk", Input: "x"})
	s := h.waitStatus("ru8", aggregate.StatusSuspended)
	act := s.Actions()[0]
	js.armed.Store(true)
	approve := api.ApproveRequest{CommandID: "a", Run: "ru8", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}
	_, err := h.client.Approve(c, approve)
	if weft.ErrorCode(err) != weft.CodeOutcomeUnknown {
		js.see()
		t.Fatalf("approve whose decision landed, its ack lost and the run unreadable: %v, want outcome_unknown", err)
	}
	js.see()
	if _, err := h.client.Approve(c, approve); weft.ErrorCode(err) != weft.CodeOutcomeUnknown {
		t.Fatalf("the same approval (same command id) again: %v, want outcome_unknown again", err)
	}
	s, out := finished(t, h, "ru8")
	if out.Kind != events.OutcomeCompleted || s.Actions()[0].State != aggregate.ActionSucceeded || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, action %s, starts %d", out.Kind, s.Actions()[0].State, b.starts.Load())
	}
}

// docs/semantics.md §8, "A run can always be answered", for a start: a start
// whose
// run_started landed, its acknowledgement lost, on a run the runner then
// cannot read, is answered outcome_unknown — never unavailable, whose
// retry would be refused already_started for the start's own run. Once
// the run can be read it is driven to its end by the runner that started
// it.
func TestSemantics8_StartOfUnknownOutcomeIsNotAnsweredNotApplied(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok"))
	a := build(t, m, nil, policy.Func(allow))
	h := newHarness(t)
	js := newBlindRunner(t, h, a)
	c := ctx(t)
	js.armed.Store(true)
	start := api.StartRequest{CommandID: "s", Run: "rs8", Agent: "desk", Input: "x"}
	var err error
	for {
		// Until the runner owns the run's partition the start is
		// answered a retryable code and nothing is appended.
		_, err = h.client.Start(c, start)
		if !js.armed.Load() || !weft.ErrorCode(err).Retryable() || c.Err() != nil {
			break
		}
	}
	js.see()
	if weft.ErrorCode(err) != weft.CodeOutcomeUnknown {
		t.Fatalf("start whose run_started landed, its ack lost and the run unreadable: %v, want outcome_unknown", err)
	}
	if _, out := finished(t, h, "rs8"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", out.Kind)
	}
}
