package aggregate_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/events"
)

// rapidSource draws the simulation's choices from rapid, which shrinks a
// failing run to a small one.
type rapidSource struct{ t *rapid.T }

func (r rapidSource) Intn(label string, n int) int { return rapid.IntRange(0, n-1).Draw(r.t, label) }

// TestProperties checks the invariants (a)–(t) of the aggregate over random
// command sequences (aggregatetest.Sim: the work Pending asks for plus
// stale, duplicate and racing commands, runner deaths, hand-offs,
// takeovers and failed appends).
func TestProperties(t *testing.T) {
	// 100 random runs (rapid's default) found a budget bug only once in
	// ~5000 runs; check 1000 unless -rapid.checks says otherwise.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("1000"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}
	// A fixed seed, so that CI is the same run every time and the coverage
	// check below cannot fail by chance (with a fresh seed per run,
	// settlement_refused came out of 2 to 7 of 1000 runs and once out of
	// none); -rapid.seed explores others.
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("20261202"); err != nil {
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
			events.NameCancelRequested, events.NameReportRefused, events.NameRunFinished, events.NameRequirementChanged,
			events.NameChildStarted, events.NameChildSettled, events.NameRunHandedOff, events.NameActionUncertain,
			events.NameActionsNotStarted, events.NameSettlementRefused, events.NameAnswerRejected, events.NameModelFailed} {
			if seen[n] == 0 && !t.Failed() {
				t.Errorf("the random commands never produced %s", n)
			}
		}
		t.Logf("events produced: %v", seen)
	})
	rapid.Check(t, func(t *rapid.T) {
		src := rapidSource{t}
		var s *aggregatetest.Sim
		fail := func(format string, args ...any) {
			t.Fatalf(format+"\n%s", append(args, aggregatetest.Describe(s.Events()))...)
		}
		s = checkedSim(fail)
		defer func() {
			for _, r := range s.History {
				seen[r.Event.EventName()]++
			}
		}()
		s.Start(src)
		n := rapid.IntRange(10, 80).Draw(t, "steps")
		for range n {
			s.Step(src)
		}
		checkRun(fail, s)
	})
}

// TestPropertiesSeeded checks the same invariants as TestProperties over
// longer runs drawn uniformly from seeded generators (rapid favours small
// draws, so its runs end early; these reach hand-offs, takeovers, replays
// and re-approvals far more often). A failure names its seed. It runs 400
// seeds; WEFT_PROPERTY_SEEDS=N runs N (e.g. 20000 before a release).
func TestPropertiesSeeded(t *testing.T) {
	seeds := propertySeeds(t, 400)
	seen := map[events.Name]int{}
	for seed := range seeds {
		var s *aggregatetest.Sim
		fail := func(format string, args ...any) {
			t.Fatalf("seed %d: "+format+"\n%s", append(append([]any{seed}, args...), aggregatetest.Describe(s.Events()))...)
		}
		s = checkedSim(fail)
		src := aggregatetest.Rand(seed)
		s.Start(src)
		for range 120 {
			s.Step(src)
		}
		checkRun(fail, s)
		for _, r := range s.History {
			seen[r.Event.EventName()]++
		}
	}
	for _, n := range events.Names() {
		if n == events.NameHeadSigned {
			continue // appended by a runner with a signing key, never decided (runner/signhead.go)
		}
		if n == events.NameRunForked {
			continue // decided only by a restart of a finished run: aggregate/testdata/rule14_restart_from_a_step.txt
		}
		if seen[n] == 0 {
			t.Errorf("the seeded runs never produced %s", n)
		}
	}
	t.Logf("events produced: %v", seen)
}

// propertySeeds is how many seeds a seeded property test runs:
// WEFT_PROPERTY_SEEDS, or def.
func propertySeeds(t *testing.T, def uint64) uint64 {
	v := os.Getenv("WEFT_PROPERTY_SEEDS")
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("WEFT_PROPERTY_SEEDS=%q: %v", v, err)
	}
	return n
}

