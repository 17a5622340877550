package chaos

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_StrandedCheckNamesARunThatDoesNotMoveByItself: the check
// run_stranded (docs/semantics.md §8, recovery: a run whose driver is gone
// is taken over, pending work is never dropped) names a run that needs no
// person and has not moved for strandedBound after its last move and its
// next due time — once — and never a finished run or one that waits only
// for a person (aggregate.Idle). No runner runs here: the busy run is
// stranded as the runs were when no runner consumed the timers' firings.
func TestSemantics8_StrandedCheckNamesARunThatDoesNotMoveByItself(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	ctx := context.Background()
	perRun, _ := projtest.Histories(7, 200)
	var finished, idle, busy []events.Recorded
	var last time.Time // the latest time any history names
	for _, h := range perRun {
		st := aggregate.Fold(h)
		_, done := st.Finished()
		switch {
		case done && finished == nil:
			finished = h
		case !done && aggregate.Idle(st) && idle == nil:
			idle = h
		case !done && !aggregate.Idle(st) && len(aggregate.Pending(st).Children) == 0 && busy == nil:
			busy = h
		}
	}
	if finished == nil || idle == nil || busy == nil {
		t.Fatalf("the generated histories lack a finished (%v), an idle (%v) or a busy (%v) run", finished != nil, idle != nil, busy != nil)
	}
	for _, h := range [][]events.Recorded{finished, idle, busy} {
		var head eventlog.Head
		for _, r := range h {
			var err error
			if _, head, err = s.Log.Append(ctx, r.Run, head, r.At, r.Event); err != nil {
				t.Fatalf("append %s v%d: %v", r.Run, r.Version, err)
			}
			last = maxTime(last, r.At)
		}
		for _, tm := range aggregate.Pending(aggregate.Fold(h)).Timers {
			last = maxTime(last, tm.At)
		}
	}
	h := &harness{cfg: Config{Lease: time.Second}, js: s.JS, evlog: s.Log}
	runs := []string{finished[0].Run, idle[0].Run, busy[0].Run}
	seen := map[string]*motion{}
	t0 := last.Add(time.Hour) // after every due time of the histories
	bound := h.strandedBound()
	for _, now := range []time.Time{t0, t0.Add(bound)} {
		h.strandedOnce(ctx, runs, func() time.Time { return now }, seen)
		if len(h.violations) != 0 {
			t.Fatalf("at %v after the first read (the bound %v not passed): %v", now.Sub(t0), bound, h.violations)
		}
	}
	for range 2 { // reported once
		h.strandedOnce(ctx, runs, func() time.Time { return t0.Add(bound + strandedPoll) }, seen)
	}
	if len(h.violations) != 1 || h.violations[0].Check != checkStranded || h.violations[0].Run != busy[0].Run {
		t.Fatalf("violations %v, want one %s of run %s", h.violations, checkStranded, busy[0].Run)
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// docs/semantics.md §8 (pending work is retried, never dropped): a run
// that waits for a person but has an approval expiry pending is not at
// rest — the expiry is the runtime's to fire — so run_stranded names it
// once strandedBound passed after the expiry, and not before.
func TestSemantics8_StrandedCheckNamesARunWhoseExpiryDoesNotFire(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	ctx := context.Background()
	at := projtest.Base()
	exp := at.Add(time.Minute)
	req := events.Requirement{Name: "finance", Version: 1}
	waiting := []events.Recorded{
		{Run: "waiting-1", Version: 1, At: at, Event: events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "x", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4, ApprovalExpiry: 60000}, Runner: "runner-1"}},
		{Run: "waiting-1", Version: 2, At: at, Event: events.ModelRequested{Turn: 1, Incarnation: 1}},
		{Run: "waiting-1", Version: 3, At: at, Event: events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "c1", Name: "pay_invoice", Arguments: json.RawMessage(`{}`)}}}},
		{Run: "waiting-1", Version: 4, At: at, Event: events.CallValidated{Action: "1/c1", Tool: "pay_invoice", Outcome: events.CallValid}},
		{Run: "waiting-1", Version: 5, At: at, Event: events.PolicyDecided{Action: "1/c1", Context: "model", Decision: events.PolicyRequireApproval, Requirement: &req}},
		{Run: "waiting-1", Version: 6, At: at, Event: events.ApprovalRequested{Action: "1/c1", Revision: 1, Requirement: req, Expires: &exp, Why: "policy"}},
	}
	st := aggregate.Fold(waiting)
	if w := aggregate.Pending(st); !aggregate.Idle(st) || len(w.Timers) != 1 || w.Timers[0].Kind != aggregate.TimerApprovalExpiry {
		t.Fatalf("the run's work %+v (idle %v), want only its approval's expiry", w, aggregate.Idle(st))
	}
	appendAll(t, s.Log, waiting)
	expires := aggregate.Pending(aggregate.Fold(waiting)).Timers[0].At
	h := &harness{cfg: Config{Lease: time.Second}, js: s.JS, evlog: s.Log}
	bound := h.strandedBound()
	seen := map[string]*motion{}
	runs := []string{waiting[0].Run}
	for _, now := range []time.Time{expires.Add(-time.Hour), expires.Add(bound)} {
		h.strandedOnce(ctx, runs, fixed(now), seen)
		if len(h.violations) != 0 {
			t.Fatalf("at the expiry %+v: %v", now.Sub(expires), h.violations)
		}
	}
	h.strandedOnce(ctx, runs, fixed(expires.Add(bound+strandedPoll)), seen)
	if len(h.violations) != 1 || h.violations[0].Run != waiting[0].Run {
		t.Fatalf("violations %v, want one %s of run %s", h.violations, checkStranded, waiting[0].Run)
	}
}

