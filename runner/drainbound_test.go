package runner_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 graceful drain: a SIGTERMed runner
// is done within its drain window even while a command it serves waits on
// a forward to a driver that does not answer (paused): at the end of the
// window the command ends (outcome_unknown: it may have been applied), so
// the runner returns and its connection drains at once.
func TestDrainEndsWithinItsWindow_CommandWaitingOnAForward(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true // the run's partition stays with the stand-in
	a := build(t, model.NewScripted("s", model.Answer("unused")), []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove))
	var s aggregate.State
	hd := appendDecided(t, h, "db", &s, aggregate.Start{Run: "db", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "paused"})
	call := payCall(500, "ok")
	call.ID = "call_1_1"
	hd = appendDecidedAt(t, h, "db", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	appendDecidedAt(t, h, "db", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments,
		Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 1}}}}})
	act := s.Actions()[0]
	// "paused" is alive (its key is put) but answers nothing.
	h.heartbeat("paused")
	h.owns("paused", "db") // it owns the run's partition
	taken := make(chan struct{}, 1)
	sub, err := h.srv.Conn.Subscribe(runner.ForwardPrefix+"paused.cmd", func(*nats.Msg) {
		select {
		case taken <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	_, stop := h.startRunner([]*agent.Agent{a}, runner.WithDrainWindow(time.Second))
	body, _ := json.Marshal(api.ApproveRequest{Schema: api.Schema, CommandID: "x", Run: "db", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
	replied := make(chan *nats.Msg, 1)
	go func() {
		m, _ := h.srv.Conn.Request("weft.api."+api.EndpointApprove, body, time.Minute)
		replied <- m
	}()
	select {
	case <-taken:
	case <-time.After(20 * time.Second):
		t.Fatal("the approve was never forwarded to the driver")
	}
	began := time.Now()
	stop() // SIGTERM-like: returns when Run returned
	var m *nats.Msg
	select {
	case m = <-replied:
	case <-time.After(30 * time.Second):
		t.Fatal("the approve waiting on the forward never ended")
	}
	// A main drains its connection after Run: that waits for the command
	// handlers, so the command must have ended with the window.
	drained := time.Since(began)
	// The forward alone would wait 10 s (twice the command timeout); the
	// window is 1 s. Generous slack for a loaded machine, well below 10 s.
	if drained > 6*time.Second {
		t.Fatalf("the command waiting on a forward ended %s after SIGTERM, with a 1 s drain window", drained)
	}
	if m == nil || !json.Valid(m.Data) {
		t.Fatalf("no reply to the approve")
	}
	var er api.ErrorReply
	_ = json.Unmarshal(m.Data, &er)
	if er.Error == nil || er.Error.Code != "outcome_unknown" {
		t.Fatalf("approve answered %s, want outcome_unknown", m.Data)
	}
}