// checkedSim returns a simulation that checks the per-decision invariants
// after every decision, reporting a violation with fail.
func checkedSim(fail func(string, ...any)) *aggregatetest.Sim {
	s := aggregatetest.New()
	var steps stepChecker
	s.Check = func(before aggregate.State, c aggregate.Command, evs []events.Event, err error) {
		// (j), (k), (l), (m).
		steps.check(fail, s, before, c, evs)
		// (t) HeadOwedAfter says, without folding, what the fold of the
		// decision says: a signature owed, the run ended
		// (docs/adr/0044: the runner seals a decision by it).
		folded := before.Clone()
		for i, e := range evs {
			folded = aggregate.Evolve(folded, events.Recorded{Run: s.Run, Version: before.Version() + uint64(i) + 1, At: s.Now, Event: e})
		}
		_, fin := folded.Finished()
		if owed, ended := aggregate.HeadOwedAfter(before, evs); owed != folded.HeadBehind() || ended != fin {
			fail("(t) HeadOwedAfter of %s says owed %v, ended %v; the fold says %v, %v", c.CommandName(), owed, ended, folded.HeadBehind(), fin)
		}
		// (f) The same command on the same state gives the same events.
		again, err2 := aggregate.Decide(before, c, s.Now)
		if !reflect.DeepEqual(evs, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
			fail("(f) Decide is not deterministic for %s", c.CommandName())
		}
		// (g) Evolve accepted everything Decide produced: Sim.Apply
		// would have panicked otherwise.
		// (d) Ended actions never change, but for the one resolution of
		// an open question (audit only: its state and content stay).
		for _, a := range before.Actions() {
			if !a.State.Ended() {
				continue
			}
			now, _ := s.State.Action(a.ID)
			if _, resolve := innermost(c).(aggregate.Resolve); resolve && a.OpenQuestion() && now.Resolved != nil {
				a.Resolved = now.Resolved
			}
			if !reflect.DeepEqual(a, now) {
				fail("(d) ended action %s changed: %s -> %s after %s", a.ID, a.State, now.State, c.CommandName())
			}
		}
		// (n) An attempt fenced by a decision is the running attempt of
		// its action right after that decision, in the run's current
		// incarnation, neither handed off nor finished: a worker that
		// finds its task's fence in the run's last message knows the
		// attempt is current without folding the run (worker.LogCheck,
		// docs/adr/0014).
		for _, e := range evs {
			f, ok := e.(events.AttemptFenced)
			if !ok {
				continue
			}
			a, _ := s.State.Action(f.Action)
			_, finished := s.State.Finished()
			if finished || s.State.HandedOff() || a.State != aggregate.ActionRunning || a.Attempt.Attempt != f.Attempt ||
				a.Attempt.Incarnation != f.Incarnation || s.State.Incarnation() != f.Incarnation {
				fail("(n) attempt %d of %s fenced by %s is not current after it: state %s, attempt %d/%d, incarnation %d, finished %v, handed off %v",
					f.Attempt, f.Action, c.CommandName(), a.State, a.Attempt.Attempt, a.Attempt.Incarnation, s.State.Incarnation(), finished, s.State.HandedOff())
			}
		}
		// (o) A run Idle by its state has nothing to recover: a takeover
		// on its own records run_recovered and nothing else, for either
		// cause, so a runner that takes it over lazily — with the first
		// command that records something, never on its own — loses
		// nothing (docs/adr/0019-partitions.md). (Decided before its
		// first approval expiry: a due expiry is applied by any decision.)
		if !aggregate.Idle(before) && before.Exists() {
			if _, rerr := aggregate.Decide(before, aggregate.Recover{Runner: "other", Cause: events.RecoveredIdle}, s.Now); rerr == nil {
				if _, fin := before.Finished(); !fin {
					fail("(o) a takeover with cause idle of a run that is not idle (status %s) was accepted", aggregate.Status(before).Kind)
				}
			}
		}
		if aggregate.Idle(before) {
			at := s.Now
			for _, t := range aggregate.Pending(before).Timers {
				if !t.At.After(at) {
					at = t.At.Add(-time.Nanosecond)
				}
			}
			for _, cause := range []string{events.RecoveredRunnerLost, events.RecoveredIdle} {
				revs, rerr := aggregate.Decide(before, aggregate.Recover{Runner: "other", Cause: cause}, at)
				if rerr != nil || len(revs) != 1 {
					fail("(o) the takeover of an idle run (status %s) recorded %d events (%v), want run_recovered alone", aggregate.Status(before).Kind, len(revs), rerr)
				}
			}
		}
		// (s) A paused run starts nothing (docs/semantics.md §13).
		if msg := pausedStart(before, c, evs, s.Now); msg != "" {
			fail("%s", msg)
		}
		// (h) Folding the events from scratch equals the state the
		// decisions were made on.
		if !reflect.DeepEqual(aggregate.Fold(s.History).Clone(), s.State.Clone()) {
			fail("(h) fold from scratch differs after %s", c.CommandName())
		}
	}
	return s
}

