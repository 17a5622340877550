package projections_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
)

// store is the test's stand-in for the KV buckets: key → encoded bytes.
type store map[string][]byte

func put[T any](t *testing.T, s store, key string, v T) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	s[key] = b
}

// TestRebuildEqualsIncremental folds a randomized history of 1,000 runs two
// ways: one event at a time through the stored JSON (what the projector does
// live), and from event 1 in memory (what rebuild does). Every stored view,
// summary and inbox item must be byte-for-byte equal.
func TestRebuildEqualsIncremental(t *testing.T) {
	type source struct {
		name string
		gen  func() ([][]events.Recorded, []events.Recorded)
	}
	var sources []source
	for _, seed := range []uint64{1, 2, 3} {
		sources = append(sources, source{fmt.Sprint("projtest-seed", seed), func() ([][]events.Recorded, []events.Recorded) { return projtest.Histories(seed, 1000) }})
	}
	// Runs driven through the decision core itself.
	sources = append(sources, source{"aggregatetest", simulated})
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			perRun, log := src.gen()

			inc := store{}
			for _, r := range log {
				var old projections.RunView
				if b, ok := inc["view."+r.Run]; ok {
					var err error
					if old, err = projections.DecodeView(b); err != nil {
						t.Fatal(err)
					}
				}
				c := projections.Step(old, r)
				if !c.Applied {
					t.Fatalf("event %s v%d not applied", r.Run, r.Version)
				}
				put(t, inc, "view."+r.Run, c.View)
				put(t, inc, "run."+r.Run, c.Summary)
				for _, k := range c.DropApprovals {
					delete(inc, "approval."+k)
				}
				for _, k := range c.DropUncertain {
					delete(inc, "uncertain."+k)
				}
				for _, it := range c.Approvals {
					put(t, inc, "approval."+projections.ItemKey(it.Run, it.Action), it)
				}
				for _, it := range c.Uncertain {
					put(t, inc, "uncertain."+projections.ItemKey(it.Run, it.Action), it)
				}
			}

			reb := store{}
			statuses := map[string]int{}
			for _, h := range perRun {
				v := projections.Fold(h)
				statuses[v.Status]++
				put(t, reb, "view."+v.Run, v)
				put(t, reb, "run."+v.Run, projections.Summarize(v))
				for _, it := range projections.ApprovalItems(v) {
					put(t, reb, "approval."+projections.ItemKey(it.Run, it.Action), it)
				}
				for _, it := range projections.UncertainItems(v) {
					put(t, reb, "uncertain."+projections.ItemKey(it.Run, it.Action), it)
				}
			}

			keys := func(s store) []string {
				var ks []string
				for k := range s {
					ks = append(ks, k)
				}
				slices.Sort(ks)
				return ks
			}
			ki, kr := keys(inc), keys(reb)
			if !slices.Equal(ki, kr) {
				t.Fatalf("key sets differ: incremental %d keys, rebuilt %d keys", len(ki), len(kr))
			}
			for _, k := range ki {
				if !bytes.Equal(inc[k], reb[k]) {
					t.Fatalf("%s differs:\nincremental %s\nrebuilt     %s", k, inc[k], reb[k])
				}
			}
			// The history must exercise every status and both inboxes, or
			// the comparison proves little.
			for _, s := range projections.Statuses() {
				if statuses[s] == 0 {
					t.Errorf("no run ended %s: %v", s, statuses)
				}
			}
			var nApproval, nUncertain int
			for _, k := range ki {
				nApproval += b2i(strings.HasPrefix(k, "approval."))
				nUncertain += b2i(strings.HasPrefix(k, "uncertain."))
			}
			if nApproval == 0 || nUncertain == 0 {
				t.Errorf("inboxes empty: %d approvals, %d uncertain", nApproval, nUncertain)
			}
			t.Logf("%d events, statuses %v, %d approvals, %d uncertain", len(log), statuses, nApproval, nUncertain)
		})
	}
}

