package demo

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

// The first hour's Ctrl-C summary: a draining runner hands a run with
// work in flight off (run_handed_off) and still records that work's
// report after it; the run stays handed off until a runner recovers it
// (docs/semantics.md §8), so the stop line names it as handed off, never "no
// run was in flight".
func TestFirstHour_StopLineKeepsARunHandedOffWhenItsWorkReportsAfterTheHandOff(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	log := eventlog.New(s.JS)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fd := &feed{w: &lockedWriter{w: &testWriter{t}}, log: log, handed: map[string]bool{}, finished: map[string]bool{}, seen: map[string]bool{}}
	done := make(chan error, 1)
	go func() { done <- fd.run(ctx, 1) }()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var head eventlog.Head
	for i, ev := range []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: AgentName, Version: "1"}, Input: "pay invoice INV-9", Runner: "r1"},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.RunHandedOff{Runner: "r1", Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyFinalAnswer, Text: "recorded by the draining runner after its hand-off", Usage: &events.Usage{InputTokens: 1, OutputTokens: 1}},
	} {
		var err error
		if _, head, err = log.Append(ctx, "pay-9", head, at.Add(time.Duration(i)*time.Second), ev); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := s.JS.Stream(ctx, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	fd.caughtUp(cctx, stream)
	ccancel()
	got := stopLine(fd.handedOff(), fd.idle(ctx, fd.waiting(), 5*time.Second), "/store")
	want := "Stopped: handed off run pay-9; the next weft dev on /store (or any runner on the same NATS) continues it, and approvals already given stay valid."
	if got != want {
		t.Errorf("stop line:\n got %s\nwant %s", got, want)
	}
	cancel()
	<-done
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) { w.t.Logf("%s", p); return len(p), nil }

// The first hour's Ctrl-C summary: of the runs with nothing in flight
// (not handed off), one whose refund waits for its settlement (its body
// stopped at its timeout, the settle window open) is said to wait for a
// settlement, and one that waits for an approval for a person — read
// from each run's history in the log.
func TestFirstHour_StopLineSaysWhatAnIdleRunWaitsFor(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	log := eventlog.New(s.JS)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fd := &feed{w: &lockedWriter{w: &testWriter{t}}, log: log, handed: map[string]bool{}, finished: map[string]bool{}, seen: map[string]bool{}}
	done := make(chan error, 1)
	go func() { done <- fd.run(ctx, 1) }()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	by := at.Add(32 * time.Second)
	req := events.Requirement{Name: "finance", Version: 1}
	start := func(input, tool, args string) []events.Event {
		return []events.Event{
			events.RunStarted{Agent: events.AgentRef{Name: AgentName, Version: "1"}, Input: input, Runner: "r1"},
			events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
			events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "call_1_1", Name: tool, Arguments: json.RawMessage(args)}}, Usage: &events.Usage{InputTokens: 1, OutputTokens: 1}},
			events.CallValidated{Action: "1/call_1_1", Turn: 1, CallID: "call_1_1", Tool: tool, Outcome: events.CallValid},
		}
	}
	for run, evs := range map[string][]events.Event{
		"refund-8": append(start("refund invoice INV-8", "refund", `{"invoice":"INV-8","amount":45}`),
			events.PolicyDecided{Action: "1/call_1_1", Context: "model", Decision: events.PolicyAllow},
			events.ActionQueued{Action: "1/call_1_1", Why: events.QueuedAllowed, Config: events.ToolConfig{Timeout: 2000, MaxAttempts: 1, SettleWithin: 30000}},
			events.AttemptFenced{Action: "1/call_1_1", Tool: "refund", Attempt: 1, Incarnation: 1, Timeout: 2000, MaxAttempts: 1, SettleWithin: 30000},
			events.AttemptLost{Action: "1/call_1_1", Attempt: 1, Cause: events.CauseTimedOut, Evidence: "attempt 1 timed out after 2000 ms", Next: events.NextSettle, SettleBy: &by}),
		"pay-7": append(start("pay invoice INV-7", "send_payment", `{"invoice":"INV-7","amount":1200}`),
			events.PolicyDecided{Action: "1/call_1_1", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req},
			events.ApprovalRequested{Action: "1/call_1_1", Revision: 1, Requirement: req, Why: events.AskPolicy}),
	} {
		var head eventlog.Head
		for i, ev := range evs {
			var err error
			if _, head, err = log.Append(ctx, run, head, at.Add(time.Duration(i)*time.Second), ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	stream, err := s.JS.Stream(ctx, eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	fd.caughtUp(cctx, stream)
	ccancel()
	got := stopLine(fd.handedOff(), fd.idle(ctx, fd.waiting(), 5*time.Second), "/store")
	want := "Stopped: no run was in flight; nothing handed off." +
		" Run pay-7 waits for a person: the next weft dev on /store (or any runner on the same NATS) continues it when answered." +
		" Run refund-8 waits for a settlement: the next weft dev on /store (or any runner on the same NATS) continues it when it comes, or when its window closes."
	if got != want {
		t.Errorf("stop line:\n got %s\nwant %s", got, want)
	}
	cancel()
	<-done
}

// The first hour's Ctrl-C summary: a waiting run whose history cannot be
// read (here: the reads' context is already spent, as one shared 5 s
// context was after a slow read) is said to be unread — never "with
// nothing in flight", which a run that waits for a person is not. Before,
// every such run was classed as waiting for nothing.
func TestFirstHour_StopLineSaysARunItCouldNotReadIsUnread(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	log := eventlog.New(s.JS)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := log.Append(ctx, "pay-7", eventlog.Head{}, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC),
		events.RunStarted{Agent: events.AgentRef{Name: AgentName, Version: "1"}, Input: "pay invoice INV-7", Runner: "r1"}); err != nil {
		t.Fatal(err)
	}
	fd := &feed{log: log}
	spent, stop := context.WithCancel(context.Background())
	stop()
	got := stopLine(nil, fd.idle(spent, []string{"pay-7", "pay-8"}, 5*time.Second), "/store")
	want := "Stopped: no run was in flight; nothing handed off." +
		" 2 runs (pay-7, pay-8) could not be read now, so what they wait for is not said (see weft show): the next weft dev on /store (or any runner on the same NATS) continues them."
	if got != want {
		t.Errorf("stop line:\n got %s\nwant %s", got, want)
	}
	// Each run is read within a time of its own: readable, it is sorted.
	if ir := fd.idle(ctx, []string{"pay-7"}, 5*time.Second); len(ir.other) != 1 || len(ir.unread) != 0 {
		t.Errorf("a readable run waiting for nothing: %+v, want other", ir)
	}
}
