// Package aggregatetest drives runs through the aggregate with random
// commands, for randomized tests of the aggregate itself and of everything
// that folds its events (projections, audit). The choices come from a
// Source: a seeded math/rand/v2 generator (Rand) or a property-testing
// framework's draws, so that any failure is reproducible from its seed.
//
// The simulation plays every party of a run. The runner drives it like a
// real one: it performs the work the appended events call for (model
// calls, call resolutions, dispatches, child runs; Sim.InFlight), answers
// with what its model and policy say, and may die (no hand-off), drain
// (HandOff; until it exits, commands reaching it are decided by it on the
// handed-off run, without a takeover) or fail to append a decision (the
// decision is lost, the work is derived again from Pending). Workers run the dispatched bodies
// (Sim.Bodies) and report them, late or lost (every cause). People
// approve, reject, reconcile, settle and cancel, also with stale
// references. Timers fire due, early, late and stale. A command that
// reaches a run whose runner is gone takes it over (Recover with Then).
//
// The simulation checks docs/semantics.md §8's "no run stays in flight with
// nothing in flight" as it goes, and records violations in Sim.Problems:
// after every append by a live runner, the work Pending lists equals the
// work the appended events called for; after every append, the timers
// Pending lists equal the timers the events armed and did not disarm; a
// working run under a live runner always has work listed. After a failed
// append the driver derives the work the lost decision answered again
// from Pending and retries it, so a run whose work was dropped shows at
// the following appends.
package aggregatetest

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
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

// Epoch returns the store time at which every simulated run starts.
func Epoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Timed is a command and the store time it was decided at.
type Timed struct {
	Command aggregate.Command
	Now     time.Time
}

// Sim is one simulated run. Apply decides a command at Now, "appends" the
// events (stamping versions and Now) and evolves State, like a runner.
type Sim struct {
	Run     string
	Now     time.Time
	State   aggregate.State
	History []events.Recorded
	// Commands are the decided commands whose events were appended (a
	// failed append is not among them): deciding them again at their
	// times from the empty State gives History.
	Commands []Timed
	// Check, when set, is called after every decision with the state before
	// it, the command, and its outcome; State and History already include
	// the events.
	Check func(before aggregate.State, c aggregate.Command, evs []events.Event, err error)

	// Driver is the runner driving the run. Down is set once it was
	// killed (no hand-off) until a takeover.
	Driver string
	Down   bool
	// Draining is set while the driver that handed the run off is still
	// alive within its drain window: commands forwarded to it are decided
	// by it on the handed-off run, without a takeover, until it exits.
	Draining bool
	// TwoStepTakeover decides a takeover's recovery and the command that
	// triggered it as two decisions (Recover alone, then the command), as
	// runners did before Recover.Then: the recovery's follow-ons are then
	// performed before the command is decided (docs/semantics.md §7 forbids
	// it). TakeoverFor is that command while its recovery is decided.
	TwoStepTakeover bool
	TakeoverFor     aggregate.Command
	// InFlight is the work the driver performs, as keys of WorkKeys: added
	// and removed as the appended events call for it, cleared when the
	// driver dies or hands off, derived from Pending by a takeover.
	InFlight map[string]bool
	// Bodies are the attempts whose body a worker started and did not
	// report yet (they survive the runner), as action and attempt.
	Bodies []Body
	// Armed is every timer Pending ever listed, in the order first armed
	// (durable timers: old ones still fire, stale).
	Armed []aggregate.Timer
	// Timers are the timers the appended events call for (keys of
	// TimerKey): armed by an event (a fence's deadline, an approval
	// request's expiry, a settle window, a model retry) and not yet
	// disarmed by a later one (the attempt's outcome, the answer, the
	// settlement, the next model request, the run's end). Pending must
	// list exactly these, whoever drives the run: timers are durable.
	Timers map[string]bool
	// Problems lists the violations the simulation found (see the package
	// doc).
	Problems []string

	// Claims is the claims bucket (docs/adr/0023-closing-attempts.md): a
	// body's claim is "claimed" when a worker took it (the sim's worker
	// claims a body when it reports it) or "closed" when the driver closed
	// it first; a worker whose body's claim is closed drops the task, never
	// starting or reporting it. Now and then a worker claims and looks
	// again before the body ("holding"): it then starts the body if the
	// attempt is still current, or marks the claim "marked" (not started).
	Claims map[Body]string
	// Closes counts the closes the driver made (won, found, unknown).
	Closes int

	src     Source // the choices of Apply's closes
	runners int
	armed   map[string]bool // keys of Armed
	// guarded is set for a run whose policy asks approval for most calls
	// and whose tools mostly replay (payments behind a review): runner
	// losses and hand-offs then meet approved attempts and queued approved
	// actions often, the paths of docs/semantics.md §5 and §8 that re-ask, keep
	// or end an approval.
	guarded bool
}

// Body is an attempt whose body a worker runs.
type Body struct {
	Action  string
	Attempt int
}