// docs/semantics.md §8: a run whose only work is a delegation is judged by
// its child run. The parent owes the child's start: a child that does not
// exist leaves the parent stranded. A child started and not finished is
// read and checked itself, and the parent is not named meanwhile. Once
// the child finished, the parent owes its settlement within the bound of
// the last poll that saw it waiting.
func TestSemantics8_StrandedCheckJudgesADelegatingRunByItsChild(t *testing.T) {
	s := natstest.Start(t, natstest.WithAssets(runner.Assets(time.Second)...))
	ctx := context.Background()
	at := projtest.Base()
	parent := "parent-1"
	child := aggregate.ChildRunID(parent, "1/c1")
	researcher := events.AgentRef{Name: "researcher", Version: "1"}
	ph := []events.Recorded{
		{Run: parent, Version: 1, At: at, Event: events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "x", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4, MaxChildren: 4, MaxDepth: 2}, Runner: "runner-1"}},
		{Run: parent, Version: 2, At: at, Event: events.ModelRequested{Turn: 1, Incarnation: 1}},
		{Run: parent, Version: 3, At: at, Event: events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "c1", Name: "researcher", Arguments: json.RawMessage(`{"input":"find it"}`)}}}},
		{Run: parent, Version: 4, At: at, Event: events.CallValidated{Action: "1/c1", Tool: "researcher", Outcome: events.CallValid, Agent: &researcher}},
		{Run: parent, Version: 5, At: at, Event: events.PolicyDecided{Action: "1/c1", Context: "model", Decision: events.PolicyAllow}},
		{Run: parent, Version: 6, At: at, Event: events.ChildStarted{Action: "1/c1", Child: child, Agent: researcher, Input: "find it", Depth: 1, FamilyTurns: 6, MaxDepth: 2}},
	}
	st := aggregate.Fold(ph)
	if w := aggregate.Pending(st); len(w.Children) != 1 || w.Model != nil || w.Resolve != nil || len(w.Dispatch) != 0 || len(w.Timers) != 0 {
		t.Fatalf("the parent's work %+v, want its child only", w)
	}
	appendAll(t, s.Log, ph)
	h := &harness{cfg: Config{Lease: time.Second}, js: s.JS, evlog: s.Log}
	bound := h.strandedBound()
	t0 := at.Add(time.Hour)
	runs := []string{parent}

	// The child was never started: the parent is named.
	seen := map[string]*motion{}
	h.strandedOnce(ctx, runs, fixed(t0), seen)
	h.strandedOnce(ctx, runs, fixed(t0.Add(bound+strandedPoll)), seen)
	if len(h.violations) != 1 || h.violations[0].Run != parent {
		t.Fatalf("child not started: violations %v, want one of the parent %s", h.violations, parent)
	}

	// The child runs (and never moves): the child is named, the parent not.
	ch := []events.Recorded{
		{Run: child, Version: 1, At: at, Event: events.RunStarted{Agent: researcher, Input: "find it", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}, Runner: "runner-1", Parent: &events.Parent{Run: parent, Action: "1/c1", Depth: 1, FamilyTurns: 6, MaxDepth: 2}}},
		{Run: child, Version: 2, At: at, Event: events.ModelRequested{Turn: 1, Incarnation: 1}},
	}
	appendAll(t, s.Log, ch)
	h.violations = nil
	seen = map[string]*motion{}
	var last time.Time
	for i := range 3 {
		last = t0.Add(time.Duration(i) * (bound + strandedPoll))
		h.strandedOnce(ctx, runs, fixed(last), seen)
	}
	if len(h.violations) != 1 || h.violations[0].Run != child {
		t.Fatalf("child running: violations %v, want one of the child %s", h.violations, child)
	}

	// The child finished: the parent owes its settlement, from the last
	// poll that saw it waiting.
	if _, _, err := s.Log.Append(ctx, child, headOf(t, s.Log, child), at, events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"found"`)}}); err != nil {
		t.Fatal(err)
	}
	h.violations = nil
	h.strandedOnce(ctx, runs, fixed(last.Add(bound)), seen)
	if len(h.violations) != 0 {
		t.Fatalf("child just finished: %v", h.violations)
	}
	h.strandedOnce(ctx, runs, fixed(last.Add(bound+strandedPoll)), seen)
	if len(h.violations) != 1 || h.violations[0].Run != parent {
		t.Fatalf("child finished, not settled: violations %v, want one of the parent %s", h.violations, parent)
	}
}

func fixed(t time.Time) func() time.Time { return func() time.Time { return t } }

// appendAll appends a run's history to the log.
func appendAll(t *testing.T, log *eventlog.Log, h []events.Recorded) {
	t.Helper()
	var head eventlog.Head
	for _, r := range h {
		var err error
		if _, head, err = log.Append(context.Background(), r.Run, head, r.At, r.Event); err != nil {
			t.Fatalf("append %s v%d: %v", r.Run, r.Version, err)
		}
	}
}

// headOf is a run's head in the log.
func headOf(t *testing.T, log *eventlog.Log, run string) eventlog.Head {
	t.Helper()
	_, head, err := log.Load(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return head
}
