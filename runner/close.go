package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/worker"
)

// Closing attempts (docs/adr/0023-closing-attempts.md, docs/semantics.md §8
// "Closing an attempt"): before a decision that ends or abandons fenced
// attempts without a result of their own (aggregate.ToClose: a cancel, a
// run's end, an attempt timer, a takeover after a lost runner or a hand-off
// past the drain, a re-asked approval's answer, a budget stop), the runner
// creates each such attempt's claim key in weft_claims with a closed value,
// create-only and all together, and decides aggregate.Closing with the
// outcomes: the decision records each close that won (attempt_closed)
// ahead of its own events, in the same append. A create answered "key
// exists" is read: a closed value (this decision's or an earlier try's: a
// close that landed but whose decision was lost is found again by the next
// decision), or a worker's claim that the worker marked as not started
// (api.Claim.NotStarted: it decided not to start the body and never will),
// is closed; anything else is a worker's claim, recorded as such
// (attempt_closed with claimed) so that no later decision closes the
// attempt again. An outcome that stays unknown counts as claimed: §5's
// rule (uncertain), never closed.

// CloseUnknown is the message the runner logs (at warn level, with run,
// action, attempt and err) for each attempt it meant to close whose close
// has no known outcome: the create was not answered, or was not made (the
// claims bucket could not be looked up, or the claim may have expired).
// The attempt counts as claimed (§5's rule). The chaos harness counts
// these lines.
const CloseUnknown = "the close of an attempt's claim has an unknown outcome: counted claimed"

// closeFirst closes the claims of the attempts the decision evs of c on rn
// ends or abandons, and returns the command to decide instead
// (aggregate.Closing with the outcomes), or nil when there is none.
func (r *Runner) closeFirst(ctx context.Context, rn *run, c aggregate.Command, evs []events.Event, now time.Time) aggregate.Command {
	closes := aggregate.ToClose(rn.state, c, evs)
	if len(closes) == 0 {
		return nil
	}
	// The closes are made under the run's lock: bounded together.
	ctx, cancel := context.WithTimeout(ctx, closePhase)
	defer cancel()
	kv := r.claimsKV(ctx)
	var wg sync.WaitGroup
	for i := range closes {
		cl := &closes[i]
		a, _ := rn.state.Action(cl.Action)
		if kv == nil || !closable(a, now) {
			why := "the claims bucket cannot be looked up"
			if kv != nil {
				why = "the claim may have expired"
			}
			r.log.Warn(CloseUnknown, "run", rn.id, "action", cl.Action, "attempt", cl.Attempt, "err", why)
			continue
		}
		// A claim an aborted preparation of this attempt is removing is
		// waited for first (abortPrepared).
		rn.waitAbortedClaim(ctx, attemptKey(cl.Action, cl.Attempt, cl.Incarnation))
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.closeClaim(ctx, kv, rn.id, a.Attempt, cl)
		}()
	}
	wg.Wait()
	return aggregate.Closing{By: r.id, Closes: closes, Then: c}
}

// closable reports whether the claim of a's latest attempt can be closed
// at now (the runner's clock, never behind the run's last recorded time).
// A worker's claim is taken after the fence (recorded at a.FencedAt) and
// lives until the fence's deadline plus worker.ClaimMargin, and at least
// worker.ClaimMaxAge (the bucket's max age) after it was taken: so it
// lives at least until the earlier of deadline+ClaimMargin and
// FencedAt+ClaimMaxAge. A create after that might succeed over a worker's
// claim that expired, so the close is made only before that bound less
// half the margin, kept for the clocks (runners' and workers' clocks, and
// the store's, within 5 minutes of each other: ADR 0023); a later close
// counts as claimed.
func closable(a aggregate.Action, now time.Time) bool {
	bound := a.FencedAt.Add(worker.ClaimMaxAge)
	if d := a.Attempt.Deadline; d != nil && d.Add(worker.ClaimMargin).Before(bound) {
		bound = d.Add(worker.ClaimMargin)
	}
	return now.Before(bound.Add(-worker.ClaimMargin / 2))
}

