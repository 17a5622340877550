// Package aggregatetest drives runs through the aggregate with random
// commands, for randomized tests of the aggregate itself and of everything
// that folds its events (projections, audit). The choices come from a
// Source: a seeded math/rand/v2 generator (Rand) or a property-testing
// framework's draws, so that any failure is reproducible from its seed.
//
// The commands are what a runner and the outside world could send: the work
// Pending asks for (model replies and failures, validation and policy
// outcomes, worker reports, timers) and also stale, duplicate, racing and
// out-of-place ones (old attempts, superseded revisions, settlements of
// running bodies, cancels, hand-offs, recoveries).
package aggregatetest

import (
	"encoding/json"
	"math/rand/v2"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
)

// Source supplies random choices: Intn returns a number in [0, n). Label
// names the choice for frameworks that log their draws.
type Source interface {
	Intn(label string, n int) int
}

// Rand returns a Source from a seeded PCG generator.
func Rand(seed uint64) Source {
	return randSource{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

type randSource struct{ r *rand.Rand }

func (s randSource) Intn(_ string, n int) int { return s.r.IntN(n) }

// Epoch is the store time at which every simulated run starts.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Timed is a command and the store time it was decided at.
type Timed struct {
	Command aggregate.Command
	Now     time.Time
}

// Sim is one simulated run. Apply decides a command at Now, "appends" the
// events (stamping versions and Now) and evolves State, like a runner.
type Sim struct {
	Run      string
	Now      time.Time
	State    aggregate.State
	History  []events.Recorded
	Commands []Timed
	// Check, when set, is called after every decision with the state before
	// it, the command, and its outcome; State and History already include
	// the events.
	Check func(before aggregate.State, c aggregate.Command, evs []events.Event, err error)
}

// New returns a simulation of run "r1" at Epoch; Start starts the run.
func New() *Sim { return &Sim{Run: "r1", Now: Epoch} }

// Start decides the Start command with limits chosen by src.
func (s *Sim) Start(src Source) {
	s.Apply(aggregate.Start{Run: s.Run, Agent: events.AgentRef{Name: "sim", Version: "1"}, Input: "go", Typed: true, Runner: "r0",
		Limits: events.Limits{MaxTurns: int64(1 + src.Intn("turns", 8)), MaxConcurrency: 1 + src.Intn("concurrency", 2),
			ModelTimeout: 1000, ModelRetryDelay: 10, ToolTimeout: 100, MaxResultBytes: 1000, ApprovalExpiry: 300, AnswerAttempts: 2,
			MaxChildren: src.Intn("children", 3), MaxDepth: src.Intn("depth", 2)}})
}

// Apply decides c at s.Now and appends what Decide returned.
func (s *Sim) Apply(c aggregate.Command) ([]events.Event, error) {
	evs, err := aggregate.Decide(s.State, c, s.Now)
	s.Commands = append(s.Commands, Timed{c, s.Now})
	before := s.State.Clone()
	for _, e := range evs {
		r := events.Recorded{Run: s.Run, Version: s.State.Version() + 1, At: s.Now, Event: e}
		s.History = append(s.History, r)
		s.State = aggregate.Evolve(s.State, r)
	}
	if s.Check != nil {
		s.Check(before, c, evs, err)
	}
	return evs, err
}

// Events returns the events of the history.
func (s *Sim) Events() []events.Event {
	out := make([]events.Event, len(s.History))
	for i, r := range s.History {
		out[i] = r.Event
	}
	return out
}

// RandomRun starts a run and applies steps random commands.
func RandomRun(src Source, steps int) *Sim {
	s := New()
	s.Start(src)
	for range steps {
		s.Step(src)
	}
	return s
}

var callIDs = []string{"a", "b", "c", "d"}

func pick[E any](src Source, label string, xs []E) E { return xs[src.Intn(label, len(xs))] }

func chance(src Source, label string, n int) bool { return src.Intn(label, n) == 0 }

// Step applies one random command (or advances the clock).
func (s *Sim) Step(src Source) {
	w := aggregate.Pending(s.State)
	var choices []func()
	if w.Model != nil {
		turn := w.Model.Turn
		choices = append(choices, func() {
			kind := pick(src, "reply", []string{"final", "tools", "tools", "tools", "tools", "tools", "tools", "tools", "tools", "refusal", "empty"})
			r := model.Reply{Usage: &model.Usage{InputTokens: 1, OutputTokens: 1}}
			c := aggregate.ModelReply{Turn: turn}
			switch kind {
			case "final":
				r.Kind = model.ReplyFinalAnswer
				r.Turn.Text = `{"ok":true}`
				c.Answer = json.RawMessage(r.Turn.Text)
				if chance(src, "bad answer", 2) {
					c.Answer, c.AnswerError = nil, "unreadable"
				}
			case "tools", "empty":
				r.Kind = model.ReplyToolRequest
				if kind == "tools" {
					n := 1 + src.Intn("calls", 3)
					for i := range n {
						id := callIDs[i]
						if chance(src, "dup", 21) {
							id = callIDs[0]
						}
						r.Turn.Calls = append(r.Turn.Calls, model.ToolCall{ID: id, Name: "tool", Arguments: json.RawMessage(`{}`)})
					}
				}
			case "refusal":
				r.Kind = model.ReplyRefusal
			}
			c.Reply = r
			s.Apply(c)
		})
		if chance(src, "model fails", 4) {
			choices = append(choices, func() {
				kind := pick(src, "failure", []model.ErrorKind{model.ErrTimedOut, model.ErrOverloaded, model.ErrRejected})
				s.Apply(aggregate.ModelFailure{Turn: turn, Kind: kind})
			})
		}
	}
	if w.Resolve != nil {
		b := w.Resolve
		choices = append(choices, func() {
			c := aggregate.ResolveCalls{Turn: b.Turn}
			for _, call := range b.Calls {
				r := aggregate.Resolution{CallID: call.ID, Validation: events.CallValid}
				switch src.Intn("validation", 10) {
				case 0:
					r.Validation = events.CallUnknownTool
				case 1:
					r.Validation = events.CallInvalidArguments
				}
				switch src.Intn("policy", 20) {
				case 0:
					r.Policy = aggregate.PolicyResult{Decision: events.PolicyError}
				case 1, 2, 3:
					r.Policy = aggregate.PolicyResult{Decision: events.PolicyDeny, Reason: "no"}
				case 4, 5, 6, 7, 8, 9:
					r.Policy = aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 1}}
				default:
					r.Policy = aggregate.PolicyResult{Decision: events.PolicyAllow}
				}
				r.Tool = randomTool(src)
				if chance(src, "delegation", 4) {
					r.Delegate = &events.AgentRef{Name: "sub", Version: "1"}
				}
				c.Calls = append(c.Calls, r)
			}
			s.Apply(c)
		})
	}
	for _, a := range s.State.Actions() {
		switch a.State {
		case aggregate.ActionRunning, aggregate.ActionSettling, aggregate.ActionUncertain:
			choices = append(choices, func() {
				attempt := a.Attempts
				if chance(src, "stale attempt", 10) {
					attempt--
				}
				switch src.Intn("worker", 6) {
				case 0, 1:
					s.Apply(aggregate.Report{Action: a.ID, Attempt: attempt, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"v":1}`)})
				case 2:
					s.Apply(aggregate.Report{Action: a.ID, Attempt: attempt, Outcome: events.OutcomeExplain, Message: "bad"})
				case 3:
					s.Apply(aggregate.Report{Action: a.ID, Attempt: attempt, Outcome: events.OutcomeUncertain, Evidence: "hm"})
				case 4:
					s.Apply(aggregate.Lost{Action: a.ID, Attempt: attempt, Cause: events.CauseWorkerLost})
				case 5:
					s.Apply(aggregate.Settle{Action: a.ID, Outcome: pick(src, "settle", []string{events.OutcomeOutput, events.OutcomeUncertain}), Content: json.RawMessage(`{"s":1}`)})
				}
			})
		}
		if a.State == aggregate.ActionDelegated {
			choices = append(choices, func() {
				child := a.Child.Child
				if chance(src, "foreign child", 10) {
					child = "child-x"
				}
				o := pick(src, "child outcome", []events.Outcome{
					{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"done"`)},
					{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"a child answer far too long for the run's max result bytes ` + repeat1000("x") + `"`)},
					{Kind: events.OutcomeCancelled},
					{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonFamilyLimit},
				})
				s.Apply(aggregate.ChildSettle{Action: a.ID, Child: child, Outcome: o, Turns: int64(src.Intn("child turns", 4))})
			})
		}
		if !a.State.Ended() && a.State != aggregate.ActionUncertain && chance(src, "tool changed", 40) {
			choices = append(choices, func() { s.Apply(aggregate.ToolMissing{Action: a.ID, Tool: a.Tool}) })
		}
		if a.State == aggregate.ActionUncertain {
			choices = append(choices, func() {
				_, fin := s.State.Finished()
				s.Apply(aggregate.Reconcile{Action: a.ID, Content: json.RawMessage(`{"unconfirmed":"n"}`), Stored: fin})
			})
		}
		if a.Request.Revision > 0 {
			choices = append(choices, func() {
				rev := a.Request.Revision
				if chance(src, "stale revision", 4) {
					rev--
				}
				if chance(src, "approve", 2) {
					p := aggregate.PolicyResult{Decision: events.PolicyAllow}
					switch src.Intn("rerun", 10) {
					case 0:
						p = aggregate.PolicyResult{Decision: events.PolicyDeny}
					case 1, 2, 3:
						p = aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 2}}
					}
					s.Apply(aggregate.Approve{Action: a.ID, Revision: rev, Reviewer: "x", Policy: p, Tool: randomTool(src)})
				} else {
					s.Apply(aggregate.Reject{Action: a.ID, Revision: rev})
				}
			})
		}
	}
	if len(w.Timers) > 0 {
		choices = append(choices, func() {
			tm := pick(src, "timer", w.Timers)
			if tm.At.After(s.Now) {
				s.Now = tm.At
			}
			s.Apply(tm.Command())
		})
	}
	choices = append(choices, func() {
		s.Now = s.Now.Add(time.Duration(1+src.Intn("tick", 100)) * time.Millisecond)
	})
	if chance(src, "rare", 31) {
		choices = append(choices,
			func() { s.Apply(aggregate.Cancel{}) },
			func() { s.Apply(aggregate.HandOff{Runner: "r", ModelNotCalled: chance(src, "uncalled", 2)}) },
			func() {
				cause := events.RecoveredRunnerLost
				if s.State.HandedOff() {
					cause = events.RecoveredHandedOff
				}
				s.Apply(aggregate.Recover{Runner: "n", Cause: cause})
			})
	}
	choices[src.Intn("choice", len(choices))]()
}

// repeat1000 repeats x 1000 times (a child answer over the simulated max
// result bytes).
func repeat1000(x string) string {
	b := make([]byte, 0, 1000*len(x))
	for range 1000 {
		b = append(b, x...)
	}
	return string(b)
}

func randomTool(src Source) events.ToolConfig {
	c := events.ToolConfig{MaxAttempts: 1 + src.Intn("attempts", 3)}
	if chance(src, "timeout", 2) {
		c.Timeout = 50
	}
	if chance(src, "settling", 2) {
		c.SettleWithin = 20
	}
	return c
}

// Describe returns the history as Describe lines, one per event.
func Describe(evs []events.Event) string {
	var b []byte
	for _, e := range evs {
		b = append(b, events.Describe(e)...)
		b = append(b, '\n')
	}
	return string(b)
}
