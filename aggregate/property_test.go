package aggregate

import (
	"encoding/json"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
)

// sim drives one run with random commands chosen from what Pending asks
// for, plus stale, duplicate and out-of-place commands a hostile or racing
// outside world would send.
type sim struct {
	now     time.Time
	state   State
	history []events.Recorded
	cmds    []timed
	log     []events.Event
}

type timed struct {
	c   Command
	now time.Time
}

func (s *sim) apply(t *rapid.T, c Command) []events.Event {
	evs, err := Decide(s.state, c, s.now)
	// (f) The same command on the same state gives the same events.
	again, err2 := Decide(s.state, c, s.now)
	if !reflect.DeepEqual(evs, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("(f) Decide is not deterministic for %s", c.CommandName())
	}
	s.cmds = append(s.cmds, timed{c, s.now})
	before := s.state.Clone()
	for _, e := range evs {
		r := events.Recorded{Run: "r1", Version: s.state.Version() + 1, At: s.now, Event: e}
		s.history = append(s.history, r)
		s.log = append(s.log, e)
		// (g) Evolve accepts everything Decide produces (it panics otherwise).
		s.state = Evolve(s.state, r)
	}
	// (d) Ended actions never change.
	for _, a := range before.actions {
		if !a.State.Ended() {
			continue
		}
		now, _ := s.state.Action(a.ID)
		if !reflect.DeepEqual(a, now) {
			t.Fatalf("(d) ended action %s changed: %s -> %s after %s", a.ID, a.State, now.State, c.CommandName())
		}
	}
	// (h) Folding the events from scratch equals the state the decisions
	// were made on.
	if !reflect.DeepEqual(Fold(s.history).Clone(), s.state.Clone()) {
		t.Fatalf("(h) fold from scratch differs after %s", c.CommandName())
	}
	return evs
}

var callIDs = []string{"a", "b", "c", "d"}