// closePhase bounds the closes of one decision (closeFirst), lookup of
// the claims bucket included: a close not answered by then counts as
// claimed. claimsRetry is how long a failed lookup of the bucket is not
// tried again (its closes count as claimed meanwhile), so that a KV outage
// does not hold each decision's run lock for a lookup's timeout.
const (
	closePhase  = 10 * time.Second
	claimsRetry = 5 * time.Second
)

// claimsKV returns weft_claims, nil when it cannot be looked up (every
// close then counts as claimed).
func (r *Runner) claimsKV(ctx context.Context) jetstream.KeyValue {
	r.claimsMu.Lock()
	defer r.claimsMu.Unlock()
	if r.claims != nil {
		return r.claims
	}
	if !r.claimsFailed.IsZero() && time.Since(r.claimsFailed) < claimsRetry {
		return nil
	}
	kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := r.js.KeyValue(kctx, api.ClaimsBucket)
	if err != nil {
		r.claimsFailed = time.Now()
		r.log.Warn("cannot look up the claims bucket: attempts are not closed, their actions stay uncertain", "bucket", api.ClaimsBucket, "err", err)
		return nil
	}
	r.claims = kv
	return kv
}

// closeClaim creates the claim of the attempt fenced by f in run with a
// closed value (api.Claim.Closed) and sets cl's outcome: Closed when the
// create won or the key holds a closed value (By then names the runner
// that wrote it) or a claim its worker marked not started, Claimed when
// the key holds any other worker's claim, neither
// when the outcome stays unknown. A create whose answer was lost is tried
// again (it then finds its own closed value).
func (r *Runner) closeClaim(ctx context.Context, kv jetstream.KeyValue, run string, f events.AttemptFenced, cl *aggregate.Close) {
	key := api.ClaimKey(run, f.Action, f.Attempt, f.Incarnation)
	b, err := json.Marshal(api.Claim{Schema: 1, Closed: &api.ClaimClose{By: r.id, Why: cl.Why, At: time.Now().UTC()}})
	if err != nil {
		return
	}
	var opts []jetstream.KVCreateOpt
	if f.Deadline != nil {
		// As a worker's claim: until the deadline plus the margin.
		if ttl := time.Until(*f.Deadline) + worker.ClaimMargin; ttl < worker.ClaimMaxAge {
			opts = append(opts, jetstream.KeyTTL(max(ttl, time.Second)))
		}
	}
	for range 3 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = kv.Create(cctx, key, b, opts...)
		if errors.Is(err, jetstream.ErrKeyExists) {
			var e jetstream.KeyValueEntry
			e, err = kv.Get(cctx, key)
			cancel()
			if err != nil {
				continue
			}
			var found api.Claim
			if err = json.Unmarshal(e.Value(), &found); err != nil {
				break // not a claim this runtime wrote: unknown
			}
			switch {
			case found.Closed != nil:
				cl.Closed, cl.By = true, found.Closed.By
			case found.NotStarted != nil:
				// A worker's claim it marked as not started: that worker
				// never starts the body, and no delivery starts or takes
				// over such a claim: the attempt did not act. The log
				// records who claimed it and why it did not start.
				cl.Closed = true
				cl.NotStarted = &events.ClosedNotStarted{Worker: found.Worker, Why: found.NotStarted.Why}
			default:
				// The found claim's token binds a later mark to this
				// claim (recordLateMarks).
				cl.Claimed = true
				cl.ClaimWorker, cl.ClaimToken = found.Worker, found.Token
			}
			return
		}
		cancel()
		if err == nil {
			cl.Closed = true
			return
		}
		if ctx.Err() != nil {
			break
		}
	}
	r.log.Warn(CloseUnknown, "run", run, "action", f.Action, "attempt", f.Attempt, "err", err)
}

// wonCloses adds to won the closes of c (an aggregate.Closing) that won
// and that won does not hold yet.
func wonCloses(c aggregate.Command, won []aggregate.Close) []aggregate.Close {
	cl, _ := c.(aggregate.Closing)
	for _, x := range cl.Closes {
		if x.Closed && !slices.ContainsFunc(won, func(w aggregate.Close) bool {
			return w.Action == x.Action && w.Attempt == x.Attempt && w.Incarnation == x.Incarnation
		}) {
			won = append(won, x)
		}
	}
	return won
}

