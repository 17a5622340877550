package aggregate

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// epoch is the store time at which every script starts.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestScenarioScripts runs the datadriven scripts in testdata/, one per
// docs/semantics.md §12 scenario that is a decision (file scenarioNN_*.txt).
// Regenerate the golden output with -rewrite.
func TestScenarioScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/scenario*.txt")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	// docs/semantics.md rules that are decisions but no numbered scenario
	// (file ruleNN_*.txt, NN the section).
	rules, err := filepath.Glob("testdata/rule*.txt")
	if err != nil || len(rules) == 0 {
		t.Fatalf("no rule scripts: %v", err)
	}
	paths = append(paths, rules...)
	// Sub-agent delegation and tool_changed (docs/adr/0007).
	more, err := filepath.Glob("testdata/delegation_*.txt")
	if err != nil || len(more) == 0 {
		t.Fatalf("no delegation scripts: %v", err)
	}
	paths = append(paths, more...)
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) { runScript(t, path) })
	}
}

func runScript(t *testing.T, path string) {
	{
		h := &harness{now: epoch}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if h.name != t.Name() {
				// Each subtest drives a run of its own.
				*h = harness{now: epoch, name: t.Name()}
			}
			return h.run(t, d)
		})
	}
}

// harness drives one run through the aggregate as a runner would: decide,
// "append" (stamp versions and time), evolve; and it checks after every
// decision that folding the whole history from scratch gives the same
// state the decisions were made on.
type harness struct {
	name    string
	now     time.Time
	state   State
	history []events.Recorded
	// takeover, set by the takeover command, is the recovery the next
	// command is decided after (Recover.Then).
	takeover *Recover
	// closes, set by the close command, are the close outcomes the next
	// command is decided with (Closing).
	closes []Close
	// toClose, set by the to-close command, prints what ToClose lists
	// for the next command before it is decided.
	toClose bool
	// runID is the id the next Start records its run under; logs are the
	// histories of the runs restarted before the current one.
	runID string
	logs  map[string][]events.Recorded
}

func (h *harness) decide(t *testing.T, c Command) string {
	t.Helper()
	if r := h.takeover; r != nil {
		h.takeover = nil
		r.Then = c
		c = *r
	}
	var b strings.Builder
	if h.toClose {
		h.toClose = false
		plain, _ := Decide(h.state, c, h.now)
		for _, cl := range ToClose(h.state, c, plain) {
			fmt.Fprintf(&b, "to close: action=%s attempt=%d incarnation=%d why=%s\n", cl.Action, cl.Attempt, cl.Incarnation, cl.Why)
		}
		if b.Len() == 0 {
			b.WriteString("to close: none\n")
		}
	}
	if h.closes != nil {
		c = Closing{By: "runner-a", Closes: h.closes, Then: c}
		h.closes = nil
	}
	evs, err := Decide(h.state, c, h.now)
	again, err2 := Decide(h.state, c, h.now)
	if !reflect.DeepEqual(evs, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
		t.Fatalf("Decide is not deterministic for %s", c.CommandName())
	}
	h.append(t, evs, &b)
	if err != nil {
		fmt.Fprintf(&b, "error: %v", err)
		var we *weft.Error
		if errors.As(err, &we) && we.SameInput != nil {
			fmt.Fprintf(&b, " same_input=%v", *we.SameInput)
		}
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "ok: nothing to record\n"
	}
	return b.String()
}

func (h *harness) append(t *testing.T, evs []events.Event, b *strings.Builder) {
	t.Helper()
	run := h.state.Run()
	for _, e := range evs {
		if run == "" {
			run = h.runID
		}
		if run == "" {
			run = "r1"
		}
		// Round-trip through the envelope encoding, as the log would.
		env, err := events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		r := events.Recorded{Run: run, Version: h.state.Version() + 1, At: h.now, Event: back}
		h.history = append(h.history, r)
		h.state = Evolve(h.state, r)
		b.WriteString(events.Describe(back))
		b.WriteByte('\n')
	}
	if len(evs) > 0 {
		if folded := Fold(h.history); !reflect.DeepEqual(folded.Clone(), h.state.Clone()) {
			t.Fatalf("folding the history from scratch differs from the incremental state")
		}
	}
}