func (s *sim) step(t *rapid.T) {
	w := Pending(s.state)
	acts := s.state.Actions()
	var choices []func()
	if w.Model != nil {
		turn := w.Model.Turn
		choices = append(choices, func() {
			kind := rapid.SampledFrom([]string{"final", "tools", "tools", "tools", "tools", "tools", "tools", "tools", "tools", "refusal", "empty"}).Draw(t, "reply")
			r := model.Reply{Usage: &model.Usage{InputTokens: 1, OutputTokens: 1}}
			c := ModelReply{Turn: turn}
			switch kind {
			case "final":
				r.Kind = model.ReplyFinalAnswer
				r.Turn.Text = `{"ok":true}`
				c.Answer = json.RawMessage(r.Turn.Text)
				if rapid.Bool().Draw(t, "bad answer") {
					c.Answer, c.AnswerError = nil, "unreadable"
				}
			case "tools", "empty":
				r.Kind = model.ReplyToolRequest
				if kind == "tools" {
					n := rapid.IntRange(1, 3).Draw(t, "calls")
					for i := range n {
						id := callIDs[i]
						if rapid.IntRange(0, 20).Draw(t, "dup") == 0 {
							id = callIDs[0]
						}
						r.Turn.Calls = append(r.Turn.Calls, model.ToolCall{ID: id, Name: "tool", Arguments: json.RawMessage(`{}`)})
					}
				}
			case "refusal":
				r.Kind = model.ReplyRefusal
			}
			c.Reply = r
			s.apply(t, c)
		})
		if rapid.IntRange(0, 3).Draw(t, "model fails") == 0 {
			choices = append(choices, func() {
				kind := rapid.SampledFrom([]model.ErrorKind{model.ErrTimedOut, model.ErrOverloaded, model.ErrRejected}).Draw(t, "failure")
				s.apply(t, ModelFailure{Turn: turn, Kind: kind})
			})
		}
	}
	if w.Resolve != nil {
		b := w.Resolve
		choices = append(choices, func() {
			c := ResolveCalls{Turn: b.Turn}
			for _, call := range b.Calls {
				r := Resolution{CallID: call.ID, Validation: events.CallValid}
				switch rapid.IntRange(0, 9).Draw(t, "validation") {
				case 0:
					r.Validation = events.CallUnknownTool
				case 1:
					r.Validation = events.CallInvalidArguments
				}
				switch rapid.IntRange(0, 19).Draw(t, "policy") {
				case 0:
					r.Policy = PolicyResult{Decision: events.PolicyError}
				case 1, 2, 3:
					r.Policy = PolicyResult{Decision: events.PolicyDeny, Reason: "no"}
				case 4, 5, 6, 7:
					r.Policy = PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 1}}
				default:
					r.Policy = PolicyResult{Decision: events.PolicyAllow}
				}
				r.Tool = randomTool(t)
				c.Calls = append(c.Calls, r)
			}
			s.apply(t, c)
		})
	}
	for _, a := range acts {
		switch a.State {
		case ActionRunning, ActionSettling, ActionUncertain:
			choices = append(choices, func() {
				attempt := a.Attempts
				if rapid.IntRange(0, 9).Draw(t, "stale attempt") == 0 {
					attempt--
				}
				switch rapid.IntRange(0, 5).Draw(t, "worker") {
				case 0, 1:
					s.apply(t, Report{Action: a.ID, Attempt: attempt, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"v":1}`)})
				case 2:
					s.apply(t, Report{Action: a.ID, Attempt: attempt, Outcome: events.OutcomeExplain, Message: "bad"})
				case 3:
					s.apply(t, Report{Action: a.ID, Attempt: attempt, Outcome: events.OutcomeUncertain, Evidence: "hm"})
				case 4:
					s.apply(t, Lost{Action: a.ID, Attempt: attempt, Cause: events.CauseWorkerLost})
				case 5:
					s.apply(t, Settle{Action: a.ID, Outcome: rapid.SampledFrom([]string{events.OutcomeOutput, events.OutcomeUncertain}).Draw(t, "settle"), Content: json.RawMessage(`{"s":1}`)})
				}
			})
		}
		if a.State == ActionUncertain {
			choices = append(choices, func() {
				_, fin := s.state.Finished()
				s.apply(t, Reconcile{Action: a.ID, Content: json.RawMessage(`{"unconfirmed":"n"}`), Stored: fin})
			})
		}
		if a.Request.Revision > 0 {
			choices = append(choices, func() {
				rev := a.Request.Revision - rapid.IntRange(0, 1).Draw(t, "rev skew")
				if rapid.Bool().Draw(t, "approve") {
					p := PolicyResult{Decision: events.PolicyAllow}
					switch rapid.IntRange(0, 9).Draw(t, "rerun") {
					case 0:
						p = PolicyResult{Decision: events.PolicyDeny}
					case 1:
						p = PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 2}}
					}
					s.apply(t, Approve{Action: a.ID, Revision: rev, Reviewer: "x", Policy: p, Tool: randomTool(t)})
				} else {
					s.apply(t, Reject{Action: a.ID, Revision: rev})
				}
			})
		}
	}
	if len(w.Timers) > 0 {
		choices = append(choices, func() {
			tm := rapid.SampledFrom(w.Timers).Draw(t, "timer")
			if tm.At.After(s.now) {
				s.now = tm.At
			}
			s.apply(t, tm.Command())
		})
	}
	choices = append(choices, func() {
		s.now = s.now.Add(time.Duration(rapid.IntRange(1, 100).Draw(t, "tick")) * time.Millisecond)
	})
	if rapid.IntRange(0, 30).Draw(t, "rare") == 0 {
		choices = append(choices,
			func() { s.apply(t, Cancel{}) },
			func() { s.apply(t, HandOff{Runner: "r", ModelNotCalled: rapid.Bool().Draw(t, "uncalled")}) },
			func() {
				s.apply(t, Recover{Runner: "n", Cause: rapid.SampledFrom([]string{events.RecoveredRunnerLost, events.RecoveredHandedOff}).Draw(t, "cause")})
			})
	}
	i := rapid.IntRange(0, len(choices)-1).Draw(t, "choice")
	choices[i]()
}

func randomTool(t *rapid.T) events.ToolConfig {
	c := events.ToolConfig{MaxAttempts: rapid.IntRange(1, 3).Draw(t, "attempts")}
	if rapid.Bool().Draw(t, "timeout") {
		c.Timeout = 50
	}
	if rapid.Bool().Draw(t, "settling") {
		c.SettleWithin = 20
	}
	return c
}

// TestProperties checks the invariants (a)–(h) of the aggregate over random
// command sequences.
func TestProperties(t *testing.T) {
	// 100 random runs (rapid's default) found a budget bug only once in
	// ~5000 runs; check 1000 unless -rapid.checks says otherwise.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("1000"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}
	seen := map[events.Name]int{}
	t.Cleanup(func() {
		// The generator must reach the interesting parts of the life
		// cycle, or the properties prove little.
		for _, n := range []events.Name{events.NameAttemptFenced, events.NameAttemptReported, events.NameAttemptLost,
			events.NameApprovalAnswered, events.NameSettlementAccepted, events.NameReconciled, events.NameRunRecovered,
			events.NameCancelRequested, events.NameReportRefused, events.NameRunFinished} {
			if seen[n] == 0 && !t.Failed() {
				t.Errorf("the random commands never produced %s", n)
			}
		}
		t.Logf("events produced: %v", seen)
	})
	rapid.Check(t, func(t *rapid.T) {
		s := &sim{now: epoch}
		defer func() {
			for _, e := range s.log {
				seen[e.EventName()]++
			}
		}()
		s.apply(t, Start{Run: "r1", Agent: events.AgentRef{Name: "a", Version: "1"}, Input: "go", Typed: true, Runner: "r0",
			Limits: events.Limits{MaxTurns: int64(rapid.IntRange(1, 8).Draw(t, "turns")), MaxConcurrency: rapid.IntRange(1, 2).Draw(t, "concurrency"),
				ModelTimeout: 1000, ModelRetryDelay: 10, ToolTimeout: 100, MaxResultBytes: 1000, ApprovalExpiry: 300, AnswerAttempts: 2}})
		steps := rapid.IntRange(10, 80).Draw(t, "steps")
		for range steps {
			s.step(t)
		}
		checkLog(t, s)
		// (f) Replaying the same commands at the same times from scratch
		// produces the same events.
		replay := &sim{}
		for _, c := range s.cmds {
			replay.now = c.now
			replay.apply(t, c.c)
		}
		if !reflect.DeepEqual(replay.log, s.log) {
			t.Fatalf("(f) the same commands produced different events")
		}
	})
}

// checkLog checks the invariants over the whole event log.
func checkLog(t *rapid.T, s *sim) {
	type key struct {
		action  string
		attempt int
	}
	fenced := map[key]events.AttemptFenced{}
	fences := map[string]int{}
	budget := map[string]int{}
	outcomes := map[key]int{}
	replayable := map[string]bool{}
	for _, e := range s.log {
		switch e := e.(type) {
		case events.AttemptFenced:
			fenced[key{e.Action, e.Attempt}] = e
			fences[e.Action]++
			if budget[e.Action] == 0 {
				budget[e.Action] = e.MaxAttempts
			}
			replayable[e.Action] = e.MaxAttempts > 1
		case events.AttemptReported:
			// (a) No attempt outcome without a fence.
			if _, ok := fenced[key{e.Action, e.Attempt}]; !ok {
				t.Fatalf("(a) %s attempt %d reported without a fence", e.Action, e.Attempt)
			}
			outcomes[key{e.Action, e.Attempt}]++
		case events.AttemptLost:
			if _, ok := fenced[key{e.Action, e.Attempt}]; !ok {
				t.Fatalf("(a) %s attempt %d lost without a fence", e.Action, e.Attempt)
			}
			// A stop that waits for a settlement is not the attempt's
			// outcome: the body's own report may still come and wins.
			if e.Next != events.NextSettle {
				outcomes[key{e.Action, e.Attempt}]++
			}
		}
	}
	for k, n := range outcomes {
		// (c) Each attempt has at most one outcome.
		if n > 1 {
			t.Fatalf("(c) %s attempt %d has %d outcomes\n%s", k.action, k.attempt, n, describeLog(s.log))
		}
	}
	for a, n := range fences {
		// (b) A non-replayable action has at most one attempt; no action
		// has more attempts than its recorded budget.
		if !replayable[a] && n > 1 {
			t.Fatalf("(b) non-replayable %s has %d attempts\n%s", a, n, describeLog(s.log))
		}
		if n > budget[a] {
			t.Fatalf("(b) %s has %d attempts over its budget %d", a, n, budget[a])
		}
	}
	// (a) Every attempt the runtime is asked to dispatch has its fence.
	for _, d := range Pending(s.state).Dispatch {
		if _, ok := fenced[key{d.Action, d.Attempt}]; !ok {
			t.Fatalf("(a) dispatch of %s attempt %d without a fence", d.Action, d.Attempt)
		}
	}
	// (e) Results reach the model in call order.
	tr := Transcript(s.state)
	for i, m := range tr {
		if m.Role != model.RoleTool {
			continue
		}
		if i == 0 || tr[i-1].Role != model.RoleAssistant {
			t.Fatalf("(e) tool results not after their assistant turn")
		}
		var order []string
		for _, c := range tr[i-1].Calls {
			order = append(order, c.ID)
		}
		last := -1
		for _, r := range m.Results {
			j := slices.Index(order, r.CallID)
			if j <= last {
				t.Fatalf("(e) result %s out of call order %v", r.CallID, order)
			}
			last = j
		}
	}
}

func describeLog(log []events.Event) string {
	var b []byte
	for _, e := range log {
		b = append(b, events.Describe(e)...)
		b = append(b, '\n')
	}
	return string(b)
}
