package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// unreadableJS is lossyJS whose event-log reads go through their own
// connection (the first one Conn returns: the event log's reader), which
// closes when the armed append's acknowledgement is lost: the runner's
// re-read of the run fails, so the run stays marked stale.
type unreadableJS struct {
	*lossyJS
	reads *nats.Conn
	given atomic.Bool
}

func (u *unreadableJS) Conn() *nats.Conn {
	if u.given.CompareAndSwap(false, true) {
		return u.reads
	}
	return u.lossyJS.Conn()
}

func (u *unreadableJS) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := u.lossyJS.PublishMsg(ctx, m, opts...)
	if errors.Is(err, nats.ErrConnectionClosed) && strings.HasPrefix(m.Subject, "weft.ev.") {
		u.reads.Close()
	}
	return ack, err
}

// docs/semantics.md §8: decisions follow the log. A run held in memory whose
// last
// append's outcome is unknown (its acknowledgement lost) and whose re-read
// failed is marked stale: the next command on it is not decided on that
// memory — which still shows the request the lost append answered — but
// after a re-read, and while the log cannot be read it is answered
// runner_busy: no approver's answer is judged, no policy re-run, on a
// state behind the log.
func TestSemantics8_ACommandOnAStaleRunIsDecidedOnTheLog(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	var reruns atomic.Int64
	p := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
		if _, ok := policy.Reviewer(ctx); ok {
			reruns.Add(1)
		}
		return approvalAbove(ctx, a)
	})
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(1, "hang")))
	a := build(t, m, []tools.Tool{b.tool()}, p)
	h := newHarness(t)
	js := &unreadableJS{lossyJS: &lossyJS{JetStream: h.srv.JS}, reads: h.srv.Connect()}
	h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithLease(2*1e9))

	c := ctx(t)
	if err := retrying(c, func() error {
		_, err := h.client.Start(c, api.StartRequest{Run: "st1", Agent: "desk", Input: "x"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The payment awaits approval while the other body hangs: the run is
	// held in memory (work in flight).
	s := h.waitFor("st1", "an approval pending beside a running body", func(s aggregate.State) bool {
		return len(aggregate.Status(s).Approvals) == 1 && b.starts.Load() == 1
	})
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	js.armed.Store(true)
	approve := api.ApproveRequest{CommandID: "a", Run: "st1", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}
	if _, err := h.client.Approve(c, approve); weft.ErrorCode(err) != weft.CodeOutcomeUnknown {
		t.Fatalf("approve whose append landed with a lost ack and whose re-read failed: %v, want outcome_unknown", err)
	}
	before := reruns.Load()
	approve.CommandID = "b"
	_, err := h.client.Approve(c, approve)
	if code := weft.ErrorCode(err); code != weft.CodeRunnerBusy {
		t.Errorf("the approval again on the stale run: %v (code %s), want runner_busy", err, code)
	}
	if n := reruns.Load() - before; n != 0 {
		t.Errorf("the policy was re-run %d times for a request the log had answered", n)
	}
}
