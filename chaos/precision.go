package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
)

// checkStartAfterClosed is the check that no body started under an
// attempt its run records closed (attempt_closed: its claim was closed
// before any worker claimed it, docs/adr/0023-closing-attempts.md).
const checkStartAfterClosed = "body_start_after_attempt_closed"

// checkUncertainUnclaimed is the check that an uncertain action without a
// body start has a worker's claim (on its last attempt's key, or found by
// a close: attempt_closed claimed) or an attempt whose close had no known
// outcome: the precision target (SEMANTICS.md §8, "Closing an attempt").
const checkUncertainUnclaimed = "uncertain_without_start_or_claim"

// claimsBucket is weft_claims, read for the precision figure.
const claimsBucket = api.ClaimsBucket

// Precision is how many uncertain actions a person is asked to reconcile,
// and how many of them never started a body (SEMANTICS.md §8, "Closing an
// attempt"): the precision figure reported beside the violations.
type Precision struct {
	// Uncertain counts the actions that were uncertain: still uncertain,
	// or reconciled since (the workload reconciles some).
	Uncertain int
	// Unstarted counts those of them with no body start in the ledger;
	// Claimed those of Unstarted whose last attempt has a worker's claim
	// (a worker claimed it, then was killed or found it ended before its
	// body started: the runtime cannot tell that from a started body).
	// or a close of which found a worker's claim (attempt_closed claimed).
	// Unknown counts the others with an attempt the log records neither
	// closed nor claimed: its close's outcome stayed unknown (the store was
	// down) or no close was made. Any other is a violation
	// (checkUncertainUnclaimed).
	Unstarted, Claimed, Unknown int
	// Closed counts the attempts closed before any worker claimed them.
	Closed int
}

// add counts action a of run, whose ledger starts are ss, and reports a
// body started under one of its closed attempts.
func (p *Precision) add(ctx context.Context, claims jetstream.KeyValue, run string, a aggregate.Action, ss []bodyStart, v func(check, run, action, format string, args ...any)) {
	p.Closed += len(a.Closed)
	for _, s := range ss {
		if slices.Contains(a.Closed, s.Attempt) {
			v(checkStartAfterClosed, run, a.ID, "attempt %d started a body in %s after its claim was closed", s.Attempt, s.Process)
		}
	}
	if a.State != aggregate.ActionUncertain && a.State != aggregate.ActionReconciled {
		return // a reconciled action was uncertain: a person was asked
	}
	p.Uncertain++
	if len(ss) > 0 {
		return
	}
	p.Unstarted++
	if claims == nil {
		return
	}
	e, err := claims.Get(ctx, api.ClaimKey(run, a.ID, a.Attempts, a.Attempt.Incarnation))
	var c api.Claim
	switch {
	case len(a.Claimed) > 0 || err == nil && json.Unmarshal(e.Value(), &c) == nil && c.Closed == nil:
		p.Claimed++
	case closeUnknown(a):
		p.Unknown++
	default:
		v(checkUncertainUnclaimed, run, a.ID, "uncertain (%s) without a body start nor a worker's claim, though every attempt's close is known (closed %v)", a.Detail, a.Closed)
	}
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

// plus returns the sum of p and q.
func (p Precision) plus(q Precision) Precision {
	return Precision{Uncertain: p.Uncertain + q.Uncertain, Unstarted: p.Unstarted + q.Unstarted, Claimed: p.Claimed + q.Claimed, Unknown: p.Unknown + q.Unknown, Closed: p.Closed + q.Closed}
}

// write prints the precision line of a report over faults injected faults.
func (p Precision) write(w io.Writer, faults int) {
	per := 0.0
	if faults > 0 {
		per = float64(p.Uncertain) * 1000 / float64(faults)
	}
	fmt.Fprintf(w, "  precision: uncertain actions %d (%.1f per 1000 faults), %d of them without a body start (%d claimed by a worker that never started the body, %d with an attempt whose close had no known outcome); attempts closed unclaimed %d\n",
		p.Uncertain, per, p.Unstarted, p.Claimed, p.Unknown, p.Closed)
}