// checkRun checks the invariants of a finished simulation: over its log,
// and (f) that replaying its commands from scratch gives its history.
func checkRun(fail func(string, ...any), s *aggregatetest.Sim) {
	checkLog(fail, s)
	replay := aggregatetest.New()
	for _, c := range s.Commands {
		replay.Now = c.Now
		replay.Apply(c.Command)
	}
	if !reflect.DeepEqual(replay.History, s.History) {
		fail("(f) the same commands produced different events")
	}
}

// TestRandomRunsWithSeeds runs the seeded generator other packages use, so
// that a change to it that breaks the aggregate shows here first.
func TestRandomRunsWithSeeds(t *testing.T) {
	finished := 0
	for seed := range uint64(200) {
		s := aggregatetest.RandomRun(aggregatetest.Rand(seed), 60)
		if _, fin := s.State.Finished(); fin {
			finished++
		}
		again := aggregatetest.RandomRun(aggregatetest.Rand(seed), 60)
		if !reflect.DeepEqual(s.History, again.History) {
			t.Fatalf("seed %d: the same seed gave another history", seed)
		}
	}
	if finished == 0 || finished == 200 {
		t.Fatalf("%d of 200 random runs finished: the generator is degenerate", finished)
	}
}

// checkLog checks the invariants over the whole event log.
func checkLog(fail func(string, ...any), s *aggregatetest.Sim) {
	type key struct {
		action  string
		attempt int
	}
	fenced := map[key]events.AttemptFenced{}
	fences := map[string]int{}
	budget := map[string]int{}
	outcomes := map[key]int{}
	for _, e := range s.Events() {
		switch e := e.(type) {
		case events.AttemptClosed:
			// A closed attempt did not act: it spends no budget (one
			// whose close found a worker's claim does).
			if !e.Claimed {
				fences[e.Action]--
			}
		case events.AttemptFenced:
			fenced[key{e.Action, e.Attempt}] = e
			fences[e.Action]++
			if budget[e.Action] == 0 {
				budget[e.Action] = e.MaxAttempts
			}
			if e.MaxAttempts != budget[e.Action] {
				fail("(b) %s attempt %d records budget %d, first fence %d", e.Action, e.Attempt, e.MaxAttempts, budget[e.Action])
			}
		case events.AttemptReported:
			// (a) No attempt outcome without a fence.
			if _, ok := fenced[key{e.Action, e.Attempt}]; !ok {
				fail("(a) %s attempt %d reported without a fence", e.Action, e.Attempt)
			}
			outcomes[key{e.Action, e.Attempt}]++
		case events.AttemptLost:
			if _, ok := fenced[key{e.Action, e.Attempt}]; !ok {
				fail("(a) %s attempt %d lost without a fence", e.Action, e.Attempt)
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
			fail("(c) %s attempt %d has %d outcomes", k.action, k.attempt, n)
		}
	}
	for a, n := range fences {
		// (b) A non-replayable action has at most one attempt that was
		// not closed unclaimed; no action has more such attempts than its
		// recorded budget.
		if n > budget[a] {
			fail("(b) %s has %d attempts over its budget %d", a, n, budget[a])
		}
	}
	checkDelegations(fail, s)
	// (a) Every attempt the runtime is asked to dispatch has its fence.
	for _, d := range aggregate.Pending(s.State).Dispatch {
		if _, ok := fenced[key{d.Action, d.Attempt}]; !ok {
			fail("(a) dispatch of %s attempt %d without a fence", d.Action, d.Attempt)
		}
	}
	// (n) The model reads that a call ran with an approver's edit exactly
	// for the calls that started with one (docs/semantics.md §4), and
	// every dispatch gets the arguments the call runs with.
	tr := aggregate.Transcript(s.State)
	startedEdited, noted := 0, 0
	for _, a := range s.State.Actions() {
		if a.State.ModelVisible() && a.Edited != nil && a.Started() {
			startedEdited++
		}
	}
	for _, m := range tr {
		for _, r := range m.Results {
			if strings.Contains(string(r.Content), aggregate.EditedNote) {
				noted++
			}
		}
	}
	if noted != startedEdited {
		fail("(n) the model reads the edit note %d times, %d visible calls started with an edit", noted, startedEdited)
	}
	for _, d := range aggregate.Pending(s.State).Dispatch {
		if a, _ := s.State.Action(d.Action); string(d.Arguments) != string(a.CallArguments()) {
			fail("(n) %s dispatched with %s, the call runs with %s", d.Action, d.Arguments, a.CallArguments())
		}
	}
	// (e) Results reach the model in call order.
	for i, m := range tr {
		if m.Role != "tool" {
			continue
		}
		if i == 0 || tr[i-1].Role != "assistant" {
			fail("(e) tool results not after their assistant turn")
		}
		var order []string
		for _, c := range tr[i-1].Calls {
			order = append(order, c.ID)
		}
		last := -1
		for _, r := range m.Results {
			j := slices.Index(order, r.CallID)
			if j <= last {
				fail("(e) result %s out of call order %v", r.CallID, order)
			}
			last = j
		}
	}
}

// checkDelegations checks the delegation invariants (i) over the log
// (docs/adr/0007): a delegation over a bound never reaches policy; a child
// starts only for an action the policy allowed, once, under the derived
// id, and never more children than max children; a delegation is never
// fenced (it holds no concurrency slot); it settles at most once.
func checkDelegations(fail func(string, ...any), s *aggregatetest.Sim) {
	limited := map[string]bool{}
	allowed := map[string]bool{}
	started := map[string]int{}
	settled := map[string]int{}
	children := 0
	maxChildren := s.State.Limits().MaxChildren
	for _, e := range s.Events() {
		switch e := e.(type) {
		case events.CallValidated:
			if e.Outcome == events.CallLimitReached {
				limited[e.Action] = true
			}
		case events.PolicyDecided:
			if limited[e.Action] {
				fail("(i) %s reached a delegation bound but policy decided it", e.Action)
			}
			allowed[e.Action] = e.Decision == events.PolicyAllow || e.Decision == events.PolicyRequireApproval && e.Context == "approval"
		case events.ChildStarted:
			if !allowed[e.Action] {
				fail("(i) child of %s started without an allowing policy decision", e.Action)
			}
			if e.Child != aggregate.ChildRunID(s.Run, e.Action) {
				fail("(i) child of %s has id %s", e.Action, e.Child)
			}
			started[e.Action]++
			children++
			if started[e.Action] > 1 || children > maxChildren {
				fail("(i) %d children started (max %d), %s started %d times", children, maxChildren, e.Action, started[e.Action])
			}
		case events.AttemptFenced:
			if started[e.Action] > 0 {
				fail("(i) delegation %s fenced", e.Action)
			}
		case events.ChildSettled:
			settled[e.Action]++
			if started[e.Action] == 0 || settled[e.Action] > 1 {
				fail("(i) %s settled %d times, started %d", e.Action, settled[e.Action], started[e.Action])
			}
		}
	}
}

// TestSnapshotThenTail checks that a snapshot taken at any point of a random
// run, decoded and evolved with the events after it, equals folding the
// whole history, and that Decide reaches the same decisions from it.
func TestSnapshotThenTail(t *testing.T) {
	for seed := range uint64(300) {
		s := aggregatetest.RandomRun(aggregatetest.Rand(seed), 50)
		h := s.History
		cut := int(seed) % (len(h) + 1)
		snapBytes, err := json.Marshal(aggregate.Fold(h[:cut]))
		if err != nil {
			t.Fatal(err)
		}
		var st aggregate.State
		if err := json.Unmarshal(snapBytes, &st); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for _, r := range h[cut:] {
			st = aggregate.Evolve(st, r)
		}
		want := aggregate.Fold(h)
		a, _ := json.Marshal(st)
		b, _ := json.Marshal(want)
		if string(a) != string(b) {
			t.Fatalf("seed %d cut %d: snapshot+tail differs from the full fold\n%s\n%s", seed, cut, a, b)
		}
		if !reflect.DeepEqual(aggregate.Pending(st), aggregate.Pending(want)) || !reflect.DeepEqual(aggregate.Transcript(st), aggregate.Transcript(want)) {
			t.Fatalf("seed %d: snapshot+tail gives other work or transcript", seed)
		}
		c := aggregate.Cancel{By: "x"}
		e1, err1 := aggregate.Decide(st, c, s.Now)
		e2, err2 := aggregate.Decide(want, c, s.Now)
		if !reflect.DeepEqual(e1, e2) || fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Fatalf("seed %d: snapshot+tail decides differently", seed)
		}
	}
	// Schema 1 kept no used command proofs: the runner folds such a run again.
	for _, schema := range []int{1, aggregate.SnapshotSchema + 1} {
		var st aggregate.State
		if err := json.Unmarshal([]byte(fmt.Sprintf(`{"schema":%d}`, schema)), &st); err == nil {
			t.Fatalf("a snapshot of schema %d was accepted", schema)
		}
	}
}

