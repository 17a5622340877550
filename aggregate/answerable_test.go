package aggregate_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/aggregate/aggregatetest"
	"github.com/weftrun/weft/events"
)

// TestSemantics8_ATakeoverTheRuntimeDerivesIsNeverRefused checks
// docs/semantics.md
// §8, "A run can always be answered", over reachable states (random
// simulated runs), times (now, a little later, or far past every
// deadline) and commands (the ones people, workers, timers and the model
// send a run): a runner that takes the run over decides
// Recover{Cause: RecoveryCause(s), Then: c} at that time, and
//
//   - it is never refused for a reason that is not c's own: its refusal is
//     the one Decide gives for c on the recovered state (the takeover's
//     events alone, before its follow-ons);
//   - its first event is the recovery, and every event it emits that names
//     an incarnation names the recovered one: expiries and timers that fell
//     due are applied after the takeover, never at the old incarnation.
func TestSemantics8_ATakeoverTheRuntimeDerivesIsNeverRefused(t *testing.T) {
	if f := flag.Lookup("rapid.seed"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("20261206"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Value.Set(f.DefValue) })
	}
	causes := map[string]int{}
	t.Cleanup(func() { checkCauses(t, causes) })
	rapid.Check(t, func(t *rapid.T) {
		src := rapidSource{t}
		s := aggregatetest.New()
		s.Start(src)
		for range rapid.IntRange(0, 80).Draw(t, "steps") {
			s.Step(src)
			if _, fin := s.State.Finished(); fin {
				return
			}
			// A takeover may reach the run at any step.
			at := s.Now.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "later ms")) * time.Millisecond)
			if rapid.IntRange(0, 3).Draw(t, "far later") == 0 {
				at = s.Now.Add(24 * time.Hour) // past every deadline
			}
			cands := takeoverCommands(s)
			c := cands[rapid.IntRange(0, len(cands)-1).Draw(t, "command")]
			causes[aggregate.RecoveryCause(s.State)]++
			checkTakeover(t.Fatalf, s, c, at)
		}
	})
}

// TestSemantics8_ATakeoverTheRuntimeDerivesIsNeverRefusedSeeded checks
// the same over longer seeded runs (rapid's runs end early), at every
// fourth step, for every command that may reach the run, now, a little
// later and far past every deadline. WEFT_PROPERTY_SEEDS=N runs N seeds
// (200 by default).
func TestSemantics8_ATakeoverTheRuntimeDerivesIsNeverRefusedSeeded(t *testing.T) {
	seeds := propertySeeds(t, 200)
	causes := map[string]int{}
	for seed := range seeds {
		s := aggregatetest.New()
		src := aggregatetest.Rand(seed)
		s.Start(src)
		for i := range 120 {
			s.Step(src)
			if _, fin := s.State.Finished(); fin {
				break
			}
			if i%4 != 0 {
				continue
			}
			causes[aggregate.RecoveryCause(s.State)]++
			for _, c := range takeoverCommands(s) {
				for _, later := range []time.Duration{0, 150 * time.Millisecond, 24 * time.Hour} {
					checkTakeover(func(format string, args ...any) {
						t.Fatalf("seed %d step %d: "+format, append([]any{seed, i}, args...)...)
					}, s, c, s.Now.Add(later))
				}
			}
		}
	}
	checkCauses(t, causes)
}

// checkCauses fails t when the states never gave one of the takeover
// causes, the one the observed runs were refused for above all.
func checkCauses(t *testing.T, causes map[string]int) {
	for _, c := range []string{events.RecoveredIdle, events.RecoveredHandedOff, events.RecoveredRunnerLost} {
		if causes[c] == 0 && !t.Failed() {
			t.Errorf("no state gave the takeover cause %s: %v", c, causes)
		}
	}
	t.Logf("takeover causes: %v", causes)
}