// keepCloses keeps the closes that won for run id's decision that was not
// recorded (the append ended unavailable, contended or lost the run) and
// wakes the run later (retryLater): a closed attempt never starts nor
// reports, so an attempt without a deadline would otherwise wait for a
// report forever while its runner lives (docs/adr/0023-closing-attempts.md,
// item 5). recordKeptCloses records them.
func (r *Runner) keepCloses(id string, won []aggregate.Close) {
	r.mu.Lock()
	r.closes[id] = append(r.closes[id], won...)
	r.mu.Unlock()
	r.retryLater(id)
}

// recordKeptCloses records each close keepCloses kept for rn whose attempt
// is still running, not recorded closed: Closing{Then: Lost} records the
// close and loses the attempt, which is replayed without spending its
// budget (it did not act). A close whose attempt was decided meanwhile (a
// later decision found the closed value) is dropped; one whose decision
// fails again is kept for the next wake.
func (r *Runner) recordKeptCloses(ctx context.Context, rn *run) error {
	r.mu.Lock()
	kept := r.closes[rn.id]
	delete(r.closes, rn.id)
	r.mu.Unlock()
	var failed error
	for _, cl := range kept {
		a, ok := rn.state.Action(cl.Action)
		if !ok || a.State != aggregate.ActionRunning || a.Attempts != cl.Attempt || a.Attempt.Incarnation != cl.Incarnation || slices.Contains(a.Closed, cl.Attempt) {
			continue
		}
		c := aggregate.Closing{By: r.id, Closes: []aggregate.Close{cl}, Then: aggregate.Lost{Action: cl.Action, Attempt: cl.Attempt, Cause: events.CauseWorkerLost,
			Evidence: fmt.Sprintf("the claim of attempt %d was closed (%s) by a decision that was not recorded: no worker starts it", cl.Attempt, cl.Why)}}
		if err := r.step(ctx, rn, c); err != nil {
			if retryTimer(err) {
				r.keepCloses(rn.id, []aggregate.Close{cl})
			}
			if failed == nil {
				failed = err
			}
		}
	}
	return failed
}

// recordLateMarks reads the claims of the attempts of rn whose close found
// a worker's claim while their action is still uncertain
// (aggregate.LateMarks; only: one action, "" for all) and records each
// claim its worker has since marked not started (api.Claim.NotStarted) as
// aggregate.MarkedNotStarted: the decision is the claim's value as read
// here, never a worker's word (docs/adr/0023-closing-attempts.md, "Late
// evidence: a mark after the decision"). A claim that cannot be read,
// is gone or is not marked records nothing: the action stays uncertain
// (§5's rule). It costs one KV get per such attempt, and nothing on a run
// without one. It returns the first error that leaves a mark unrecorded
// for now (the store did not answer, or the append conflicted); a refusal
// is logged.
func (r *Runner) recordLateMarks(ctx context.Context, rn *run, only string) error {
	marks := aggregate.LateMarks(rn.state, only)
	if len(marks) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, closePhase)
	defer cancel()
	kv := r.claimsKV(ctx)
	if kv == nil {
		return nil
	}
	var failed error
	for _, f := range marks {
		gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
		e, err := kv.Get(gctx, api.ClaimKey(rn.id, f.Action, f.Attempt, f.Incarnation))
		gcancel()
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				r.log.Warn("cannot read a claim for its not-started mark: the action stays uncertain until it is read again", "run", rn.id, "action", f.Action, "attempt", f.Attempt, "err", err)
			}
			continue
		}
		var c api.Claim
		if json.Unmarshal(e.Value(), &c) != nil || c.NotStarted == nil || c.Closed != nil {
			continue
		}
		err = r.step(ctx, rn, aggregate.MarkedNotStarted{Action: f.Action, Attempt: f.Attempt, Incarnation: f.Incarnation, Token: c.Token, Worker: c.Worker, Why: c.NotStarted.Why, By: r.id})
		switch {
		case err == nil:
		case transient(err):
			// Not recorded: read again by the next report or wake.
			if failed == nil {
				failed = err
			}
		default:
			// Refused (a reconciliation recorded meanwhile wins): the
			// report that brought it is answered as usual.
			r.log.Info("a claim's not-started mark was not recorded", "run", rn.id, "action", f.Action, "attempt", f.Attempt, "err", err)
		}
	}
	return failed
}
