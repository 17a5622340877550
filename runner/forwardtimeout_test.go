package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

// heartbeat keeps runner id's liveness key alive until the test ends, as a
// live runner does.
func (h *harness) heartbeat(id string) {
	h.t.Helper()
	live, err := h.srv.JS.KeyValue(ctx(h.t), runner.RunnersBucket)
	if err != nil {
		h.t.Fatal(err)
	}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			_, _ = live.Put(context.Background(), id, []byte(time.Now().UTC().Format(time.RFC3339Nano)))
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	h.t.Cleanup(func() { close(done); <-stopped })
}

// A forwarded command whose driver does not answer in time may or may not
// have been applied: its answer is
// outcome_unknown, kept for the command id, so a retry with the same
// command id gets that first answer again — never a different refusal
// (here the driver applied the approval late, and answers a second
// forward already_answered).
func TestForwardTimeout_RetryWithTheSameCommandIDGetsTheFirstAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.unbalanced = true // the run's partition stays with the stand-in
	a := build(t, model.NewScripted("s", model.Answer("unused")), []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove), agent.WithCommandTimeout(500*time.Millisecond))
	var s aggregate.State
	hd := appendDecided(t, h, "ft", &s, aggregate.Start{Run: "ft", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "slow"})
	call := payCall(500, "ok")
	call.ID = "call_1_1"
	hd = appendDecidedAt(t, h, "ft", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	appendDecidedAt(t, h, "ft", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments,
		Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 1}}}}})
	act := s.Actions()[0]

	// "slow" is alive and drives the run; it takes forwarded commands and
	// answers the first one only after a long time, the next at once.
	h.heartbeat("slow")
	h.owns("slow", "ft") // it owns the run's partition
	answered := make(chan struct{})
	forwards := 0
	sub, err := h.srv.Conn.Subscribe(runner.ForwardPrefix+"slow.cmd", func(m *nats.Msg) {
		forwards++
		if forwards == 1 {
			go func() {
				<-answered
				_ = m.Respond([]byte(`{"schema":1,"run":"ft","status":"working"}`))
			}()
			return
		}
		b, _ := jsonMarshal(api.ErrorReply{Schema: api.Schema, Error: &weft.Error{Code: weft.CodeAlreadyAnswered, Reason: "approve", Message: "answered"}})
		_ = m.Respond(b)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	defer close(answered)
	h.startRunner([]*agent.Agent{a})

	req := api.ApproveRequest{Schema: api.Schema, CommandID: "same", Run: "ft", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"}
	body, _ := jsonMarshal(req)
	send := func() []byte {
		t.Helper()
		m, err := h.srv.Conn.Request("weft.api."+api.EndpointApprove, body, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m.Data
	}
	first := send()
	if !bytes.Contains(first, []byte(`"outcome_unknown"`)) {
		t.Fatalf("first answer %s, want outcome_unknown", first)
	}
	again := send()
	if !bytes.Equal(first, again) {
		t.Fatalf("a retry with the same command id answered %s, the first answer was %s", again, first)
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