// simulated returns 1,000 runs simulated through the aggregate with random
// commands, interleaved in a seeded random log order.
func simulated() ([][]events.Recorded, []events.Recorded) {
	var perRun [][]events.Recorded
	for seed := uint64(1); seed <= 1000; seed++ {
		sim := aggregatetest.RandomRun(aggregatetest.Rand(seed), 40)
		h := slices.Clone(sim.History)
		run := fmt.Sprintf("sim-%04d", seed)
		for i := range h {
			h[i].Run = run
			h[i].At = h[i].At.Add(time.Duration(seed) * time.Millisecond)
		}
		perRun = append(perRun, h)
	}
	rng := rand.New(rand.NewPCG(42, 42))
	next := make([]int, len(perRun))
	var log []events.Recorded
	for left := len(perRun); left > 0; {
		i := rng.IntN(len(perRun))
		if next[i] == len(perRun[i]) {
			continue
		}
		log = append(log, perRun[i][next[i]])
		next[i]++
		if next[i] == len(perRun[i]) {
			left--
		}
	}
	return perRun, log
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func rec(run string, v uint64, e events.Event) events.Recorded {
	return events.Recorded{Run: run, Version: v, At: t0.Add(time.Duration(v) * time.Second), Event: e}
}

func history(run string, evs ...events.Event) []events.Recorded {
	var out []events.Recorded
	for i, e := range evs {
		out = append(out, rec(run, uint64(i+1), e))
	}
	return out
}

// TestScenario5_DenyApprovalAllowView: one denied, one needing approval and
// one allowed call; after the allowed one succeeds the run is suspended with
// one pending approval, which the approvals inbox lists.
func TestScenario5_DenyApprovalAllowView(t *testing.T) {
	req := events.Requirement{Name: "finance", Version: 1}
	exp := t0.Add(time.Hour)
	h := history("r1",
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Runner: "r"},
		events.ModelRequested{Turn: 1, Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
			{ID: "a", Name: "pay", Arguments: json.RawMessage(`{"n":1}`)},
			{ID: "b", Name: "pay", Arguments: json.RawMessage(`{"n":2}`)},
			{ID: "c", Name: "look", Arguments: json.RawMessage(`{}`)},
		}, Usage: &events.Usage{InputTokens: 10, OutputTokens: 5}},
		events.CallValidated{Action: "1/a", Tool: "pay", Outcome: events.CallValid},
		events.CallValidated{Action: "1/b", Tool: "pay", Outcome: events.CallValid},
		events.CallValidated{Action: "1/c", Tool: "look", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/a", Decision: events.PolicyDeny, Reason: "too much"},
		events.PolicyDecided{Action: "1/b", Decision: events.PolicyRequireApproval, Requirement: &req},
		events.ApprovalRequested{Action: "1/b", Revision: 1, Requirement: req, Expires: &exp, Why: "policy"},
		events.PolicyDecided{Action: "1/c", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/c"},
		events.AttemptFenced{Action: "1/c", Tool: "look", Attempt: 1},
	)
	v := projections.Fold(h)
	if v.Status != projections.StatusWorking {
		t.Fatalf("status while 1/c runs = %s, want working", v.Status)
	}
	v = projections.Apply(v, rec("r1", 13, events.AttemptReported{Action: "1/c", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"ok": true}`)}))
	if v.Status != projections.StatusSuspended || !slices.Equal(v.Approvals, []string{"1/b"}) || len(v.Uncertain) != 0 {
		t.Fatalf("status %s approvals %v uncertain %v", v.Status, v.Approvals, v.Uncertain)
	}
	states := []string{}
	for _, a := range v.Actions {
		states = append(states, a.ID+"="+a.State)
	}
	if want := []string{"1/a=denied", "1/b=awaiting_approval", "1/c=succeeded"}; !slices.Equal(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	c, _ := v.Action("1/c")
	if c.Result != `{"ok":true}` || c.Attempts != 1 || c.Replays != 0 {
		t.Fatalf("1/c = %+v", c)
	}
	items := projections.ApprovalItems(v)
	if len(items) != 1 || items[0].Action != "1/b" || items[0].Revision != 1 || items[0].Tool != "pay" ||
		string(items[0].Arguments) != `{"n":2}` || !items[0].Expires.Equal(exp) || items[0].Requirement != req {
		t.Fatalf("approvals inbox %+v", items)
	}
	if v.Turns != 1 || v.Usage.InputTokens != 10 || v.Usage.OutputTokens != 5 {
		t.Fatalf("turns %d usage %+v", v.Turns, v.Usage)
	}
}

// TestScenario29_ReplaysAndUncertainInbox: a replayable body crashes twice
// and then cannot be replayed: attempts 3, replays 2, uncertain with its
// evidence; the uncertain inbox ages it from the time passed in.
func TestScenario29_ReplaysAndUncertainInbox(t *testing.T) {
	h := history("r2",
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Runner: "r"},
		events.ModelRequested{Turn: 1, Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "x", Name: "read", Arguments: json.RawMessage(`{}`)}}},
		events.CallValidated{Action: "1/x", Tool: "read", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/x", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/x"},
		events.AttemptFenced{Action: "1/x", Attempt: 1},
		events.AttemptLost{Action: "1/x", Attempt: 1, Cause: events.CauseCrashed, Evidence: "crash 1", Next: events.NextReplay},
		events.AttemptFenced{Action: "1/x", Attempt: 2},
		events.AttemptLost{Action: "1/x", Attempt: 2, Cause: events.CauseCrashed, Evidence: "crash 2", Next: events.NextReplay},
		events.AttemptFenced{Action: "1/x", Attempt: 3},
		events.AttemptLost{Action: "1/x", Attempt: 3, Cause: events.CauseCrashed, Evidence: "crashed 3 times", Next: events.NextUncertain},
	)
	v := projections.Fold(h)
	a, _ := v.Action("1/x")
	if v.Status != projections.StatusSuspended || a.State != projections.StateUncertain || a.Attempts != 3 || a.Replays != 2 || a.Evidence != "crashed 3 times" {
		t.Fatalf("status %s action %+v", v.Status, a)
	}
	if v.Usage.Unreported != 1 {
		t.Fatalf("unreported usage = %d, want 1", v.Usage.Unreported)
	}
	items := projections.Aged(projections.UncertainItems(v), t0.Add(time.Minute))
	if len(items) != 1 || items[0].AgeMillis != (60-12)*1000 || items[0].Evidence != "crashed 3 times" {
		t.Fatalf("uncertain inbox %+v", items)
	}
	v = projections.Apply(v, rec("r2", 13, events.Reconciled{Action: "1/x", Kind: "unconfirmed", Content: json.RawMessage(`{"unconfirmed":"asked"}`)}))
	a, _ = v.Action("1/x")
	if a.State != projections.StateReconciled || a.Result != `{"unconfirmed":"asked"}` || len(projections.UncertainItems(v)) != 0 {
		t.Fatalf("after reconcile %+v", a)
	}
}

// TestApplyIgnoresDuplicatesAndGaps: an event already folded, or one after a
// gap, changes nothing.
func TestApplyIgnoresDuplicatesAndGaps(t *testing.T) {
	h := history("r3", events.RunStarted{Runner: "r"}, events.ModelRequested{Turn: 1})
	v := projections.Fold(h)
	before, _ := v.Encode()
	for _, r := range []events.Recorded{h[0], h[1], rec("r3", 4, events.CancelRequested{})} {
		after, _ := projections.Apply(v, r).Encode()
		if !bytes.Equal(before, after) {
			t.Fatalf("event v%d changed the view", r.Version)
		}
		if projections.Step(v, r).Applied {
			t.Fatalf("Step applied v%d", r.Version)
		}
	}
}

func TestPageFiltersAndCursor(t *testing.T) {
	var all []projections.Summary
	for i := range 25 {
		all = append(all, projections.Summary{
			Run: fmt.Sprintf("r%02d", i), Agent: events.AgentRef{Name: []string{"a", "b"}[i%2]},
			Status: projections.Statuses()[i%4], Updated: t0.Add(time.Duration(i/2) * time.Second),
		})
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		p, err := projections.Page(all, projections.ListQuery{Limit: 4, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Runs {
			got = append(got, s.Run)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	// Newest first; equal update times ordered by run id.
	want := []string{"r24"}
	for i := 11; i >= 0; i-- {
		want = append(want, fmt.Sprintf("r%02d", 2*i), fmt.Sprintf("r%02d", 2*i+1))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged order\n got %v\nwant %v", got, want)
	}
	p, err := projections.Page(all, projections.ListQuery{Status: "suspended", Agent: "a", UpdatedSince: t0.Add(5 * time.Second).Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Runs {
		if s.Status != "suspended" || s.Agent.Name != "a" || s.Updated.Before(t0.Add(5*time.Second)) {
			t.Fatalf("filter let %+v through", s)
		}
	}
	// Suspended runs are r02, r06, … r22, all of agent a, updated at
	// t0+1s, +3s, … +11s: four are at or after t0+5s.
	if len(p.Runs) != 4 {
		t.Fatalf("filtered %d runs: %+v", len(p.Runs), p.Runs)
	}
	for _, tc := range []struct {
		q    projections.ListQuery
		code weft.Code
	}{
		{projections.ListQuery{Status: "sleeping"}, weft.CodeBadFilter},
		{projections.ListQuery{Agent: "a b"}, weft.CodeBadFilter},
		{projections.ListQuery{UpdatedSince: "yesterday"}, weft.CodeBadFilter},
		{projections.ListQuery{Limit: 1001}, weft.CodeBadFilter},
		{projections.ListQuery{Cursor: "!!"}, weft.CodeBadCursor},
		{projections.ListQuery{Cursor: "e30"}, weft.CodeBadCursor},
	} {
		_, err := projections.Page(all, tc.q)
		var we *weft.Error
		if !errors.As(err, &we) || we.Code != tc.code {
			t.Errorf("%+v: err %v, want %s", tc.q, err, tc.code)
		}
	}
}

func TestItemKey(t *testing.T) {
	if got := projections.ItemKey("r-1", "12/call.1 x"); got != "r-1.12=2Fcall=2E1=20x" {
		t.Fatalf("ItemKey = %s", got)
	}
	if projections.ItemKey("r", "1/a-b") == projections.ItemKey("r", "1=2Fa-b") {
		t.Fatal("escape is ambiguous")
	}
}

// TestLayering: projections is pure; it imports no NATS, net or os, and
// never reads the clock.
func TestLayering(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	more, _ := filepath.Glob("projtest/*.go")
	files = append(files, more...)
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range src.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "os" || p == "net" || strings.HasPrefix(p, "net/") || strings.Contains(p, "nats") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte("time.Now")) {
			t.Errorf("%s reads the clock", f)
		}
	}
}

// TestSemantics8_ClosingAnAttemptALateMarkOnALiveRunInTheView
// (docs/semantics.md §8 "Closing an attempt"; docs/adr/0023-closing-attempts.md,
// "A late mark on a live run"): the attempt timer's close found the
// worker's claim (uncertain, in the inbox); the worker's mark read
// afterwards ends the payment not_started on the live run. The view shows
// it not_started with the mark's evidence — which attempt, the worker that
// marked it and why, the runner that read it — and the result the model
// reads; it leaves the uncertain inbox and the run is working again.
func TestSemantics8_ClosingAnAttemptALateMarkOnALiveRunInTheView(t *testing.T) {
	h := history("r9", append(payFenced(),
		events.AttemptClosed{Action: "1/p", Attempt: 1, Incarnation: 1, By: "r", Why: events.ClosedTimedOut, Claimed: true, ClaimWorker: "w-1", ClaimToken: "tok"},
		events.AttemptLost{Action: "1/p", Attempt: 1, Cause: events.CauseTimedOut, Evidence: "attempt 1 timed out", Next: events.NextUncertain},
	)...)
	v := projections.Fold(h)
	if a, _ := v.Action("1/p"); a.State != projections.StateUncertain || len(projections.UncertainItems(v)) != 1 {
		t.Fatalf("before the mark: %+v, inbox %v", a, projections.UncertainItems(v))
	}
	v = projections.Apply(v, rec("r9", 10, events.AttemptNotStarted{Action: "1/p", Attempt: 1, Incarnation: 1, Worker: "w-1", Why: "deadline", By: "r", Ended: true}))
	v = projections.Apply(v, rec("r9", 11, events.ModelRequested{Turn: 2, Incarnation: 1, Why: events.TurnToolResults}))
	a, _ := v.Action("1/p")
	want := projections.MarkView{Attempt: 1, Worker: "w-1", Why: "deadline", By: "r", At: t0.Add(10 * time.Second)}
	if a.State != projections.StateNotStarted || a.Detail != events.NotStartedMarked || a.Marked == nil || *a.Marked != want {
		t.Fatalf("after the mark: state %s detail %q mark %+v; want not_started, %s, %+v", a.State, a.Detail, a.Marked, events.NotStartedMarked, want)
	}
	if a.Result != `{"error":"not_started","detail":"the call did not run: its body never started"}` {
		t.Fatalf("result %q; want the not_started error the model reads", a.Result)
	}
	if len(projections.UncertainItems(v)) != 0 || len(v.Uncertain) != 0 || v.Status != projections.StatusWorking {
		t.Fatalf("status %s, uncertain %v, inbox %v; want working, none", v.Status, v.Uncertain, projections.UncertainItems(v))
	}
}

// TestSemantics8_ClosingAnAttemptALateMarkAfterTheCancelInTheViewHasNoResult
// (docs/adr/0023-closing-attempts.md, "A late mark on a live run" and "Late
// evidence: a mark after the decision"): the cancel's close found the
// worker's claim (uncertain), and the run finished cancelled; the worker's
// mark read afterwards ends the payment not_started with its evidence, but
// no model reads it: the view shows no result.
func TestSemantics8_ClosingAnAttemptALateMarkAfterTheCancelInTheViewHasNoResult(t *testing.T) {
	h := history("r10", append(payFenced(),
		events.AttemptClosed{Action: "1/p", Attempt: 1, Incarnation: 1, By: "r", Why: events.ClosedCancelled, Claimed: true, ClaimWorker: "w-1", ClaimToken: "tok"},
		events.CancelRequested{By: "dave"},
		events.AttemptLost{Action: "1/p", Attempt: 1, Cause: events.CauseStopped, Evidence: "stopped while running: cancelled", Next: events.NextUncertain},
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCancelled}},
	)...)
	v := projections.Apply(projections.Fold(h), rec("r10", 12, events.AttemptNotStarted{Action: "1/p", Attempt: 1, Incarnation: 1, Worker: "w-1", Why: "ended", By: "r", Ended: true}))
	a, _ := v.Action("1/p")
	if a.State != projections.StateNotStarted || a.Detail != events.NotStartedMarked || a.Marked == nil {
		t.Fatalf("after the mark: state %s detail %q mark %+v; want not_started by the mark", a.State, a.Detail, a.Marked)
	}
	if a.Result != "" {
		t.Fatalf("result %q; want none: no model reads a cancelled run's action", a.Result)
	}
}

// payFenced is a run whose model called pay (action 1/p), allowed and
// fenced attempt 1.
func payFenced() []events.Event {
	return []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Runner: "r"},
		events.ModelRequested{Turn: 1, Incarnation: 1},
		events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "p", Name: "pay", Arguments: json.RawMessage(`{}`)}}},
		events.CallValidated{Action: "1/p", Tool: "pay", Outcome: events.CallValid},
		events.PolicyDecided{Action: "1/p", Decision: events.PolicyAllow},
		events.ActionQueued{Action: "1/p"},
		events.AttemptFenced{Action: "1/p", Attempt: 1, Incarnation: 1},
	}
}
