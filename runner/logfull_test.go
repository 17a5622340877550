package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/tools"
)

// eventsInfo returns WEFT_EVENTS's state.
func (h *harness) eventsInfo() *jetstream.StreamInfo {
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
	return info
}

// The log is never silently discarded (docs/semantics.md §8: the
// decision follows from the recorded events alone): WEFT_EVENTS at a limit
// an operator set refuses a new append instead of dropping the run's first
// events. A command that reaches the full log is answered unavailable and
// not applied, the history is intact and the run still waits for the
// answer; once the limit is raised the same command applies, and the tool
// runs once.
func TestFullLogRefusesAppendsAndDiscardsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("done"))
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "full1", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	act := h.waitStatus("full1", aggregate.StatusSuspended).Actions()[0]
	before := h.eventsInfo().State

	// The operator caps the stream at what it holds: a limit only, the
	// discard policy stays provision's.
	capped := provision.EventsConfig()
	capped.MaxMsgs = int64(before.Msgs)
	if _, err := h.srv.JS.UpdateStream(ctx(t), capped); err != nil {
		t.Fatal(err)
	}
	req := api.ApproveRequest{CommandID: "full-approve", Run: "full1", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"}
	if _, err := h.client.Approve(ctx(t), req); weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Fatalf("approve on a full log: %v, want unavailable", err)
	}
	if after := h.eventsInfo().State; after.FirstSeq != before.FirstSeq || after.Msgs != before.Msgs || after.LastSeq != before.LastSeq {
		t.Fatalf("log changed while full: first %d→%d, msgs %d→%d, last %d→%d", before.FirstSeq, after.FirstSeq, before.Msgs, after.Msgs, before.LastSeq, after.LastSeq)
	}
	if a := h.state("full1").Actions()[0]; a.State != aggregate.ActionAwaitingApproval || b.starts.Load() != 0 {
		t.Fatalf("action %s, starts %d: the refused approve was applied", a.State, b.starts.Load())
	}

	if _, err := h.srv.JS.UpdateStream(ctx(t), provision.EventsConfig()); err != nil {
		t.Fatal(err)
	}
	if err := retrying(ctx(t), func() error { _, err := h.client.Approve(ctx(t), req); return err }); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "full1"); out.Kind != events.OutcomeCompleted || b.starts.Load() != 1 {
		t.Fatalf("outcome %s, starts %d", events.DescribeOutcome(out), b.starts.Load())
	}
}