// stepChecker checks the properties of each decision
// (docs/semantics.md §5, §7, §8):
//
//   - (j) an action with a fenced attempt that was not closed unclaimed
//     (a claimed attempt, or a close whose outcome is unknown) is never
//     not_started, rejected or denied: an attempted action is never
//     reported as not having happened;
//   - (p) an action whose every attempt was closed before any worker
//     claimed it, or marked not started by the worker that did, is never
//     uncertain, on a live run too (docs/semantics.md §8, "Closing an
//     attempt"): nobody reconciles a body that never started;
//   - (q) an attempt the run records closed has its claim closed: no
//     worker took it, so its body never starts;
//   - (r) an attempt the run records claimed (a close found a worker's
//     claim) has a worker's claim and is never recorded closed after;
//   - (k) a decision that cancels or ends the run fences no attempt and
//     requests no model turn, nor did the takeover decided for it just
//     before (a two-step takeover: the recovery's follow-ons would run
//     before the cancel);
//   - (l) a graceful hand-off never creates an approval request: a
//     recovery with cause handed_off asks for no approval and re-approves
//     no lost attempt;
//   - (m) the simulation found no work that was dropped (Sim.Problems:
//     Pending equals the work and the timers the appended events called
//     for, also after failed appends, whose work the driver derives again
//     from Pending and retries; a working run has work listed).
type stepChecker struct {
	takeover []events.Event // the recovery decided for the next command
}

