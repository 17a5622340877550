package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/chaos"
)

// precision is the chaos test's precision figure (docs/semantics.md §8,
// "Closing an attempt"), reported beside its problems: the actions a
// person was ever asked to reconcile (uncertain at some point of the log,
// and not ended not_started since by its worker's late mark),
// those of them whose body never started (no ledger line of the action),
// and of these, as chaos.UnstartedKind counts them: claimed, the ones a
// worker's claim covers that no close counted closed and that was not
// marked not started when the action ended (a worker killed between its
// claim and its body — the stated limit, docs/semantics.md §8 "Closing an
// attempt" — or a worker that could not or does not mark); marked, those
// whose last attempt's close the log records as having found the worker's
// claim (attempt_closed claimed) that its worker marked not started since
// (docs/adr/0023-closing-attempts.md, "Claims released as not started");
// unknown, the others that have an attempt the log records neither closed
// nor claimed (its close's outcome stayed unknown — the store was down —
// or no close was made); closed counts the attempts closed before any
// worker claimed them. Any other uncertain action without a body start is
// a problem, among them one whose last attempt the log records closed
// though its worker marked the claim not started: the target is that no
// action is uncertain without a body start or a worker's claim.
type precision struct{ uncertain, unstarted, claimed, marked, unknown, closed int }

// String is the figure as the chaos test logs it per seed.
func (p precision) String() string {
	return fmt.Sprintf("%d actions uncertain, %d of them without a body start (%d claimed by a worker, never marked not started — killed between claim and body, or a worker that could not or does not mark, %d marked not started after the decision read the claim, %d with an attempt whose close had no known outcome); %d attempts closed (unclaimed, or found claimed and marked not started)",
		p.uncertain, p.unstarted, p.claimed, p.marked, p.unknown, p.closed)
}

func (c *chaosEnv) precision() (p precision) {
	started := map[string]bool{}
	for _, s := range c.ledger() {
		started[s.run+" "+s.action] = true
	}
	claims, _ := c.e.srv.JS.KeyValue(context.Background(), api.ClaimsBucket)
	for _, run := range c.runs {
		envs, _, err := c.e.srv.Log.Load(context.Background(), run)
		if err != nil {
			continue
		}
		var s aggregate.State
		ever := map[string]aggregate.Action{}
		for _, env := range envs {
			ev, err := env.Event()
			if err != nil {
				break
			}
			s = aggregate.Evolve(s, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
			for _, a := range s.Actions() {
				if _, seen := ever[a.ID]; !seen && a.State == aggregate.ActionUncertain {
					ever[a.ID] = a
				}
			}
		}
		for _, a := range s.Actions() {
			p.closed += len(a.Closed)
		}
		for id, a := range ever {
			if now, _ := s.Action(id); now.State == aggregate.ActionNotStarted {
				// Uncertain until its worker's late mark was read
				// (attempt_not_started): it did not act, and nobody is
				// asked to reconcile it.
				continue
			}
			p.uncertain++
			if started[run+" "+id] {
				continue
			}
			p.unstarted++
			if claims == nil {
				continue
			}
			var cl *api.Claim
			if e, err := claims.Get(context.Background(), api.ClaimKey(run, id, a.Attempts, a.Attempt.Incarnation)); err == nil {
				var v api.Claim
				if json.Unmarshal(e.Value(), &v) == nil {
					cl = &v
				}
			}
			switch kind, why := chaos.UnstartedKind(a, cl, closeUnknown(a)); kind {
			case chaos.UnstartedClaimed:
				p.claimed++
			case chaos.UnstartedMarked:
				p.marked++
			case chaos.UnstartedUnknown:
				p.unknown++
			default:
				c.problem("%s %s: %s", run, id, why)
			}
		}
	}
	return p
}

// closeUnknown reports whether one of a's attempts is recorded neither
// closed nor claimed (attempt_closed): no close of it had a known outcome.
func closeUnknown(a aggregate.Action) bool {
	for n := 1; n <= a.Attempts; n++ {
		if !slices.Contains(a.Closed, n) && !slices.Contains(a.Claimed, n) {
			return true
		}
	}
	return false
}