// checkTakeover decides the takeover a runner derives from the run of s
// for c at the time at, and fails when it is refused for a reason that is
// not c's own or records anything at an incarnation but the recovered one.
func checkTakeover(fatalf func(string, ...any), s *aggregatetest.Sim, c aggregate.Command, at time.Time) {
	before := s.State
	cause := aggregate.RecoveryCause(before)
	r := aggregate.Recover{Runner: "taker", Cause: cause, Then: c}
	evs, err := aggregate.Decide(before, r, at)
	then := "alone"
	if c != nil {
		then = c.CommandName()
	}
	fail := func(format string, args ...any) {
		fatalf("takeover (cause %s) for %s at +%s: "+format+"\n%s", append([]any{cause, then, at.Sub(s.Now)}, append(args, aggregatetest.Describe(s.Events()))...)...)
	}
	if _, rerr := aggregate.Recovered(before, aggregate.Recover{Runner: "taker", Cause: cause}, at); rerr != nil {
		fail("the takeover itself was refused: %v", rerr)
	}
	if len(evs) == 0 {
		fail("nothing recorded (refusal %v)", err)
	}
	want := before.Incarnation() + 1
	if rr, ok := evs[0].(events.RunRecovered); !ok || rr.Incarnation != want {
		fail("the first event is %s, not the recovery at incarnation %d", events.Describe(evs[0]), want)
	}
	for _, e := range evs {
		if n, ok := incarnationOf(e); ok && n != want {
			fail("%s names incarnation %d, not the recovered %d", events.Describe(e), n, want)
		}
	}
	if err == nil {
		return
	}
	own := aggregate.DecideAfterRecovery(before, aggregate.Recover{Runner: "taker", Cause: cause}, c, at)
	if fmt.Sprint(own) != fmt.Sprint(err) {
		fail("refused %v; %s on the recovered state is refused %v", err, then, own)
	}
	// Every command here is well formed: a refusal that calls it
	// malformed, or internal, is the runtime's own.
	switch weft.ErrorCode(err) {
	case weft.CodeInvalidRequest, weft.CodeInternal:
		fail("refused %v", err)
	}
}

// takeoverCommands lists the commands that may reach the run of s and
// take it over: nil (a recovery scan), a cancel, each pending timer, a
// person's answer to each approval request (its current revision and the
// one before), a report of each body a worker runs, a reconciliation of
// each uncertain action and the reply of a requested model turn.
func takeoverCommands(s *aggregatetest.Sim) []aggregate.Command {
	cs := []aggregate.Command{nil, aggregate.Cancel{By: "dave", Reason: "stuck"}}
	w := aggregate.Pending(s.State)
	for _, tm := range w.Timers {
		cs = append(cs, tm.Command())
	}
	for _, a := range s.State.Actions() {
		if a.Request.Revision > 0 {
			for _, rev := range []int{a.Request.Revision, a.Request.Revision - 1} {
				cs = append(cs,
					aggregate.Approve{Action: a.ID, Revision: rev, Reviewer: "alice", Verifier: "v", Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}, Tool: events.ToolConfig{Timeout: 100, MaxAttempts: 1}},
					aggregate.Reject{Action: a.ID, Revision: rev, Reason: "no", By: "bob"})
			}
		}
		if a.State == aggregate.ActionUncertain {
			cs = append(cs, aggregate.Reconcile{Action: a.ID, Content: json.RawMessage(`{"v":1}`), By: "carol"})
		}
	}
	for _, b := range s.Bodies {
		cs = append(cs,
			aggregate.Report{Action: b.Action, Attempt: b.Attempt, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"v":1}`)},
			aggregate.Lost{Action: b.Action, Attempt: b.Attempt, Cause: events.CauseCrashed})
	}
	if w.Model != nil {
		cs = append(cs, aggregate.ModelFailure{Turn: w.Model.Turn, Kind: "overloaded"})
	}
	return cs
}

// incarnationOf returns the incarnation e names, if it names one.
func incarnationOf(e events.Event) (int, bool) {
	switch e := e.(type) {
	case events.ModelRequested:
		return e.Incarnation, true
	case events.AttemptFenced:
		return e.Incarnation, true
	case events.RunHandedOff:
		return e.Incarnation, true
	case events.RunRecovered:
		return e.Incarnation, true
	}
	return 0, false
}
