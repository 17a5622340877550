package runner_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

// Scenario 13 over the wire (docs/protocol/41-tasks.md, outcome oversize):
// an external worker's oversize report is judged by its bytes. One without
// bytes (or not over the limit) is refused invalid_request and records
// nothing — never a fabricated output the model would read; one with a huge
// size fails the run output_encoding_failed naming that size, without the
// runner allocating it.
func TestScenario13_OversizeReportOverTheWire(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow), agent.WithMaxResultBytes(100))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a}, runner.WithExternalTools("pay"))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "r13w", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("r13w", "a fenced attempt", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && acts[0].State == aggregate.ActionRunning
	})
	act := s.Actions()[0]
	report := func(id string, bytes int64) error {
		rep := api.Report{Schema: api.Schema, CommandID: id, Run: "r13w", Action: act.ID, Attempt: 1, Incarnation: 1, Outcome: api.OutcomeOversize, Bytes: bytes}
		_, err := runnerReport(c, h, rep)
		return err
	}
	for i, n := range []int64{0, 100} {
		if err := report(string(rune('a'+i)), n); weft.ErrorCode(err) != weft.CodeInvalidRequest {
			t.Fatalf("oversize report with bytes %d: %v, want invalid_request", n, err)
		}
	}
	if a2, _ := h.state("r13w").Action(act.ID); a2.State != aggregate.ActionRunning {
		t.Fatalf("a refused oversize report changed the action to %s %s", a2.State, a2.Content)
	}
	if err := report("c", 1<<40); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "r13w")
	if out.Kind != events.OutcomeFailed || out.Reason != events.ReasonOutputEncodingFailed || out.Used != 1<<40 || s.Actions()[0].State != aggregate.ActionFaulted {
		t.Fatalf("outcome %+v, action %s", out, s.Actions()[0].State)
	}
}

// runnerReport sends a worker's report on weft.api.report, as a worker
// in any language does.
func runnerReport(ctx context.Context, h *harness, rep api.Report) (api.Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, _ := json.Marshal(rep)
	m, err := h.srv.Conn.RequestWithContext(ctx, api.ReportSubject, b)
	if err != nil {
		return api.Reply{}, err
	}
	var er api.ErrorReply
	if err := json.Unmarshal(m.Data, &er); err != nil {
		return api.Reply{}, err
	}
	if er.Error != nil {
		return api.Reply{}, er.Error
	}
	var r api.Reply
	return r, json.Unmarshal(m.Data, &r)
}

// Scenario 37's rule (one driver, no second effect) at a start: a command
// for a run that arrives the moment its RunStarted is committed — here a
// cancel sent from the run_started telemetry, which is emitted right after
// the commit — waits for the start to finish instead of finding the run
// "driven by this runner but not in memory" and recovering it (a second
// incarnation, a lost model turn, two in-memory drivers).
func TestScenario37_CommandRightAfterStartDoesNotRecover(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok"))
	a := build(t, m, nil, policy.Func(allow))
	h := newHarness(t)
	var once sync.Once
	handler := func(ctx context.Context, ev telemetry.Event) {
		if ev.Name != telemetry.RunStarted {
			return
		}
		once.Do(func() {
			c, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, _ = h.client.Cancel(c, api.CancelRequest{CommandID: "early", Run: "r37s"})
		})
	}
	h.startRunner([]*agent.Agent{a}, runner.WithTelemetry(telemetry.New(telemetry.WithHandler(handler))))
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "r37s", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s, _ := finished(t, h, "r37s")
	if s.Incarnation() != 1 {
		t.Fatalf("the run was recovered right after its start: incarnation %d, runner %s", s.Incarnation(), s.Runner())
	}
}

// Scenario 20 with docs/semantics.md §4's order of checks: the proof is checked
// before the expiry, and a refused proof changes nothing. An approval with
// a refused proof, sent after the request's expiry (by the recorded clock)
// but before anyone applied it, answers proof_refused and writes nothing
// (before: approval_expired, with the expiry recorded on its behalf).
func TestScenario20_ProofBeforeExpiry(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	frozen := time.Now()
	clock := func() time.Time { return frozen.Add(time.Duration(offset.Load())) }
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "done", Match: func(r model.Request) bool { _, ok := model.ResultOf(r, "pay"); return ok }, Step: model.Answer("ok")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a}, runner.WithClock(clock))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "r20p", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitStatus("r20p", aggregate.StatusSuspended)
	act := s.Actions()[0]
	version := s.Version()
	offset.Store(int64(8 * 24 * time.Hour)) // past the 7-day default expiry

	_, err := h.client.Approve(c, api.ApproveRequest{CommandID: "bad", Run: "r20p", Action: act.ID, Revision: act.Request.Revision, Approver: "not-an-approver", Credential: "mallory"})
	if weft.ErrorCode(err) != weft.CodeProofRefused {
		t.Fatalf("refused proof on a due expiry: %v, want proof_refused", err)
	}
	if v := h.state("r20p").Version(); v != version {
		t.Fatalf("a refused proof wrote %d events", v-version)
	}
}

// Scenario 9's rule for an unreadable reply (non-retryable →
// failed(model_failed)) when the reply cannot even be recorded: a final
// answer larger than the store's maximum message is decided as an
// invalid_reply failure instead of leaving the run waiting forever for a
// turn whose reply was dropped.
func TestScenario09_ReplyTooLargeToRecord(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer(strings.Repeat("x", natsnode.MaxPayload+1)))
	h := one(t, build(t, m, nil, policy.Func(allow)), "r09big", "x")
	_, out := finished(t, h, "r09big")
	if out.Kind != events.OutcomeFailed || out.Reason != events.ReasonModelFailed {
		t.Fatalf("outcome %s(%s), want failed(model_failed)", out.Kind, out.Reason)
	}
}
