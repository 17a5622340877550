package aggregate_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
)

// rapidSource draws the simulation's choices from rapid, which shrinks a
// failing run to a small one.
type rapidSource struct{ t *rapid.T }

func (r rapidSource) Intn(label string, n int) int { return rapid.IntRange(0, n-1).Draw(r.t, label) }

// TestProperties checks the invariants (a)–(i) of the aggregate over random
// command sequences (aggregatetest.Sim: the work Pending asks for plus
// stale, duplicate and racing commands).
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
			events.NameCancelRequested, events.NameReportRefused, events.NameRunFinished, events.NameRequirementChanged,
			events.NameChildStarted, events.NameChildSettled} {
			if seen[n] == 0 && !t.Failed() {
				t.Errorf("the random commands never produced %s", n)
			}
		}
		t.Logf("events produced: %v", seen)
	})
	rapid.Check(t, func(t *rapid.T) {
		src := rapidSource{t}
		s := aggregatetest.New()
		s.Check = func(before aggregate.State, c aggregate.Command, evs []events.Event, err error) {
			// (f) The same command on the same state gives the same events.
			again, err2 := aggregate.Decide(before, c, s.Now)
			if !reflect.DeepEqual(evs, again) || fmt.Sprint(err) != fmt.Sprint(err2) {
				t.Fatalf("(f) Decide is not deterministic for %s", c.CommandName())
			}
			// (g) Evolve accepted everything Decide produced: Sim.Apply
			// would have panicked otherwise.
			// (d) Ended actions never change.
			for _, a := range before.Actions() {
				if !a.State.Ended() {
					continue
				}
				now, _ := s.State.Action(a.ID)
				if !reflect.DeepEqual(a, now) {
					t.Fatalf("(d) ended action %s changed: %s -> %s after %s", a.ID, a.State, now.State, c.CommandName())
				}
			}
			// (h) Folding the events from scratch equals the state the
			// decisions were made on.
			if !reflect.DeepEqual(aggregate.Fold(s.History).Clone(), s.State.Clone()) {
				t.Fatalf("(h) fold from scratch differs after %s", c.CommandName())
			}
		}
		defer func() {
			for _, r := range s.History {
				seen[r.Event.EventName()]++
			}
		}()
		s.Start(src)
		steps := rapid.IntRange(10, 80).Draw(t, "steps")
		for range steps {
			s.Step(src)
		}
		checkLog(t, s)
		// (f) Replaying the same commands at the same times from scratch
		// produces the same events.
		replay := aggregatetest.New()
		for _, c := range s.Commands {
			replay.Now = c.Now
			replay.Apply(c.Command)
		}
		if !reflect.DeepEqual(replay.History, s.History) {
			t.Fatalf("(f) the same commands produced different events")
		}
	})
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
func checkLog(t *rapid.T, s *aggregatetest.Sim) {
	type key struct {
		action  string
		attempt int
	}
	fenced := map[key]events.AttemptFenced{}
	fences := map[string]int{}
	budget := map[string]int{}
	outcomes := map[key]int{}
	fail := func(format string, args ...any) {
		t.Fatalf(format+"\n%s", append(args, aggregatetest.Describe(s.Events()))...)
	}
	for _, e := range s.Events() {
		switch e := e.(type) {
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
		// (b) A non-replayable action has at most one attempt; no action
		// has more attempts than its recorded budget.
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
	// (e) Results reach the model in call order.
	tr := aggregate.Transcript(s.State)
	for i, m := range tr {
		if m.Role != model.RoleTool {
			continue
		}
		if i == 0 || tr[i-1].Role != model.RoleAssistant {
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
	var st aggregate.State
	if err := json.Unmarshal([]byte(`{"schema":2}`), &st); err == nil {
		t.Fatal("a snapshot of another schema was accepted")
	}
}
