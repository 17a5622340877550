package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/tools"
)

// schedules counts the durable timer schedules of run in WEFT_TIMERS.
func schedules(t *testing.T, js jetstream.JetStream, run string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), timer.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(timer.SubjectArm+"."+run+".>"))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestFinishedRunLeavesNoTimerBehind (docs/adr/0014): a run that
// waited for an approval (whose expiry is armed durably) and then ran its
// tool (whose timeout guarded the body) leaves no durable schedule once it
// finished: nothing wakes it later. Before, every tool call armed a
// durable tool timeout that was never disarmed and fired after the run had
// finished, reloading it, and the approval's expiry stayed armed for its
// seven days.
func TestFinishedRunLeavesNoTimerBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.CallTools(payCall(5, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "tl", Agent: "desk", Input: "pay"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("tl", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	if n := waitSchedules(t, h, "tl", func(n uint64) bool { return n == 1 }); n != 1 {
		t.Fatalf("a suspended run has %d durable schedules, want its approval expiry", n)
	}
	if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a1", Run: "tl", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("tl", aggregate.StatusFinished)
	if n := waitSchedules(t, h, "tl", func(n uint64) bool { return n == 0 }); n != 0 {
		t.Fatalf("the finished run still has %d durable schedules", n)
	}
}

func waitSchedules(t *testing.T, h *harness, run string, ok func(uint64) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := schedules(t, h.srv.JS, run)
		if ok(n) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLateWakeOfAFinishedRunReadsNothing (docs/adr/0014): a
// timer firing that reaches the runner after the run it wakes finished —
// one armed before it was disarmed — is acked without reading the run (no
// direct get of its log or its snapshot).
func TestLateWakeOfAFinishedRunReadsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(5, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.AlwaysAllow(), agent.WithToolTimeout(tools.After(time.Minute)))
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "late", Agent: "desk", Input: "pay"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("late", aggregate.StatusFinished)
	time.Sleep(200 * time.Millisecond) // the driver key deleted
	var reads atomic.Int64
	spy := h.srv.Connect()
	sub, err := spy.Subscribe("$JS.API.DIRECT.GET.>", func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte("late")) {
			reads.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	// A firing as the server publishes it.
	body, _ := json.Marshal(timer.Fired{Schema: timer.Schema, Run: "late", Key: "tool_timeout-1_2Fcall_5F1_5F1-1-0-0", At: time.Now()})
	if _, err := h.srv.JS.Publish(c, timer.SubjectDue+".late", body); err != nil {
		t.Fatal(err)
	}
	cons, err := h.srv.JS.Consumer(c, timer.Stream, timer.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(c)
		if err != nil {
			t.Fatal(err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the firing was not acked: %+v", info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("the late wake of a finished run made %d direct gets of it", n)
	}
}