func (k *stepChecker) check(fail func(string, ...any), s *aggregatetest.Sim, before aggregate.State, c aggregate.Command, evs []events.Event) {
	if cl, ok := c.(aggregate.Closing); ok {
		c = cl.Then
	}
	for _, a := range s.State.Actions() {
		switch a.State {
		case aggregate.ActionNotStarted, aggregate.ActionRejected, aggregate.ActionDenied:
			if was, _ := before.Action(a.ID); a.Attempts > len(a.Closed) && was.State != a.State {
				fail("(j) %s had %d fenced attempt(s), %d of them closed unclaimed, but ended %s by %s", a.ID, a.Attempts, len(a.Closed), a.State, commandName(c))
			}
		case aggregate.ActionUncertain:
			// Also when a claim a close found was marked not started
			// afterwards, on a live run too (attempt_not_started ended).
			if a.Attempts > 0 && a.Attempts == len(a.Closed) {
				fail("(p) %s is uncertain by %s, yet each of its %d attempt(s) was closed before any worker claimed it or marked not started by it", a.ID, commandName(c), a.Attempts)
			}
		}
		// (q) A closed claim is never started: no attempt the run records
		// closed has a worker's claim.
		for _, n := range a.Closed {
			if c := s.Claims[aggregatetest.Body{Action: a.ID, Attempt: n}]; c != "closed" && c != "marked" {
				fail("(q) %s attempt %d is recorded closed but its claim is %q", a.ID, n, s.Claims[aggregatetest.Body{Action: a.ID, Attempt: n}])
			}
		}
		// (r) An attempt whose close found a worker's claim is recorded so
		// and never closed afterwards.
		for _, n := range a.Claimed {
			c := s.Claims[aggregatetest.Body{Action: a.ID, Attempt: n}]
			if (c != "claimed" && c != "holding" && c != "marked") || (slices.Contains(a.Closed, n) && c != "marked") {
				fail("(r) %s attempt %d is recorded claimed but its claim is %q, closed %v", a.ID, n, s.Claims[aggregatetest.Body{Action: a.ID, Attempt: n}], a.Closed)
			}
		}
	}
	for _, e := range evs {
		if r, ok := e.(events.RunRecovered); ok && r.Cause == events.RecoveredHandedOff {
			for _, e := range evs {
				switch e := e.(type) {
				case events.ApprovalRequested:
					// The command the takeover was for may ask (a
					// changed requirement); the recovery never does.
					if e.Why == events.AskRecovery {
						fail("(l) the hand-off's recovery asked %s for approval again (revision %d)", e.Action, e.Revision)
					}
				case events.AttemptLost:
					if e.Next == events.NextReapprove {
						fail("(l) the hand-off's recovery re-approves %s", e.Action)
					}
				}
			}
			// The recorded answers keep authorising: the body runs under
			// the reviewer in the log.
			for _, a := range before.Actions() {
				if now, _ := s.State.Action(a.ID); a.Approved && (a.State == aggregate.ActionQueued || a.State == aggregate.ActionRunning) && !now.Approved {
					fail("(l) the hand-off's recovery voided the approval of %s (%s)", a.ID, now.State)
				}
			}
		}
	}
	recovery := k.takeover
	k.takeover = nil
	if r, ok := c.(aggregate.Recover); ok && r.Then == nil && s.TakeoverFor != nil {
		k.takeover = evs
		return
	}
	ends := false
	for _, e := range evs {
		switch e.(type) {
		case events.CancelRequested, events.RunFinished:
			ends = true
		}
	}
	if ends {
		for _, e := range append(recovery, evs...) {
			switch e := e.(type) {
			case events.AttemptFenced:
				fail("(k) %s cancelled or ended the run, yet %s attempt %d was fenced for it", commandName(c), e.Action, e.Attempt)
			case events.ModelRequested:
				fail("(k) %s cancelled or ended the run, yet model turn %d was requested for it", commandName(c), e.Turn)
			}
		}
	}
	if len(s.Problems) > 0 {
		fail("%s", s.Problems[0])
	}
}

