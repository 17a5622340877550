package e2e_test

import (
	"context"
	"encoding/json"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
)

// precision is the chaos test's precision figure (SEMANTICS.md §8,
// "Closing an attempt"), reported beside its problems: the actions a
// person was ever asked to reconcile (uncertain at some point of the log),
// those of them whose body never started (no ledger line of the action),
// and of these the ones whose last attempt holds a worker's claim (a worker
// claimed it, then was killed or found it ended before its body started:
// the runtime cannot tell that from a started body,
// docs/adr/0023-closing-attempts.md); closed counts the attempts closed
// before any worker claimed them.
type precision struct{ uncertain, unstarted, claimed, closed int }

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
			p.uncertain++
			if started[run+" "+id] {
				continue
			}
			p.unstarted++
			if claims == nil {
				continue
			}
			var cl api.Claim
			if e, err := claims.Get(context.Background(), api.ClaimKey(run, id, a.Attempts, a.Attempt.Incarnation)); err == nil && json.Unmarshal(e.Value(), &cl) == nil && cl.Closed == nil {
				p.claimed++
			}
		}
	}
	return p
}
