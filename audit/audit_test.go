package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// paymentRun is a complete, valid run: one tool call allowed, run, reported;
// then the final answer.
func paymentRun() []events.Event {
	return []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay invoice 42", Runner: "runner-1",
			Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "c1", Name: "pay", Arguments: json.RawMessage(`{"invoice":42}`)}},
			Usage: &events.Usage{InputTokens: 100, OutputTokens: 20}},
		events.CallValidated{Action: "1/c1", Turn: 1, CallID: "c1", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/c1", Context: "model", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/c1", Why: events.QueuedAllowed, Config: events.ToolConfig{Timeout: 60000, MaxAttempts: 1}},
		events.AttemptFenced{Action: "1/c1", Tool: "pay", Attempt: 1, Incarnation: 1, Timeout: 60000, MaxAttempts: 1},
		events.AttemptReported{Action: "1/c1", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"receipt":"R-9"}`)},
		events.ModelRequested{Turn: 2, Incarnation: 1, Why: events.TurnToolResults},
		events.ModelReplied{Turn: 2, Kind: events.ReplyFinalAnswer, Text: "paid", Usage: &events.Usage{InputTokens: 150, OutputTokens: 5}},
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"paid"`)}},
	}
}

// liveRun appends paymentRun to a real log, one decision per event, and
// loads it back.
func liveRun(t *testing.T) ([]events.Envelope, string) {
	t.Helper()
	s := natstest.Start(t)
	ctx := context.Background()
	var err error
	var envs []events.Envelope
	head, _ := s.Log.Head(ctx, "pay-42")
	for i, e := range paymentRun() {
		if _, head, err = s.Log.Append(ctx, "pay-42", head, t0.Add(time.Duration(i)*time.Second), e); err != nil {
			t.Fatal(err)
		}
	}
	envs, head, err = s.Log.Load(ctx, "pay-42")
	if err != nil {
		t.Fatal(err)
	}
	return envs, head.Hash
}

func TestVerifyLiveRun(t *testing.T) {
	envs, head := liveRun(t)
	view, _ := projections.Fold(recorded(t, envs)).Encode()
	rep := audit.Verify(envs, audit.WithHead(head), audit.WithView(view))
	if !rep.OK() || rep.Events != 11 || rep.Status != "finished" || rep.Outcome != "completed" || rep.Head != head {
		t.Fatalf("report %+v problem %v", rep, rep.Problem)
	}
	// A stale stored view is reported.
	stale, _ := projections.Fold(recorded(t, envs[:5])).Encode()
	if rep := audit.Verify(envs, audit.WithView(stale)); rep.Problem == nil || rep.Problem.Kind != audit.KindView {
		t.Fatalf("stale view not reported: %+v", rep)
	}
}

func recorded(t *testing.T, envs []events.Envelope) []events.Recorded {
	var out []events.Recorded
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return out
}

// TestEditOneByteOfAnExport: export a run, change one byte of one event,
// verify points at that event.
func TestEditOneByteOfAnExport(t *testing.T) {
	envs, head := liveRun(t)
	var buf bytes.Buffer
	if err := audit.Export(&buf, envs); err != nil {
		t.Fatal(err)
	}
	clean, err := audit.ReadExport(bytes.NewReader(buf.Bytes()))
	if err != nil || !audit.Verify(clean, audit.WithHead(head)).OK() {
		t.Fatalf("clean export does not verify: %v %+v", err, audit.Verify(clean).Problem)
	}

	lines := strings.SplitAfter(buf.String(), "\n")
	for _, tc := range []struct {
		line     int // 1-based line = version
		from, to string
		kind     string
	}{
		{1, "invoice 42", "invoice 43", audit.KindChain},         // the input of run_started
		{3, `{"invoice":42}`, `{"invoice":52}`, audit.KindChain}, // the model's arguments
		{8, "R-9", "R-8", audit.KindChain},                       // the tool's result
		{11, "paid", "pair", audit.KindHead},                     // the last event: caught by the head
		{6, `"max_attempts":1`, `"max_attempts":2`, audit.KindChain},
		{4, `{"id"`, `{"id `, audit.KindParse}, // broken JSON
	} {
		edited := append([]string(nil), lines...)
		l := edited[tc.line-1]
		i := strings.Index(l, tc.from)
		if i < 0 {
			t.Fatalf("line %d has no %q: %s", tc.line, tc.from, l)
		}
		// Change exactly one byte.
		j := 0
		for j < len(tc.from) && tc.from[j] == tc.to[j] {
			j++
		}
		b := []byte(l)
		b[i+j] = tc.to[j]
		edited[tc.line-1] = string(b)

		got, err := audit.ReadExport(strings.NewReader(strings.Join(edited, "")))
		var p *audit.Problem
		if err != nil {
			p, _ = err.(*audit.Problem)
			if p == nil {
				t.Fatal(err)
			}
		} else {
			p = audit.Verify(got, audit.WithHead(head)).Problem
		}
		if p == nil || p.Kind != tc.kind || (p.Kind == audit.KindParse && p.Line != tc.line) || (p.Kind != audit.KindParse && p.Version != uint64(tc.line)) {
			t.Fatalf("edit of line %d: problem %+v, want %s at %d", tc.line, p, tc.kind, tc.line)
		}
		t.Logf("line %d: %s", tc.line, p.Message)
	}
}