// New returns a simulation of run "r1" at Epoch(); Start starts the run.
func New() *Sim {
	return &Sim{Run: "r1", Now: Epoch(), Driver: "r0", InFlight: map[string]bool{}, Timers: map[string]bool{}}
}

// Start decides the Start command with limits chosen by src: token
// budgets (sometimes none), typed and untyped agents, one to eight turns,
// approval expiry or none, a small max result bytes now and then.
func (s *Sim) Start(src Source) {
	l := events.Limits{MaxTurns: int64(1 + src.Intn("turns", 12)), MaxConcurrency: 1 + src.Intn("concurrency", 3),
		ModelTimeout: 1000, ModelRetryDelay: 10, ToolTimeout: 100, MaxResultBytes: 1000, ApprovalExpiry: 300,
		AnswerAttempts: 1 + src.Intn("answer attempts", 2), MaxChildren: src.Intn("children", 3), MaxDepth: src.Intn("depth", 2)}
	if chance(src, "token budget", 3) {
		l.TokenBudget = int64(3 + src.Intn("budget", 30))
	}
	if chance(src, "no approval expiry", 4) {
		l.ApprovalExpiry = events.Infinite
	}
	if chance(src, "small results", 5) {
		l.MaxResultBytes = 40
	}
	s.guarded = chance(src, "guarded", 3)
	s.src = src
	s.Apply(aggregate.Start{Run: s.Run, Agent: events.AgentRef{Name: "sim", Version: "1"}, Input: "go", Typed: !chance(src, "untyped", 3),
		Runner: s.Driver, Limits: l})
}

// Apply decides c at s.Now and appends what Decide returned. The driver
// then acts on the appended events (InFlight); a worker starts every
// dispatched body (Bodies).
//
// Before deciding a command that ends or abandons fenced attempts without
// a result of their own (aggregate.ToClose), the driver closes their
// claims, as a runner does, and decides aggregate.Closing instead: a close
// finds a worker's claim, wins, or has an unknown outcome (which may have
// landed all the same), chosen by the Source Start was given.
func (s *Sim) Apply(c aggregate.Command) ([]events.Event, error) {
	c = s.close(c)
	evs, err := aggregate.Decide(s.State, c, s.Now)
	s.Commands = append(s.Commands, Timed{c, s.Now})
	before := s.State.Clone()
	for _, e := range evs {
		r := events.Recorded{Run: s.Run, Version: s.State.Version() + 1, At: s.Now, Event: e}
		s.History = append(s.History, r)
		s.State = aggregate.Evolve(s.State, r)
	}
	s.act(evs)
	if before.Paused() && s.State.Paused() {
		// docs/semantics.md §13: a decision on a paused run that does not
		// resume it fences nothing, starts no child run and requests no
		// new turn (a turn lost with its runner is requested again, and
		// only recorded).
		for _, e := range evs {
			switch e := e.(type) {
			case events.AttemptFenced:
				s.problem("(p) %s fenced %s attempt %d on a paused run", c.CommandName(), e.Action, e.Attempt)
			case events.ChildStarted:
				s.problem("(p) %s started the child run of %s on a paused run", c.CommandName(), e.Action)
			case events.ModelRequested:
				if e.Why != events.TurnRecovery {
					s.problem("(p) %s requested turn %d (%s) on a paused run", c.CommandName(), e.Turn, e.Why)
				}
			}
		}
	}
	if s.Check != nil {
		s.Check(before, c, evs, err)
	}
	return evs, err
}