// keepLog keeps the current run's log in logs and starts afresh.
func (h *harness) keepLog() {
	if h.logs == nil {
		h.logs = map[string][]events.Recorded{}
	}
	h.logs[h.state.Run()] = h.history
	h.state, h.history = State{}, nil
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "start":
		l := events.Limits{
			MaxTurns: 8, MaxConcurrency: 4, ModelTimeout: 600000, ModelRetryDelay: 200,
			ToolTimeout: 60000, MaxResultBytes: 1 << 20, PolicyTimeout: 5000, CommandTimeout: 5000,
			ApprovalExpiry: 7 * 24 * 3600 * 1000, AnswerAttempts: 2, MaxChildren: 4, MaxDepth: 1,
		}
		l.MaxTurns = int64(h.intArg(t, d, "turns", int(l.MaxTurns)))
		l.MaxConcurrency = h.intArg(t, d, "concurrency", l.MaxConcurrency)
		l.TokenBudget = int64(h.intArg(t, d, "tokens", 0))
		l.AnswerAttempts = h.intArg(t, d, "answer-attempts", l.AnswerAttempts)
		l.ApprovalExpiry = h.msArg(t, d, "approval-expiry", l.ApprovalExpiry)
		l.ToolTimeout = h.msArg(t, d, "tool-timeout", l.ToolTimeout)
		l.ModelTimeout = h.msArg(t, d, "model-timeout", l.ModelTimeout)
		l.ModelRetryDelay = h.msArg(t, d, "retry-delay", l.ModelRetryDelay)
		l.MaxResultBytes = int64(h.intArg(t, d, "max-result", int(l.MaxResultBytes)))
		l.MaxChildren = h.intArg(t, d, "children", l.MaxChildren)
		l.MaxDepth = h.intArg(t, d, "depth", l.MaxDepth)
		var parent *events.Parent
		if d.HasArg("parent") {
			parent = &events.Parent{Run: h.strArg(t, d, "parent", ""), Action: h.strArg(t, d, "parent-action", "1/c1"),
				Depth: h.intArg(t, d, "parent-depth", 1), FamilyTurns: int64(h.intArg(t, d, "family", 8)), MaxDepth: h.intArg(t, d, "family-depth", 0)}
		}
		input := strings.TrimSpace(d.Input)
		if input == "" {
			input = "do the thing"
		}
		h.runID = h.strArg(t, d, "run", "r1")
		if cur := h.state.Run(); cur != "" && cur != h.runID {
			// A start of another run: the script goes on with it, and
			// keeps the earlier run's log (for restart's judgement).
			h.keepLog()
		}
		return h.decide(t, Start{
			Run: h.runID, Agent: events.AgentRef{Name: h.strArg(t, d, "agent", "desk"), Version: "1"},
			Input: input, Correlation: h.strArg(t, d, "correlation", ""), Limits: l,
			Typed: d.HasArg("typed"), Runner: h.strArg(t, d, "runner", "runner-a"), Parent: parent,
		})

	case "restart":
		// restart turn=N [run=ID] [from=ID]: judge a restart of this run (or
		// of run from, an earlier run of the script) from turn N
		// (ForkOf); on success the script goes on with the new run, started
		// with the parent's agent, input and limits.
		// from=ID judges the restart of an earlier run of the script.
		from, history := h.state.Run(), h.history
		if d.HasArg("from") {
			from = h.strArg(t, d, "from", "")
			history = h.logs[from]
		}
		start, fork, err := ForkOf(from, history, h.logs, int64(h.intArg(t, d, "turn", 1)))
		if err != nil {
			var we *weft.Error
			if errors.As(err, &we) && len(we.Actions) > 0 {
				return fmt.Sprintf("error: %v actions=%v\n", err, we.Actions)
			}
			return fmt.Sprintf("error: %v\n", err)
		}
		if run := h.strArg(t, d, "run", "r2"); run != h.state.Run() {
			// A restart into the current run is decided on it.
			h.keepLog()
			h.runID = run
		}
		return h.decide(t, Start{
			Run: h.strArg(t, d, "run", "r2"), Agent: start.Agent, Input: start.Input, Limits: start.Limits,
			Typed: start.Typed, Runner: h.strArg(t, d, "runner", "runner-a"), Fork: &fork,
		})

	case "reply":
		turn := int64(h.intArg(t, d, "turn", int(h.state.Turn())))
		r := Reply{}
		if d.HasArg("usage") {
			var in, out int
			d.ScanArgs(t, "usage", &in, &out)
			r.Usage = &events.Usage{InputTokens: int64(in), OutputTokens: int64(out)}
		}
		c := ModelReply{Turn: turn}
		switch kind := h.strArg(t, d, "kind", "final"); kind {
		case "final":
			r.Kind = events.ReplyFinalAnswer
			r.Turn = events.Message{Role: "assistant", Text: strings.TrimSpace(d.Input)}
			if json.Valid([]byte(r.Turn.Text)) {
				c.Answer = json.RawMessage(r.Turn.Text)
			} else {
				c.AnswerError = "invalid character at offset 1"
			}
		case "tools":
			r.Kind = events.ReplyToolRequest
			r.Turn = events.Message{Role: "assistant", Text: h.strArg(t, d, "text", "")}
			for _, ln := range lines(d.Input) {
				f := strings.SplitN(ln, " ", 3)
				args := "{}"
				if len(f) == 3 {
					args = f[2]
				}
				r.Turn.Calls = append(r.Turn.Calls, events.ToolCall{ID: f[0], Name: f[1], Arguments: json.RawMessage(args)})
			}
			if d.HasArg("provider-data") {
				r.Turn.ProviderData = json.RawMessage(`{"response_id":"resp_1"}`)
			}
		case "refusal":
			r.Kind = events.ReplyRefusal
			r.Reason = strings.TrimSpace(d.Input)
		case "truncated":
			r.Kind = events.ReplyTruncated
			r.Reason = strings.TrimSpace(d.Input)
		default:
			t.Fatalf("reply kind %q", kind)
		}
		c.Reply = r
		return h.decide(t, c)

	case "fail":
		return h.decide(t, ModelFailure{
			Turn: int64(h.intArg(t, d, "turn", int(h.state.Turn()))), Kind: events.FailureKind(h.strArg(t, d, "kind", "")),
			Status: h.intArg(t, d, "status", 0), RetryAfter: time.Duration(h.intArg(t, d, "retry-after", 0)) * time.Millisecond,
		})

	case "resolve":
		turn := int64(h.intArg(t, d, "turn", int(h.state.Turn())))
		c := ResolveCalls{Turn: turn}
		for _, ln := range lines(d.Input) {
			f := strings.Fields(ln)
			r := Resolution{CallID: f[0]}
			switch f[1] {
			case "unknown":
				r.Validation = events.CallUnknownTool
			case "invalid":
				r.Validation = events.CallInvalidArguments
				r.Detail = strings.Join(f[2:], " ")
			case "valid":
				r.Validation = events.CallValid
				rest := f[2:]
				if len(rest) > 0 && strings.HasPrefix(rest[0], "agent=") {
					name, v, _ := strings.Cut(strings.TrimPrefix(rest[0], "agent="), "@")
					r.Delegate = &events.AgentRef{Name: name, Version: v}
					rest = rest[1:]
				}
				if len(rest) > 0 || r.Delegate == nil {
					r.Policy, r.Tool = policyOf(t, rest)
				}
			default:
				t.Fatalf("resolution %q", ln)
			}
			c.Calls = append(c.Calls, r)
		}
		return h.decide(t, c)

	case "approve":
		// approve action=… rev=… [reviewer=…] [policy=…] [edited]: with
		// edited, the input is the edited arguments (docs/semantics.md §4,
		// "Approving narrower arguments") and policy the decision on them.
		p, tool := policyOf(t, strings.Fields(h.strArg(t, d, "policy", "allow")))
		tool = toolOf(t, d, tool)
		c := Approve{
			Action: h.strArg(t, d, "action", ""), Revision: h.intArg(t, d, "rev", 0),
			Reviewer: h.strArg(t, d, "reviewer", "alice"), Verifier: h.strArg(t, d, "verifier", "desk-approvers"),
			Policy: p, Tool: tool,
		}
		if d.HasArg("edited") {
			c.Arguments = json.RawMessage(strings.TrimSpace(d.Input))
		}
		return h.decide(t, c)

	case "answers":
		// A batch of answers to one run's requests (Answers), one per
		// line: approve action=… rev=… [reviewer=…] [policy=…] or
		// reject action=… rev=… [reason=…] [by=…].
		var c Answers
		for _, ln := range lines(d.Input) {
			f := strings.Fields(ln)
			kv := map[string]string{}
			for _, a := range f[1:] {
				k, v, _ := strings.Cut(a, "=")
				kv[k] = v
			}
			or := func(k, def string) string {
				if v, ok := kv[k]; ok {
					return strings.ReplaceAll(v, "_", " ")
				}
				return def
			}
			rev, err := strconv.Atoi(kv["rev"])
			if err != nil {
				t.Fatalf("answers: %q: rev: %v", ln, err)
			}
			switch f[0] {
			case "approve":
				p, tool := policyOf(t, strings.Fields(or("policy", "allow")))
				c.Answers = append(c.Answers, Approve{Action: kv["action"], Revision: rev, Reviewer: or("reviewer", "alice"), Verifier: "desk-approvers", Policy: p, Tool: tool})
			case "reject":
				c.Answers = append(c.Answers, Reject{Action: kv["action"], Revision: rev, Reason: or("reason", "no"), By: or("by", "bob")})
			default:
				t.Fatalf("answers: %q", ln)
			}
		}
		return h.decide(t, c)

	case "check":
		a, err := CheckAnswer(h.state, h.strArg(t, d, "action", ""), h.intArg(t, d, "rev", 0), h.now)
		if err != nil {
			return fmt.Sprintf("error: %v\n", err)
		}
		return fmt.Sprintf("ok: revision=%d requirement=%s@v%d\n", a.Revision, a.Requirement.Name, a.Requirement.Version)

	case "reject":
		return h.decide(t, Reject{Action: h.strArg(t, d, "action", ""), Revision: h.intArg(t, d, "rev", 0), Reason: h.strArg(t, d, "reason", "no"), By: h.strArg(t, d, "by", "bob")})

	case "report":
		c := Report{Action: h.strArg(t, d, "action", ""), Attempt: h.intArg(t, d, "attempt", 1), Outcome: h.strArg(t, d, "outcome", events.OutcomeOutput)}
		text := strings.TrimSpace(d.Input)
		switch c.Outcome {
		case events.OutcomeOutput:
			if n := h.intArg(t, d, "bytes", 0); n > 0 {
				text = `"` + strings.Repeat("x", n-2) + `"`
			}
			c.Content = json.RawMessage(text)
		case events.OutcomeExplain:
			c.Message = text
		case events.OutcomeUncertain:
			c.Evidence = text
		case events.OutcomeOversize:
			c.Bytes = int64(h.intArg(t, d, "bytes", 0))
		}
		return h.decide(t, c)

	case "lost":
		return h.decide(t, Lost{Action: h.strArg(t, d, "action", ""), Attempt: h.intArg(t, d, "attempt", 1), Cause: h.strArg(t, d, "cause", events.CauseWorkerLost), Evidence: strings.TrimSpace(d.Input)})

	case "timer":
		return h.decide(t, TimerFired{Kind: TimerKind(h.strArg(t, d, "kind", "")), Action: h.strArg(t, d, "action", ""), Attempt: h.intArg(t, d, "attempt", 0), Revision: h.intArg(t, d, "rev", 0), Turn: int64(h.intArg(t, d, "turn", 0))})

	case "fire":
		// Fire every timer of Pending that is due at the current time, in
		// order, as a runner's timer service would.
		var b strings.Builder
		for _, tm := range Pending(h.state).Timers {
			if tm.At.After(h.now) {
				continue
			}
			fmt.Fprintf(&b, "> %s\n", strings.TrimSpace(string(tm.Kind)+" "+tm.Action))
			b.WriteString(h.decide(t, tm.Command()))
		}
		if b.Len() == 0 {
			return "no timer due\n"
		}
		return b.String()

	case "settle":
		c := Settle{Action: h.strArg(t, d, "action", ""), Outcome: h.strArg(t, d, "outcome", events.OutcomeOutput), Summary: h.strArg(t, d, "summary", "")}
		text := strings.TrimSpace(d.Input)
		if c.Outcome == events.OutcomeOutput {
			c.Content = json.RawMessage(text)
		} else {
			c.Message = text
		}
		return h.decide(t, c)

	case "reconcile":
		return h.decide(t, Reconcile{Action: h.strArg(t, d, "action", ""), Content: json.RawMessage(strings.TrimSpace(d.Input)), By: h.strArg(t, d, "by", "carol"), Stored: d.HasArg("stored")})

	case "marked":
		// The claim a close found was marked not started by its worker,
		// as a runner read it (MarkedNotStarted): marked action=1/c1
		// [attempt=1 incarnation=1] [token=tok-1] worker=w-1 why=ended
		// (token: the marked claim's, tok-1 unless given).
		a, _ := h.state.Action(h.strArg(t, d, "action", ""))
		return h.decide(t, MarkedNotStarted{Action: a.ID, Attempt: h.intArg(t, d, "attempt", a.Attempts), Incarnation: h.intArg(t, d, "incarnation", a.Attempt.Incarnation),
			Token:  h.strArg(t, d, "token", "tok-1"),
			Worker: h.strArg(t, d, "worker", "w-1"), Why: h.strArg(t, d, "why", "ended"), By: h.strArg(t, d, "by", "runner-a")})

	case "resolve_question":
		// The final truth of an open question (Resolve).
		return h.decide(t, Resolve{Action: h.strArg(t, d, "action", ""), Content: json.RawMessage(strings.TrimSpace(d.Input)), By: h.strArg(t, d, "by", "erin")})

	case "child":
		// The outcome of a delegated action's child run:
		// child action=1/c1 kind=completed turns=2 with the answer as input.
		a, _ := h.state.Action(h.strArg(t, d, "action", ""))
		child := h.strArg(t, d, "child", "")
		if child == "" && a.Child != nil {
			child = a.Child.Child
		}
		o := events.Outcome{Kind: h.strArg(t, d, "kind", events.OutcomeCompleted), Reason: h.strArg(t, d, "reason", "")}
		if text := strings.TrimSpace(d.Input); text != "" {
			o.Answer = json.RawMessage(text)
		}
		return h.decide(t, ChildSettle{Action: a.ID, Child: child, Outcome: o, Turns: int64(h.intArg(t, d, "turns", 1))})

	case "tool-missing":
		return h.decide(t, ToolMissing{Action: h.strArg(t, d, "action", ""), Tool: h.strArg(t, d, "tool", "")})

	case "cancel":
		id, p := h.commandProof(t, d, "cancel")
		return h.decide(t, Cancel{By: h.strArg(t, d, "by", "dave"), Reason: h.strArg(t, d, "reason", ""), Identity: id, Proof: p})

	case "pause":
		id, p := h.commandProof(t, d, "pause")
		return h.decide(t, Pause{By: h.strArg(t, d, "by", "dave"), Reason: h.strArg(t, d, "reason", ""), Identity: id, Proof: p})

	case "resume":
		id, p := h.commandProof(t, d, "resume")
		return h.decide(t, Resume{By: h.strArg(t, d, "by", "dave"), Reason: h.strArg(t, d, "reason", ""), Identity: id, Proof: p})

	case "handoff":
		return h.decide(t, HandOff{Runner: h.strArg(t, d, "runner", h.state.Runner()), ModelNotCalled: d.HasArg("uncalled")})

	case "recover":
		return h.decide(t, Recover{Runner: h.strArg(t, d, "runner", "runner-b"), Cause: h.causeArg(t, d)})

	case "takeover":
		// The next command reaches a run that needs takeover: it is
		// decided as Recover{Then: command}, in one decision.
		h.takeover = &Recover{Runner: h.strArg(t, d, "runner", "runner-b"), Cause: h.causeArg(t, d)}
		if d.HasArg("derived") {
			return fmt.Sprintf("the next command takes the run over first (cause %s, as a runner derives it from the log)\n", h.takeover.Cause)
		}
		return "the next command takes the run over first\n"

	case "close":
		// The next command is decided with this close outcome (one per
		// close command): close action=1/c1 attempt=1 incarnation=1
		// why=cancelled closed|claimed|unknown [by=runner-b]
		// [not_started_by=w-1 not_started_why=ended] (with closed: the
		// worker's claim it found marked not started) [token=tok-1 |
		// no_token] (with claimed: the found claim's token, tok-1 unless
		// given; no_token: a close recorded before the token was).
		cl := Close{Action: h.strArg(t, d, "action", ""), Attempt: h.intArg(t, d, "attempt", 1),
			Incarnation: h.intArg(t, d, "incarnation", 1), Why: h.strArg(t, d, "why", events.ClosedCancelled), Closed: d.HasArg("closed"),
			Claimed: d.HasArg("claimed"), By: h.strArg(t, d, "by", "")}
		if cl.Claimed && !d.HasArg("no_token") {
			cl.ClaimWorker, cl.ClaimToken = "w-1", h.strArg(t, d, "token", "tok-1")
		}
		if d.HasArg("not_started_by") {
			cl.NotStarted = &events.ClosedNotStarted{Worker: h.strArg(t, d, "not_started_by", ""), Why: h.strArg(t, d, "not_started_why", "")}
		}
		h.closes = append(h.closes, cl)
		return fmt.Sprintf("the next command is decided with %d close outcome(s)\n", len(h.closes))

	case "to-close":
		// The next command's output starts with what ToClose lists for
		// it (decided without closes): the attempts a runner closes first.
		h.toClose = true
		return "the next command lists what it would close\n"

	case "tick":
		h.now = h.now.Add(time.Duration(h.intArg(t, d, "ms", 0)) * time.Millisecond)
		return fmt.Sprintf("now %s\n", h.now.Format(time.RFC3339Nano))

	case "status":
		return describeStatus(Status(h.state)) + "\n"

	case "pending":
		// pending draining: the work a draining runner performs.
		w := Pending(h.state)
		if d.HasArg("draining") {
			w = w.Draining()
		}
		return describeWork(w)

	case "plan-answer":
		// The order of an answer's checks before the runner's I/O
		// (PlanAnswer): plan-answer answer=approve|reject action=… rev=…
		// [approver=…] [approvers].
		c := AnswerCheck{Answer: h.strArg(t, d, "answer", events.AnswerApprove), Action: h.strArg(t, d, "action", ""), Revision: h.intArg(t, d, "rev", 0),
			Approver: h.strArg(t, d, "approver", ""), Approvers: d.HasArg("approvers")}
		p, err := PlanAnswer(h.state, c, h.now)
		if err != nil {
			return fmt.Sprintf("refused: %v\n", err)
		}
		var b strings.Builder
		if p.Verify {
			fmt.Fprintf(&b, "verify the proof against %s revision=%d requirement=%s@v%d\n", p.Action.ID, p.Request.Revision, p.Request.Requirement.Name, p.Request.Requirement.Version)
		}
		if p.Refusal != nil {
			fmt.Fprintf(&b, "record due expiries, then refuse: %v\n", p.Refusal)
		} else {
			b.WriteString("decide the answer\n")
		}
		return b.String()

	case "worker-lost":
		// A worker's report that an attempt was lost, mapped to a command
		// (LostCommand) and decided.
		c, err := LostCommand(h.strArg(t, d, "action", ""), h.intArg(t, d, "attempt", 1), h.strArg(t, d, "cause", ""), strings.TrimSpace(d.Input))
		switch {
		case err != nil:
			return fmt.Sprintf("refused: %v\n", err)
		case c == nil:
			return "no command: the run is woken (due timers applied)\n"
		}
		return fmt.Sprintf("> %s\n", c.CommandName()) + h.decide(t, c)

	case "reply-unrecordable":
		// The reply of turn could not be recorded: too large
		// (UnrecordableReply).
		return h.decide(t, UnrecordableReply(int64(h.intArg(t, d, "turn", int(h.state.Turn()))), strings.TrimSpace(d.Input)))

	case "settle-wait":
		// Whether a settlement of action offered now waits for its body
		// (AwaitBody) with grace=ms.
		wait, err := AwaitBody(h.state, h.strArg(t, d, "action", ""), time.Duration(h.intArg(t, d, "grace", 0))*time.Millisecond, h.now)
		switch {
		case err != nil:
			return fmt.Sprintf("stop waiting: %v\n", err)
		case wait:
			return "wait for the body\n"
		}
		return "decide now\n"

	case "fold":
		// Hand-written events evolved as a log written elsewhere would
		// hold them, without a decision: one per line, "name {payload}"
		// (events.Decode at schema 1). For states no decision of this
		// core produces but a fold of another writer's log could.
		var evs []events.Event
		for _, l := range lines(d.Input) {
			name, payload, _ := strings.Cut(l, " ")
			e, err := events.Decode(events.Name(name), 1, json.RawMessage(payload))
			if err != nil {
				t.Fatalf("fold %q: %v", l, err)
			}
			evs = append(evs, e)
		}
		var b strings.Builder
		h.append(t, evs, &b)
		return b.String()

	case "attempt-current":
		// Whether an attempt is still the one the run waits for
		// (FenceVisible, AttemptCurrent, AttemptRunning):
		// attempt-current action=… attempt=N incarnation=N.
		action, attempt, inc := h.strArg(t, d, "action", ""), h.intArg(t, d, "attempt", 1), h.intArg(t, d, "incarnation", 1)
		return fmt.Sprintf("visible=%v current=%v running=%v\n", FenceVisible(h.state, action, attempt, inc),
			AttemptCurrent(h.state, action, attempt, inc), AttemptRunning(h.state, action, attempt, inc))

	case "lacks-tool":
		// Whether an agent binding only the tools listed (binds=a,b)
		// lacks the tool of a live action (LacksTool).
		binds := map[string]bool{}
		for _, n := range strings.Split(h.strArg(t, d, "binds", ""), ",") {
			binds[n] = true
		}
		return fmt.Sprintf("lacks a tool: %v\n", LacksTool(h.state, func(tool string) bool { return binds[tool] }))

	case "other-queue":
		// Whether a report of action received on a queue belongs there
		// (OtherQueue): other-queue action=… agent=… version=… tool=….
		q := Queue{Agent: events.AgentRef{Name: h.strArg(t, d, "agent", "desk"), Version: h.strArg(t, d, "version", "1")}, Tool: h.strArg(t, d, "tool", "")}
		if why := OtherQueue(h.state, h.strArg(t, d, "action", ""), q, "the-queue"); why != "" {
			return "other queue: " + why + "\n"
		}
		return "its queue\n"

	case "policy-outcome":
		// How a policy's answer is recorded (PolicyOutcome):
		// policy-outcome kind=… [reason=…] [requirement=name@vN] [error=…].
		var req events.Requirement
		if d.HasArg("requirement") {
			name, v, _ := strings.Cut(h.strArg(t, d, "requirement", ""), "@v")
			req = events.Requirement{Name: name, Version: atoi(t, v)}
		}
		var err error
		if d.HasArg("error") {
			err = errors.New(h.strArg(t, d, "error", ""))
		}
		p := PolicyOutcome(h.strArg(t, d, "kind", ""), h.strArg(t, d, "reason", ""), req, err)
		s := "decision=" + p.Decision
		if p.Reason != "" {
			s += fmt.Sprintf(" reason=%q", p.Reason)
		}
		if p.Requirement != (events.Requirement{}) {
			s += fmt.Sprintf(" requirement=%s@v%d", p.Requirement.Name, p.Requirement.Version)
		}
		return s + "\n"

	case "actions":
		var b strings.Builder
		for _, a := range h.state.Actions() {
			b.WriteString(describeAction(a))
			b.WriteByte('\n')
		}
		return b.String()

	case "transcript":
		var b strings.Builder
		for _, m := range Transcript(h.state) {
			b.WriteString(describeMessage(m))
			b.WriteByte('\n')
		}
		return b.String()

	case "run":
		o, fin := h.state.Finished()
		s := fmt.Sprintf("turn=%d tokens=%d unreported=%d incarnation=%d runner=%s finished=%v outcome=%s version=%d",
			h.state.Turn(), h.state.TokensUsed(), h.state.UnreportedReplies(), h.state.Incarnation(), h.state.Runner(), fin, events.DescribeOutcome(o), h.state.Version())
		if h.state.ChildTurns() != 0 || h.state.Parent() != nil {
			s += fmt.Sprintf(" depth=%d child_turns=%d family=%d/%d", h.state.Depth(), h.state.ChildTurns(), h.state.FamilyUsed(), h.state.FamilyBudget())
		}
		return s + "\n"
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

// policyOf parses "allow|deny <reason>|error <reason>|approval <name@vN>"
// followed by tool settings "timeout=MS|inf attempts=N settle=MS".
func policyOf(t *testing.T, f []string) (PolicyResult, events.ToolConfig) {
	var p PolicyResult
	var tool events.ToolConfig
	var rest []string
	for _, w := range f {
		k, v, ok := strings.Cut(w, "=")
		if !ok {
			rest = append(rest, w)
			continue
		}
		switch k {
		case "timeout":
			tool.Timeout = parseMs(t, v)
		case "attempts":
			tool.MaxAttempts = atoi(t, v)
		case "settle":
			tool.SettleWithin = parseMs(t, v)
		default:
			t.Fatalf("tool setting %q", w)
		}
	}
	if len(rest) == 0 {
		t.Fatalf("no policy decision in %q", f)
	}
	switch rest[0] {
	case "allow":
		p.Decision = events.PolicyAllow
	case "deny":
		p.Decision = events.PolicyDeny
		p.Reason = strings.Join(rest[1:], " ")
	case "error":
		p.Decision = events.PolicyError
		p.Reason = strings.Join(rest[1:], " ")
	case "approval":
		p.Decision = events.PolicyRequireApproval
		name, v, _ := strings.Cut(rest[1], "@v")
		p.Requirement = events.Requirement{Name: name, Version: atoi(t, v)}
	default:
		t.Fatalf("policy %q", rest[0])
	}
	return p, tool
}

func toolOf(t *testing.T, d *datadriven.TestData, tool events.ToolConfig) events.ToolConfig {
	if d.HasArg("timeout") {
		var v string
		d.ScanArgs(t, "timeout", &v)
		tool.Timeout = parseMs(t, v)
	}
	if d.HasArg("attempts") {
		d.ScanArgs(t, "attempts", &tool.MaxAttempts)
	}
	if d.HasArg("settle") {
		var v string
		d.ScanArgs(t, "settle", &v)
		tool.SettleWithin = parseMs(t, v)
	}
	return tool
}

func (h *harness) intArg(t *testing.T, d *datadriven.TestData, key string, def int) int {
	if !d.HasArg(key) {
		return def
	}
	var v int
	d.ScanArgs(t, key, &v)
	return v
}

// causeArg is a takeover's cause: cause=…, or with derived the cause a
// runner derives from the log (RecoveryCause), runner_lost by default.
func (h *harness) causeArg(t *testing.T, d *datadriven.TestData) string {
	if d.HasArg("derived") {
		return RecoveryCause(h.state)
	}
	return h.strArg(t, d, "cause", events.RecoveredRunnerLost)
}

// commandProof is the signed command proof of a person's command with
// key=K (none without): the statement of command on the run with the
// command's reason, by key K, expiring a minute after the script's epoch,
// and its identity (verified, by K). The aggregate checks no signature
// (the runner does, approvers.People), only that the proof was not
// recorded before.
func (h *harness) commandProof(t *testing.T, d *datadriven.TestData, command string) (events.Identity, *events.CommandProof) {
	key := h.strArg(t, d, "key", "")
	if key == "" {
		return events.Identity{}, nil
	}
	p := &events.CommandProof{Key: key, Command: command, Run: h.state.Run(), Reason: h.strArg(t, d, "reason", ""),
		Expires: epoch.Add(time.Minute), Signature: "sig-" + key}
	return events.Identity{Verified: true, Key: key}, p
}

func (h *harness) strArg(t *testing.T, d *datadriven.TestData, key, def string) string {
	if !d.HasArg(key) {
		return def
	}
	var v string
	d.ScanArgs(t, key, &v)
	return v
}

func (h *harness) msArg(t *testing.T, d *datadriven.TestData, key string, def events.Millis) events.Millis {
	if !d.HasArg(key) {
		return def
	}
	return parseMs(t, h.strArg(t, d, key, ""))
}

func parseMs(t *testing.T, v string) events.Millis {
	if v == "inf" {
		return events.Infinite
	}
	return events.Millis(atoi(t, v))
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func describeStatus(st RunStatus) string {
	s := string(st.Kind)
	switch st.Kind {
	case StatusFinished:
		s += " " + events.DescribeOutcome(st.Outcome)
	}
	if len(st.Approvals) > 0 {
		s += fmt.Sprintf(" approvals=%v", st.Approvals)
	}
	if len(st.Uncertain) > 0 {
		s += fmt.Sprintf(" uncertain=%v", st.Uncertain)
	}
	return s
}

func describeWork(w Work) string {
	var b strings.Builder
	if w.Finished {
		b.WriteString("finished\n")
	}
	if w.Model != nil {
		fmt.Fprintf(&b, "model turn=%d", w.Model.Turn)
		if !w.Model.Deadline.IsZero() {
			fmt.Fprintf(&b, " deadline=%s", w.Model.Deadline.Format(time.RFC3339Nano))
		}
		if w.Model.RecordOnly {
			b.WriteString(" record-only")
		}
		b.WriteByte('\n')
	}
	if w.Resolve != nil {
		ids := make([]string, len(w.Resolve.Calls))
		for i, c := range w.Resolve.Calls {
			ids[i] = c.ID + ":" + c.Name
		}
		fmt.Fprintf(&b, "resolve turn=%d calls=%v\n", w.Resolve.Turn, ids)
	}
	for _, d := range w.Dispatch {
		fmt.Fprintf(&b, "dispatch %s tool=%s attempt=%d incarnation=%d args=%s\n", d.Action, d.Tool, d.Attempt, d.Fence.Incarnation, d.Arguments)
	}
	for _, tm := range w.Timers {
		fmt.Fprintf(&b, "timer %s at=%s", tm.Kind, tm.At.Format(time.RFC3339Nano))
		if tm.Action != "" {
			fmt.Fprintf(&b, " action=%s", tm.Action)
		}
		if tm.Attempt != 0 {
			fmt.Fprintf(&b, " attempt=%d", tm.Attempt)
		}
		if tm.Revision != 0 {
			fmt.Fprintf(&b, " revision=%d", tm.Revision)
		}
		b.WriteByte('\n')
	}
	for _, c := range w.Children {
		fmt.Fprintf(&b, "child %s run=%s agent=%s@%s input=%q depth=%d family_turns=%d cancel=%v\n", c.Parent.Action, c.Start.Child, c.Start.Agent.Name, c.Start.Agent.Version, c.Start.Input, c.Parent.Depth, c.Parent.FamilyTurns, c.Cancel)
	}
	if b.Len() == 0 {
		return "nothing\n"
	}
	return b.String()
}

func describeAction(a Action) string {
	s := fmt.Sprintf("%s tool=%s state=%s attempts=%d", a.ID, a.Tool, a.State, a.Attempts)
	if a.Detail != "" {
		s += fmt.Sprintf(" detail=%q", a.Detail)
	}
	if len(a.Content) > 0 {
		s += " content=" + string(a.Content)
	}
	if a.Agent != nil {
		s += " agent=" + a.Agent.Name + "@" + a.Agent.Version
	}
	if a.Child != nil {
		s += " child=" + a.Child.Child
	}
	if a.Request.Revision != 0 {
		s += fmt.Sprintf(" request=%d:%s@v%d", a.Request.Revision, a.Request.Requirement.Name, a.Request.Requirement.Version)
	}
	for _, an := range a.Answers {
		s += fmt.Sprintf(" answer=%d:%s", an.Revision, an.Answer)
		if an.Reviewer != "" {
			s += "/" + an.Reviewer
		}
		if an.Verifier != "" {
			s += "/" + an.Verifier
		}
	}
	return s
}

func describeMessage(m events.Message) string {
	s := string(m.Role)
	if m.Text != "" {
		s += fmt.Sprintf(" %q", m.Text)
	}
	for _, c := range m.Calls {
		s += fmt.Sprintf(" call=%s:%s%s", c.ID, c.Name, c.Arguments)
	}
	if len(m.ProviderData) > 0 {
		s += " provider_data=" + string(m.ProviderData)
	}
	for _, r := range m.Results {
		s += fmt.Sprintf(" result=%s:%s", r.CallID, r.Content)
	}
	return s
}