// commandName names c, and for a takeover the command it was for.
func commandName(c aggregate.Command) string {
	if r, ok := c.(aggregate.Recover); ok && r.Then != nil {
		return "recover+" + r.Then.CommandName()
	}
	return c.CommandName()
}

// TestPropertyKFindsATwoStepTakeover checks that property (k) can fail: a
// runner that takes a run over and then decides the command as a second
// decision (Recover alone, as before Recover.Then) fences replays and
// re-issues model calls before the cancel it took the run over for
// (docs/semantics.md §7). The same seeds with Then pass.
func TestPropertyKFindsATwoStepTakeover(t *testing.T) {
	found := 0
	for seed := range uint64(300) {
		for _, twoStep := range []bool{false, true} {
			s := aggregatetest.New()
			s.TwoStepTakeover = twoStep
			var steps stepChecker
			var violation string
			s.Check = func(before aggregate.State, c aggregate.Command, evs []events.Event, _ error) {
				steps.check(func(format string, args ...any) {
					if violation == "" {
						violation = fmt.Sprintf(format, args...)
					}
				}, s, before, c, evs)
			}
			src := aggregatetest.Rand(seed)
			s.Start(src)
			for range 80 {
				s.Step(src)
			}
			switch {
			case !twoStep && violation != "":
				t.Fatalf("seed %d: %s\n%s", seed, violation, aggregatetest.Describe(s.Events()))
			case twoStep && violation != "":
				if !strings.HasPrefix(violation, "(k)") {
					t.Fatalf("seed %d, two-step takeover: %s", seed, violation)
				}
				found++
			}
		}
	}
	if found == 0 {
		t.Fatal("(k) never failed for a runner deciding takeover and cancel as two decisions")
	}
	t.Logf("(k) found the two-step takeover in %d of 300 seeds", found)
}