// TestVerifyCatchesSequenceAndRefold: a dropped event, and a consistent
// chain over an impossible history.
func TestVerifyCatchesSequenceAndRefold(t *testing.T) {
	envs, _ := liveRun(t)
	dropped := append(append([]events.Envelope(nil), envs[:4]...), envs[5:]...)
	if p := audit.Verify(dropped).Problem; p == nil || p.Kind != audit.KindSequence || p.Version != 6 {
		t.Fatalf("dropped event: %+v", p)
	}
	// Rechain a history that fences before queueing: the chain holds, the
	// decision core refuses event 5.
	evs := paymentRun()
	evs[4], evs[5], evs[6] = evs[6], evs[4], evs[5]
	if p := audit.Verify(chain(t, "bad", evs)).Problem; p == nil || p.Kind != audit.KindRefold || p.Version != 5 {
		t.Fatalf("impossible history: %+v", p)
	}
}

// chain builds hash-chained envelopes without a log.
func chain(t *testing.T, run string, evs []events.Event) []events.Envelope {
	t.Helper()
	out, err := audittest.Chain(run, t0, evs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProjectionAgreesWithAggregate verifies the randomized histories of the
// projection tests: for every run the projection's status, lists, counters
// and action states equal the decision core's.
func TestProjectionAgreesWithAggregate(t *testing.T) {
	perRun, _ := projtest.Histories(1, 1000)
	for _, h := range perRun {
		var evs []events.Event
		for _, r := range h {
			evs = append(evs, r.Event)
		}
		rep := audit.Verify(chain(t, h[0].Run, evs))
		if !rep.OK() {
			t.Fatalf("run %s: %v", h[0].Run, rep.Problem)
		}
	}
}

// TestProjectionAgreesWithSimulatedRuns verifies 1,000 runs driven through
// the decision core itself with random commands (aggregatetest): the chain
// verifies, the history refolds, and the projection agrees with the
// aggregate after every prefix of each history.
func TestProjectionAgreesWithSimulatedRuns(t *testing.T) {
	statuses := map[string]int{}
	types := map[events.Name]bool{}
	total := 0
	for seed := uint64(1); seed <= 1000; seed++ {
		sim := aggregatetest.RandomRun(aggregatetest.Rand(seed), 40)
		evs := sim.Events()
		envs := chain(t, fmt.Sprintf("sim-%d", seed), evs)
		for n := 1; n <= len(envs); n++ {
			rep := audit.Verify(envs[:n])
			if !rep.OK() {
				t.Fatalf("seed %d, first %d events: %v\n%s", seed, n, rep.Problem, aggregatetest.Describe(evs[:n]))
			}
			statuses[rep.Status]++
			types[envs[n-1].Type] = true
		}
		total += len(evs)
	}
	// The simulation must reach every status and most of the catalogue.
	for _, s := range []string{"working", "unattended", "suspended", "finished"} {
		if statuses[s] == 0 {
			t.Errorf("no prefix was %s: %v", s, statuses)
		}
	}
	if len(types) < 18 {
		t.Errorf("only %d event types exercised", len(types))
	}
	t.Logf("%d events, statuses over prefixes %v, %d event types", total, statuses, len(types))
}