// close closes the claims of the attempts c ends or abandons and returns
// the command to decide: c, or aggregate.Closing with the outcomes.
func (s *Sim) close(c aggregate.Command) aggregate.Command {
	if s.src == nil {
		return c
	}
	evs, _ := aggregate.Decide(s.State, c, s.Now)
	closes := aggregate.ToClose(s.State, c, evs)
	if len(closes) == 0 {
		return c
	}
	if s.Claims == nil {
		s.Claims = map[Body]string{}
	}
	for i, cl := range closes {
		b := Body{cl.Action, cl.Attempt}
		s.Closes++
		switch s.Claims[b] {
		case "claimed", "holding":
			closes[i].Claimed = true // found the worker's claim
			closes[i].ClaimWorker, closes[i].ClaimToken = "w-1", simToken
		case "marked":
			// Found a worker's claim marked not started: closed.
			closes[i].Closed = true
			closes[i].NotStarted = &events.ClosedNotStarted{Worker: "w-1", Why: api.ClaimEnded}
		case "closed":
			closes[i].Closed = true // found its own closed value
		default:
			switch s.src.Intn("close", 5) {
			case 0: // unknown outcome, nothing landed: counted claimed
			case 1: // unknown outcome, landed: counted claimed all the same
				s.Claims[b] = "closed"
			default:
				s.Claims[b] = "closed"
				closes[i].Closed = true
			}
		}
	}
	return aggregate.Closing{By: s.Driver, Closes: closes, Then: c}
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

// WorkKeys names every piece of work of w but its timers (TimerKey names
// those): "model <turn>", "resolve <turn>", "dispatch <action>#<attempt>",
// "child <action>" (with " cancel" when the child must be cancelled).
func WorkKeys(w aggregate.Work) map[string]bool {
	k := map[string]bool{}
	if w.Model != nil {
		k[modelKey(w.Model.Turn)] = true
	}
	if w.Resolve != nil {
		k[resolveKey(w.Resolve.Turn)] = true
	}
	for _, d := range w.Dispatch {
		k[dispatchKey(d.Action, d.Attempt)] = true
	}
	for _, c := range w.Children {
		k[childKey(c.Start.Action, c.Cancel)] = true
	}
	return k
}

// TimerKey names a timer by everything its arming is idempotent on.
func TimerKey(t aggregate.Timer) string {
	return fmt.Sprintf("timer %s %s %d %d %d", t.Kind, t.Action, t.Attempt, t.Revision, t.Turn)
}

func modelKey(turn int64) string              { return fmt.Sprintf("model %d", turn) }
func resolveKey(turn int64) string            { return fmt.Sprintf("resolve %d", turn) }
func dispatchKey(action string, n int) string { return fmt.Sprintf("dispatch %s#%d", action, n) }
func childKey(action string, cancel bool) string {
	if cancel {
		return "child " + action + " cancel"
	}
	return "child " + action
}

// live reports whether a live runner drives the run (no takeover needed).
func (s *Sim) live() bool { return !s.Down && !s.State.HandedOff() }

// act updates the driver's work from appended events, as a runner acting
// on what it just appended (append first, then act), and checks it
// against Pending.
func (s *Sim) act(evs []events.Event) {
	s.trackTimers(evs)
	recovered := false
	for _, e := range evs {
		switch e := e.(type) {
		case events.ModelRequested:
			s.InFlight[modelKey(e.Turn)] = true
		case events.ModelReplied:
			delete(s.InFlight, modelKey(e.Turn))
			if e.Kind == events.ReplyToolRequest {
				s.InFlight[resolveKey(e.Turn)] = true
			}
		case events.ModelFailed:
			delete(s.InFlight, modelKey(e.Turn))
		case events.CallValidated:
			delete(s.InFlight, resolveKey(e.Turn))
		case events.AttemptFenced:
			s.InFlight[dispatchKey(e.Action, e.Attempt)] = true
			s.startBody(e.Action, e.Attempt)
		case events.AttemptReported:
			delete(s.InFlight, dispatchKey(e.Action, e.Attempt))
		case events.AttemptLost:
			delete(s.InFlight, dispatchKey(e.Action, e.Attempt))
		case events.ActionsNotStarted:
			// A running action whose attempts were all closed.
			for k := range s.InFlight {
				for _, a := range e.Actions {
					if strings.HasPrefix(k, "dispatch "+a+"#") {
						delete(s.InFlight, k)
					}
				}
			}
		case events.ChildStarted:
			s.InFlight[childKey(e.Action, false)] = true
		case events.ChildSettled:
			delete(s.InFlight, childKey(e.Action, false))
			delete(s.InFlight, childKey(e.Action, true))
		case events.CancelRequested:
			for k := range s.InFlight {
				switch {
				case strings.HasPrefix(k, "model "), strings.HasPrefix(k, "resolve "):
					delete(s.InFlight, k)
				case strings.HasPrefix(k, "child ") && !strings.HasSuffix(k, " cancel"):
					delete(s.InFlight, k)
					s.InFlight[k+" cancel"] = true
				}
			}
		case events.RunHandedOff:
			// The draining runner gives the run up: nothing of it is in
			// flight any more (its model call is abandoned).
			clear(s.InFlight)
		case events.RunRecovered:
			recovered = true
		case events.RunFinished:
			clear(s.InFlight)
		}
	}
	w := aggregate.Pending(s.State)
	listed := map[string]bool{}
	for _, t := range w.Timers {
		listed[TimerKey(t)] = true
	}
	if len(evs) > 0 && !maps.Equal(listed, s.Timers) {
		s.problem("(m) after %s the timers the events armed %v differ from Pending's %v", describe(evs), sortedKeys(s.Timers), sortedKeys(listed))
		s.Timers = listed
	}
	if recovered {
		// The new runner derives its work from the log.
		s.Down = false
		s.InFlight = WorkKeys(w)
		for _, d := range w.Dispatch {
			s.startBody(d.Action, d.Attempt)
		}
	}
	s.arm(w)
	if len(evs) == 0 || !s.live() {
		return
	}
	if want := WorkKeys(w); !maps.Equal(want, s.InFlight) {
		s.problem("(m) after %s the work in flight %v differs from Pending's %v", describe(evs), sortedKeys(s.InFlight), sortedKeys(want))
		s.InFlight = want
	}
	s.checkLive(w)
}

// trackTimers arms and disarms Timers as the appended events call for.
func (s *Sim) trackTimers(evs []events.Event) {
	key := func(kind aggregate.TimerKind, action string, attempt, revision int, turn int64) string {
		return TimerKey(aggregate.Timer{Kind: kind, Action: action, Attempt: attempt, Revision: revision, Turn: turn})
	}
	// disarm removes every timer of kind for action ("" for the run's).
	disarm := func(kind aggregate.TimerKind, action string) {
		prefix := fmt.Sprintf("timer %s %s ", kind, action)
		for k := range s.Timers {
			if strings.HasPrefix(k, prefix) {
				delete(s.Timers, k)
			}
		}
	}
	for _, e := range evs {
		switch e := e.(type) {
		case events.ModelFailed:
			if e.RetryAt != nil {
				s.Timers[key(aggregate.TimerModelRetry, "", 0, 0, e.Turn)] = true
			}
		case events.ModelRequested, events.CancelRequested:
			disarm(aggregate.TimerModelRetry, "")
		case events.ApprovalRequested:
			if e.Expires != nil {
				s.Timers[key(aggregate.TimerApprovalExpiry, e.Action, 0, e.Revision, 0)] = true
			}
		case events.ApprovalAnswered:
			delete(s.Timers, key(aggregate.TimerApprovalExpiry, e.Action, 0, e.Revision, 0))
		case events.ActionsNotStarted:
			for _, a := range e.Actions {
				disarm(aggregate.TimerApprovalExpiry, a)
				disarm(aggregate.TimerToolTimeout, a) // a running action whose attempts were all closed
			}
		case events.AttemptFenced:
			if e.Deadline != nil {
				s.Timers[key(aggregate.TimerToolTimeout, e.Action, e.Attempt, 0, 0)] = true
			}
		case events.AttemptLost:
			delete(s.Timers, key(aggregate.TimerToolTimeout, e.Action, e.Attempt, 0, 0))
			if e.Next == events.NextSettle {
				s.Timers[key(aggregate.TimerSettleWindow, e.Action, e.Attempt, 0, 0)] = true
			}
		case events.AttemptReported:
			delete(s.Timers, key(aggregate.TimerToolTimeout, e.Action, e.Attempt, 0, 0))
			delete(s.Timers, key(aggregate.TimerSettleWindow, e.Action, e.Attempt, 0, 0))
		case events.SettlementAccepted:
			disarm(aggregate.TimerSettleWindow, e.Action)
		case events.ActionUncertain:
			disarm(aggregate.TimerSettleWindow, e.Action)
			disarm(aggregate.TimerApprovalExpiry, e.Action)
		case events.RunFinished:
			clear(s.Timers)
		}
	}
}

// checkLive records a working run under a live runner with nothing to do.
func (s *Sim) checkLive(w aggregate.Work) {
	if st := aggregate.Status(s.State); s.live() && st.Kind == aggregate.StatusWorking && len(WorkKeys(w)) == 0 && len(w.Timers) == 0 {
		s.problem("(m) run working under live runner %s with nothing in flight", s.Driver)
	}
}

func (s *Sim) problem(format string, args ...any) {
	s.Problems = append(s.Problems, fmt.Sprintf(format, args...))
}

func (s *Sim) startBody(action string, attempt int) {
	b := Body{action, attempt}
	if !slices.Contains(s.Bodies, b) {
		s.Bodies = append(s.Bodies, b)
	}
}

// arm arms every timer of w (durably: an armed timer stays armed).
func (s *Sim) arm(w aggregate.Work) {
	if s.armed == nil {
		s.armed = map[string]bool{}
	}
	for _, t := range w.Timers {
		if k := TimerKey(t); !s.armed[k] {
			s.armed[k] = true
			s.Armed = append(s.Armed, t)
		}
	}
}

// deliver brings the outside world's command c to the run: through a
// takeover when its runner is gone, else decided and appended by the
// driver — or lost to a failed append (now and then, when source names
// the work c answers). It reports whether the decision was appended.
func (s *Sim) deliver(src Source, c aggregate.Command, source string) bool {
	if _, fin := s.State.Finished(); !fin && !s.live() && !s.Draining {
		s.takeover(c)
		return true
	}
	if source != "" && s.live() && chance(src, "append fails", 12) {
		return s.failAppend(c, source)
	}
	s.Apply(c)
	return true
}

// takeover takes the run over for c (nil for a recovery scan).
func (s *Sim) takeover(c aggregate.Command) {
	cause := events.RecoveredRunnerLost
	if s.State.HandedOff() {
		cause = events.RecoveredHandedOff
	}
	s.runners++
	r := aggregate.Recover{Runner: fmt.Sprintf("n%d", s.runners), Cause: cause, Then: c}
	if s.TwoStepTakeover && c != nil {
		r.Then = nil
		s.TakeoverFor = c
		s.Apply(r)
		s.TakeoverFor = nil
		if s.live() {
			s.Driver = r.Runner
		}
		s.Apply(c)
		return
	}
	s.Apply(r)
	if s.live() {
		s.Driver = r.Runner
	}
}

// failAppend decides c but loses the append: nothing is recorded, and the
// driver forgets the work c answered (source: the model call returned, the
// body reported, the timer fired). The driver then derives its work again
// from Pending and retries it (docs/semantics.md §8: work is acknowledged by
// recording it, never by having attempted it). Pending is a function of
// the state, which the lost decision left as it was, so there is nothing
// to check here: a run whose work was dropped shows at the following
// appends (Problems).
func (s *Sim) failAppend(c aggregate.Command, source string) bool {
	evs, _ := aggregate.Decide(s.State, c, s.Now)
	if len(evs) == 0 {
		s.Apply(c)
		return true
	}
	delete(s.InFlight, source)
	for k := range WorkKeys(aggregate.Pending(s.State)) {
		s.InFlight[k] = true
	}
	return false
}

var (
	callIDs   = []string{"a", "b", "c", "d"}
	toolNames = []string{"tool", "lookup", "refund", "ship-order"}
	arguments = []string{`{}`, `{"a":1}`, `{"order":{"id":"o-7","lines":[1,2,3]}}`, `{"q":"x y","page":2,"flag":true}`, `[]`, `{"note":null}`}
	// edits are the edited arguments an approve narrows a call to.
	edits = []string{`{"a":0}`, `{"amount":50}`, `{"q":"x","page":1}`}
)

func pick[E any](src Source, label string, xs []E) E { return xs[src.Intn(label, len(xs))] }

func chance(src Source, label string, n int) bool { return src.Intn(label, n) == 0 }

// Step applies one random command (or advances the clock).
func (s *Sim) Step(src Source) {
	w := aggregate.Pending(s.State)
	var choices []func()
	live := s.live()
	if w.Model != nil && live && s.InFlight[modelKey(w.Model.Turn)] {
		turn := w.Model.Turn
		choices = append(choices, func() { s.deliver(src, s.modelReply(src, turn), modelKey(turn)) })
		if chance(src, "model fails", 4) {
			choices = append(choices, func() {
				kind := pick(src, "failure", []events.FailureKind{events.FailureTimedOut, events.FailureOverloaded, events.FailureUnreachable, events.FailureRateLimited})
				if chance(src, "not retryable", 8) {
					kind = pick(src, "fatal failure", []events.FailureKind{events.FailureRejected, events.FailureInvalidRequest, events.FailureInvalidReply, events.FailureCrashed, events.FailureOther})
				}
				after := time.Duration(src.Intn("retry after", 3)) * 40 * time.Millisecond
				s.deliver(src, aggregate.ModelFailure{Turn: turn, Kind: kind, RetryAfter: after}, modelKey(turn))
			})
		}
	}
	if w.Resolve != nil && live && s.InFlight[resolveKey(w.Resolve.Turn)] {
		b := w.Resolve
		choices = append(choices, func() { s.deliver(src, s.resolve(src, b), resolveKey(b.Turn)) })
	}
	for _, b := range s.Bodies {
		choices = append(choices, func() { s.report(src, b) })
	}
	for _, a := range s.State.Actions() {
		switch a.State {
		case aggregate.ActionRunning, aggregate.ActionSettling, aggregate.ActionUncertain:
			if chance(src, "settlement", 3) {
				choices = append(choices, func() {
					c := aggregate.Settle{Action: a.ID, Outcome: pick(src, "settle", []string{events.OutcomeOutput, events.OutcomeExplain, events.OutcomeUncertain}),
						Content: json.RawMessage(`{"s":1}`), Message: "settled", Summary: "by the handler"}
					if chance(src, "big settlement", 6) {
						c.Content, c.Message = bigJSON(), strings.Repeat("m", 60)
					}
					s.deliver(src, c, "")
				})
			}
		case aggregate.ActionDelegated:
			choices = append(choices, func() {
				child := a.Child.Child
				if chance(src, "foreign child", 10) {
					child = "child-x"
				}
				o := pick(src, "child outcome", []events.Outcome{
					{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"done"`)},
					{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"done"`)},
					{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"done"`)},
					{Kind: events.OutcomeCompleted, Answer: bigAnswer},
					{Kind: events.OutcomeCancelled},
					{Kind: events.OutcomeBudgetExhausted, Reason: events.ReasonFamilyLimit},
				})
				source := ""
				if child == a.Child.Child {
					source = childKey(a.ID, s.State.Cancelling())
				}
				s.deliver(src, aggregate.ChildSettle{Action: a.ID, Child: child, Outcome: o, Turns: int64(src.Intn("child turns", 4))}, source)
			})
		}
		if !a.State.Ended() && a.State != aggregate.ActionUncertain && chance(src, "tool changed", 200) {
			choices = append(choices, func() { s.deliver(src, aggregate.ToolMissing{Action: a.ID, Tool: a.Tool}, "") })
		}
		if a.State == aggregate.ActionUncertain {
			choices = append(choices, func() {
				_, fin := s.State.Finished()
				content := pick(src, "reconcile", []json.RawMessage{json.RawMessage(`{"unconfirmed":"n"}`), json.RawMessage(`{"v":2}`), json.RawMessage(`{"error":"it failed"}`), bigJSON()})
				s.deliver(src, aggregate.Reconcile{Action: a.ID, Content: content, By: "carol", Stored: fin}, "")
			})
		}
		if a.State == aggregate.ActionReconciled && chance(src, "resolve", 2) {
			// The final truth of an open question (or a refused one: not
			// resolvable, resolved already, or unconfirmed again).
			choices = append(choices, func() {
				content := pick(src, "resolve", []json.RawMessage{json.RawMessage(`{"v":3}`), json.RawMessage(`{"error":"it did not go out"}`), json.RawMessage(`{"unconfirmed":"still asking"}`)})
				s.deliver(src, aggregate.Resolve{Action: a.ID, Content: content, By: "erin"}, "")
			})
		}
		if a.Request.Revision > 0 {
			choices = append(choices, func() { s.deliver(src, s.answer(src, a), "") })
		}
	}
	if len(s.Armed) > 0 {
		choices = append(choices, func() { s.fire(src) })
	}
	choices = append(choices, func() {
		s.Now = s.Now.Add(time.Duration(1+src.Intn("tick", 100)) * time.Millisecond)
	})
	if _, fin := s.State.Finished(); !fin && !live && chance(src, "cancel unattended", 3) {
		// A person cancels a run whose runner is gone: the cancel takes
		// the run over.
		choices = append(choices, func() { s.deliver(src, aggregate.Cancel{By: "erin", Reason: "stuck"}, "") })
	}
	kill := func() {
		// The driver is killed: its memory is gone, its workers'
		// bodies run on.
		s.Down = true
		clear(s.InFlight)
	}
	handOff := func() {
		s.Apply(aggregate.HandOff{Runner: s.Driver, ModelNotCalled: chance(src, "uncalled", 2)})
		s.Draining = s.State.HandedOff()
	}
	if s.Draining && chance(src, "drained", 3) {
		// The draining runner exits: the next command takes the run over.
		choices = append(choices, func() { s.Draining = false })
	}
	if live && len(s.Bodies) > 0 && chance(src, "lose a busy runner", 6) {
		// Runners die (or drain) while bodies run: the paths of
		// docs/semantics.md §8.
		choices = append(choices, pick(src, "loss", []func(){kill, kill, handOff}))
	}
	if live && s.approvedLive() && chance(src, "lose an approving runner", 2) {
		// Runners die (or drain) while an approved action runs or waits
		// for its slot: a loss asks the approval again (and a rejected,
		// expired or denied re-approval leaves the lost attempt
		// uncertain, docs/semantics.md §5); a hand-off never asks (§8).
		choices = append(choices, kill, handOff)
	}
	if _, fin := s.State.Finished(); !fin && chance(src, "pause", 12) {
		// A person pauses or resumes the run (docs/semantics.md §13).
		if s.State.Paused() {
			choices = append(choices, func() { s.deliver(src, aggregate.Resume{By: "erin", Reason: "checked"}, "") })
		} else {
			choices = append(choices, func() { s.deliver(src, aggregate.Pause{By: "erin", Reason: "checking"}, "") })
		}
	}
	if chance(src, "rare", 25) {
		if chance(src, "cancel", 2) {
			choices = append(choices, func() { s.deliver(src, aggregate.Cancel{By: "dave", Reason: "enough"}, "") })
		}
		if live {
			choices = append(choices, kill, handOff)
		} else if _, fin := s.State.Finished(); !fin && !s.Draining {
			choices = append(choices, func() { s.takeover(nil) })
			if w.Model != nil {
				// The reply of a call lost with its runner reaches a
				// runner that must take the run over first.
				turn := w.Model.Turn
				choices = append(choices, func() { s.deliver(src, s.modelReply(src, turn), "") })
			}
		}
	}
	choices[src.Intn("choice", len(choices))]()
}

// approvedLive reports whether an approved action runs or waits for its
// slot.
func (s *Sim) approvedLive() bool {
	for _, a := range s.State.Actions() {
		if a.Approved && (a.State == aggregate.ActionRunning || a.State == aggregate.ActionQueued) {
			return true
		}
	}
	return false
}

// modelReply is the model's answer to turn: a final answer (typed, or not
// decodable), a tool request with tool names and argument shapes of every
// kind (now and then empty or with a duplicate id), a refusal or a
// truncated reply; usage missing, small or over a token budget.
func (s *Sim) modelReply(src Source, turn int64) aggregate.ModelReply {
	r := aggregate.Reply{}
	switch src.Intn("usage", 12) {
	case 0:
	case 1:
		r.Usage = &events.Usage{InputTokens: 10, OutputTokens: int64(src.Intn("output tokens", 30))}
	default:
		r.Usage = &events.Usage{InputTokens: 1, OutputTokens: 1}
	}
	c := aggregate.ModelReply{Turn: turn}
	kind := "tools"
	switch src.Intn("reply", 48) {
	case 0, 1, 2, 3:
		kind = "final"
	case 4:
		kind = "refusal"
	case 5:
		kind = "truncated"
	case 6:
		kind = "empty"
	}
	switch kind {
	case "final":
		r.Kind = events.ReplyFinalAnswer
		r.Turn.Text = `{"ok":true}`
		c.Answer = json.RawMessage(r.Turn.Text)
		if chance(src, "bad answer", 2) {
			r.Turn.Text = "not json"
			c.Answer, c.AnswerError = nil, "unreadable"
		}
	case "tools":
		r.Kind = events.ReplyToolRequest
		for i := range 1 + src.Intn("calls", 3) {
			id := callIDs[i]
			if chance(src, "dup", 50) {
				id = callIDs[0]
			}
			r.Turn.Calls = append(r.Turn.Calls, events.ToolCall{ID: id, Name: pick(src, "tool", toolNames), Arguments: json.RawMessage(pick(src, "arguments", arguments))})
		}
	case "empty":
		r.Kind = events.ReplyToolRequest
	case "refusal":
		r.Kind, r.Reason = events.ReplyRefusal, "no"
	case "truncated":
		r.Kind = events.ReplyTruncated
		if chance(src, "partial text", 2) {
			r.Turn.Text = "half an ans"
		} else {
			r.Reason = "max_tokens"
		}
	}
	c.Reply = r
	return c
}

// resolve is the runner's validation and policy outcome for the calls of b.
func (s *Sim) resolve(src Source, b *aggregate.CallBatch) aggregate.ResolveCalls {
	c := aggregate.ResolveCalls{Turn: b.Turn}
	for _, call := range b.Calls {
		r := aggregate.Resolution{CallID: call.ID, Validation: events.CallValid}
		switch src.Intn("validation", 10) {
		case 0:
			r.Validation = events.CallUnknownTool
		case 1:
			r.Validation, r.Detail = events.CallInvalidArguments, "/a: want string"
		}
		switch src.Intn("policy", 50) {
		case 0:
			r.Policy = aggregate.PolicyResult{Decision: events.PolicyError, Reason: "policy down"}
		case 1, 2, 3, 4, 5, 6, 7:
			r.Policy = aggregate.PolicyResult{Decision: events.PolicyDeny, Reason: "no"}
		case 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22:
			r.Policy = aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 1}}
		default:
			r.Policy = aggregate.PolicyResult{Decision: events.PolicyAllow}
		}
		r.Tool = randomTool(src)
		if s.guarded && !chance(src, "unguarded", 4) {
			if r.Policy.Decision == events.PolicyAllow {
				r.Policy = aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 1}}
			}
			r.Tool.MaxAttempts = max(r.Tool.MaxAttempts, 2)
		}
		if chance(src, "delegation", 8) {
			r.Delegate = &events.AgentRef{Name: "sub", Version: "1"}
		}
		c.Calls = append(c.Calls, r)
	}
	return c
}

// answer is a person's answer to a's approval request, now and then naming
// a superseded revision.
func (s *Sim) answer(src Source, a aggregate.Action) aggregate.Command {
	rev := a.Request.Revision
	if chance(src, "stale revision", 4) {
		rev--
	}
	if !chance(src, "approve", 2) {
		return aggregate.Reject{Action: a.ID, Revision: rev, Reason: "not now", By: "bob"}
	}
	p := aggregate.PolicyResult{Decision: events.PolicyAllow}
	switch src.Intn("rerun", 12) {
	case 0:
		p = aggregate.PolicyResult{Decision: events.PolicyDeny, Reason: "fresh context says no"}
	case 1, 2, 3:
		p = aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "review", Version: 2}}
	case 4:
		if chance(src, "rerun error", 3) {
			p = aggregate.PolicyResult{Decision: events.PolicyError, Reason: "policy down"}
		}
	}
	c := aggregate.Approve{Action: a.ID, Revision: rev, Reviewer: "alice", Verifier: "v", Policy: p, Tool: randomTool(src)}
	if chance(src, "edited", 3) {
		// Narrowed to edited arguments (docs/semantics.md §4): now and
		// then the model's own, or an edit of a call that already started
		// (refused edit_refused, nothing recorded).
		c.Arguments = json.RawMessage(pick(src, "edit", edits))
		if chance(src, "edit as asked", 6) {
			c.Arguments = a.Arguments
		}
	}
	return c
}

// report is a worker's report of body b (or, now and then, of its
// neighbour attempts: stale or premature): an output (small, or over max
// result bytes), an explain, an uncertain outcome, an oversize measure, or
// a loss (crashed, worker_lost, timed_out).
func (s *Sim) report(src Source, b Body) {
	if s.Claims[b] == "closed" {
		// The attempt was closed before any worker claimed it: the
		// worker acks its task, never starts the body, reports nothing.
		s.Bodies = slices.DeleteFunc(s.Bodies, func(x Body) bool { return x == b })
		return
	}
	if s.Claims == nil {
		s.Claims = map[Body]string{}
	}
	switch s.Claims[b] {
	case "marked":
		s.Bodies = slices.DeleteFunc(s.Bodies, func(x Body) bool { return x == b })
		return
	case "holding":
		// The worker that claimed it looks again before the body
		// (docs/adr/0023-closing-attempts.md): still current, the body
		// starts; ended meanwhile, it marks its claim not started and
		// reports so; the runner reads the mark and records it for an
		// action a close found claimed (aggregate.LateMarks).
		if a, ok := s.State.Action(b.Action); !ok || a.State != aggregate.ActionRunning || a.Attempts != b.Attempt {
			s.Claims[b] = "marked"
			s.Bodies = slices.DeleteFunc(s.Bodies, func(x Body) bool { return x == b })
			for _, f := range aggregate.LateMarks(s.State, b.Action) {
				if f.Attempt == b.Attempt {
					s.deliver(src, aggregate.MarkedNotStarted{Action: b.Action, Attempt: f.Attempt, Incarnation: f.Incarnation, Token: simToken, Worker: "w-1", Why: api.ClaimEnded, By: s.Driver}, "")
				}
			}
			return
		}
	case "":
		if chance(src, "claim, then look again", 6) {
			s.Claims[b] = "holding" // claimed, its body not started yet
			return
		}
	}
	attempt := b.Attempt
	switch src.Intn("attempt", 12) {
	case 0:
		attempt--
	case 1:
		attempt++
	}
	limit := s.State.Limits().MaxResultBytes
	var c aggregate.Command
	switch src.Intn("worker", 40) {
	case 0, 1, 2, 3, 4, 5, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24:
		c = aggregate.Report{Action: b.Action, Attempt: attempt, Outcome: events.OutcomeOutput, Content: json.RawMessage(pick(src, "output", []string{`{"v":1}`, `[1,2]`, `"ok"`, `null`}))}
	case 6:
		c = aggregate.Report{Action: b.Action, Attempt: attempt, Outcome: events.OutcomeOutput, Content: bigJSON()}
	case 7, 8:
		c = aggregate.Report{Action: b.Action, Attempt: attempt, Outcome: events.OutcomeExplain, Message: "bad"}
	case 9:
		c = aggregate.Report{Action: b.Action, Attempt: attempt, Outcome: events.OutcomeExplain, Message: longExplain}
	case 10, 11:
		c = aggregate.Report{Action: b.Action, Attempt: attempt, Outcome: events.OutcomeUncertain, Evidence: "hm"}
	case 12:
		c = aggregate.Report{Action: b.Action, Attempt: attempt, Outcome: events.OutcomeOversize, Bytes: limit + 1 + int64(src.Intn("bytes", 100))}
	default:
		c = aggregate.Lost{Action: b.Action, Attempt: attempt, Cause: pick(src, "cause", []string{events.CauseCrashed, events.CauseWorkerLost, events.CauseTimedOut})}
	}
	source := ""
	if k := dispatchKey(b.Action, attempt); attempt == b.Attempt && WorkKeys(aggregate.Pending(s.State))[k] {
		source = k
	}
	s.Claims[b] = "claimed" // the worker claimed it before its body started
	if s.deliver(src, c, source) && attempt == b.Attempt {
		// Delivered and recorded (refused or not): the worker is done.
		s.Bodies = slices.DeleteFunc(s.Bodies, func(x Body) bool { return x == b })
	}
}

// fire fires an armed timer: due (the clock moves to it), early (the clock
// stays before it), late (the clock moves past it) or stale (a timer the
// run no longer needs).
func (s *Sim) fire(src Source) {
	tm := pick(src, "timer", s.Armed)
	switch src.Intn("when", 4) {
	case 0: // early, when it is not due yet
	case 1:
		late := tm.At.Add(time.Duration(1+src.Intn("late", 500)) * time.Millisecond)
		if late.After(s.Now) {
			s.Now = late
		}
	default:
		if tm.At.After(s.Now) {
			s.Now = tm.At
		}
	}
	source := ""
	for _, t := range aggregate.Pending(s.State).Timers {
		if TimerKey(t) == TimerKey(tm) {
			source = TimerKey(t)
		}
	}
	s.deliver(src, tm.Command(), source)
}

// bigJSON returns JSON content over the simulated max result bytes.
func bigJSON() json.RawMessage { return bigContent }

var (
	bigContent  = json.RawMessage(`{"blob":"` + repeat1000("y") + `"}`)
	bigAnswer   = json.RawMessage(`"a child answer far too long for the run's max result bytes ` + repeat1000("x") + `"`)
	longExplain = strings.Repeat("too long ", 10)
)

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
	switch src.Intn("timeout", 4) {
	case 0, 1:
		c.Timeout = 50
	case 2:
		c.Timeout = events.Infinite
	}
	if chance(src, "settling", 2) {
		c.SettleWithin = 20
	}
	return c
}

func sortedKeys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

func describe(evs []events.Event) string {
	names := make([]string, len(evs))
	for i, e := range evs {
		names[i] = string(e.EventName())
	}
	return strings.Join(names, ",")
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

// simToken is the token of every worker's claim the simulation takes: a
// close that finds one records it, and its mark carries it.
const simToken = "tok-w-1"