// TestSimFindsDroppedWork checks that the simulation's property (m) can
// fail: work in flight that Pending does not list, work Pending lists
// that the driver dropped, and a timer the events armed that Pending does
// not list are all recorded as problems.
func TestSimFindsDroppedWork(t *testing.T) {
	s := aggregatetest.New()
	s.Start(aggregatetest.Rand(1))
	if len(s.Problems) != 0 || !s.InFlight["model 1"] {
		t.Fatalf("after start: problems %v, in flight %v", s.Problems, s.InFlight)
	}
	// The driver forgets the model call it was making, then records
	// something else: Pending still lists the call.
	delete(s.InFlight, "model 1")
	s.Apply(aggregate.Report{Action: "9/x", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{}`)})
	if len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "model 1") {
		t.Fatalf("a dropped model call: problems %v", s.Problems)
	}
	// Work in flight that Pending does not list.
	s.InFlight["dispatch 1/a#1"] = true
	s.Apply(aggregate.Report{Action: "9/x", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{}`)})
	if len(s.Problems) != 2 || !strings.Contains(s.Problems[1], "dispatch 1/a#1") {
		t.Fatalf("stray work in flight: problems %v", s.Problems)
	}
	// A timer the events armed that Pending does not list.
	s.Timers["timer tool_timeout 1/a 1 0 0"] = true
	s.Apply(aggregate.Report{Action: "9/x", Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{}`)})
	if len(s.Problems) != 3 || !strings.Contains(s.Problems[2], "timer tool_timeout 1/a 1 0 0") {
		t.Fatalf("a dropped timer: problems %v", s.Problems)
	}
}

// pausedStart checks property (s) of the decision of c on before, which
// gave evs at now (docs/semantics.md §13): no event of it fences an
// attempt, starts a child run or requests a model turn while the run is
// paused, judged on the
// state each event is folded onto — a resume starts what the run calls
// for only after its run_resumed. A turn lost with its runner is the one
// exception (why recovery: requested again, and only recorded until the
// resume). It returns the violation, or "" for none.
func pausedStart(before aggregate.State, c aggregate.Command, evs []events.Event, now time.Time) string {
	st := before.Clone()
	for _, e := range evs {
		if st.Paused() {
			switch e := e.(type) {
			case events.AttemptFenced:
				return fmt.Sprintf("(s) %s fenced %s attempt %d on a paused run", commandName(c), e.Action, e.Attempt)
			case events.ModelRequested:
				if e.Why != events.TurnRecovery {
					return fmt.Sprintf("(s) %s requested turn %d (why %s) on a paused run", commandName(c), e.Turn, e.Why)
				}
			case events.ChildStarted:
				return fmt.Sprintf("(s) %s started child run of %s on a paused run", commandName(c), e.Action)
			}
		}
		st = aggregate.Evolve(st, events.Recorded{Run: st.Run(), Version: st.Version() + 1, At: now, Event: e})
	}
	return ""
}

// TestSemantics13_PausedRunStartsNothing checks property (s) alone over
// seeded random runs (docs/semantics.md §13): no decision fences an
// attempt, starts a child run or requests a model turn (but a lost turn's
// recovery) while the run is paused — a model reply, a report, a
// settlement, an approval or a reconciliation recorded while paused only
// takes effect on resume (a delegation it allows is queued and its child
// started by the resume). The
// other invariants are TestPropertiesSeeded's; this one draws from
// pausingSource (fixed seeds), which pauses often and has the model answer
// a typed run, and counts the events decided on a paused run so that it
// cannot pass vacuously.
func TestSemantics13_PausedRunStartsNothing(t *testing.T) {
	seeds := propertySeeds(t, 600)
	judged := map[events.Name]int{}
	// Delegations allowed while paused (queued) and children a resume
	// started.
	queuedDelegations, resumedChildren := 0, 0
	for seed := range seeds {
		s := aggregatetest.New()
		s.Check = func(before aggregate.State, c aggregate.Command, evs []events.Event, _ error) {
			if msg := pausedStart(before, c, evs, s.Now); msg != "" {
				t.Fatalf("seed %d: %s\n%s", seed, msg, aggregatetest.Describe(s.Events()))
			}
			if before.Paused() {
				for _, e := range evs {
					judged[e.EventName()]++
					if q, ok := e.(events.ActionQueued); ok {
						if a, _ := s.State.Action(q.Action); a.Agent != nil {
							queuedDelegations++
						}
					}
					if _, ok := e.(events.ChildStarted); ok {
						resumedChildren++
					}
				}
			}
		}
		src := pausingSource{aggregatetest.Rand(seed)}
		s.Start(src)
		for range 150 {
			s.Step(src)
		}
	}
	// Recorded while paused: the in-flight work that finishes and the
	// people's commands whose effect waits for the resume.
	for _, n := range []events.Name{events.NameModelReplied, events.NameAnswerRejected, events.NameAttemptReported,
		events.NameApprovalAnswered, events.NameReconciled, events.NameSettlementAccepted, events.NameRunResumed} {
		if judged[n] == 0 {
			t.Errorf("no decision on a paused run recorded %s", n)
		}
	}
	if queuedDelegations == 0 || resumedChildren == 0 {
		t.Errorf("%d delegations allowed while paused, %d children started by a resume: want both", queuedDelegations, resumedChildren)
	}
	t.Logf("events decided on a paused run: %v; delegations queued while paused %d, children started by a resume %d", judged, queuedDelegations, resumedChildren)
}

// pausingSource biases a seeded Source towards paused runs that get model
// replies: a pause or a resume is offered at a third of the steps instead of
// a twelfth, a third of the replies are final answers (half of them
// undecodable), and a typed answer may be corrected once.
type pausingSource struct{ src aggregatetest.Source }

func (p pausingSource) Intn(label string, n int) int {
	switch label {
	case "pause":
		n = min(n, 3)
	case "reply":
		if p.src.Intn("final reply", 3) == 0 {
			return 0
		}
	case "answer attempts":
		return n - 1
	}
	return p.src.Intn(label, n)
}

// innermost is the command a takeover or a close carries (Recover.Then,
// Closing.Then, nested), or c itself: a resolution decided inside a
// takeover is still the one resolution (d) allows (WEFT_PROPERTY_SEEDS=3000
// failed at seed 727: "ended action 3/b changed: reconciled -> reconciled
// after recover").
func innermost(c aggregate.Command) aggregate.Command {
	for {
		switch w := c.(type) {
		case aggregate.Recover:
			c = w.Then
		case aggregate.Closing:
			c = w.Then
		default:
			return c
		}
	}
}
