package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/runner"
)

// checkStartAfterClosed is the check that no body started under an
// attempt its run records closed (attempt_closed: its claim was closed
// before any worker claimed it, docs/adr/0023-closing-attempts.md).
const checkStartAfterClosed = "body_start_after_attempt_closed"

// checkUncertainUnclaimed is the check that an uncertain action without a
// body start has a worker's claim (on its last attempt's key, or found by
// a close: attempt_closed claimed) or an attempt whose close had no known
// outcome: the precision target (docs/semantics.md §8, "Closing an attempt").
const checkUncertainUnclaimed = "uncertain_without_start_or_claim"

// claimsBucket is weft_claims, read for the precision figure.
const claimsBucket = api.ClaimsBucket

// Precision is how many uncertain actions a person is asked to reconcile,
// and how many of them never started a body (docs/semantics.md §8, "Closing an
// attempt"): the precision figure reported beside the violations.
type Precision struct {
	// Uncertain counts the actions that were uncertain: still uncertain,
	// or reconciled since (the workload reconciles some).
	Uncertain int
	// Unstarted counts those of them with no body start in the ledger,
	// each counted in one of Claimed, Marked and Unknown by UnstartedKind
	// (or reported a violation). Claimed counts those a worker's claim
	// covers that no close counted closed and that was not marked not
	// started when the action ended (UnstartedClaimed: a worker killed
	// between its claim and its body, the stated limit, and also a
	// draining worker's claim read before its release, a mark lost or
	// unanswered, a worker that does not mark (one that ignores
	// not_started), and a worker_lost report of a delivery that came before the mark).
	// Marked counts those whose last attempt's close the log records as
	// having found a worker's claim (attempt_closed claimed) that its
	// worker marked not started since (UnstartedMarked). Unknown counts
	// the others a runner logged a close of with no known outcome
	// (runner.CloseUnknown: the store was down). Any other is a violation
	// (checkUncertainUnclaimed).
	Unstarted, Claimed, Marked, Unknown int
	// Closed counts the attempts recorded closed: closed before any
	// worker claimed them, found marked not started by a close, or whose
	// claim a close found and its worker marked afterwards
	// (attempt_not_started).
	Closed int
}

// add counts action a of run, whose ledger starts are ss, and reports a
// body started under one of its closed attempts. unknown holds "<run>
// <action>" of every close a runner logged with no known outcome
// (unknownCloses).
func (p *Precision) add(ctx context.Context, claims jetstream.KeyValue, unknown map[string]bool, run string, a aggregate.Action, ss []bodyStart, v func(check, run, action, format string, args ...any)) {
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
	var c *api.Claim
	if e, err := claims.Get(ctx, api.ClaimKey(run, a.ID, a.Attempts, a.Attempt.Incarnation)); err == nil {
		var v api.Claim
		if json.Unmarshal(e.Value(), &v) == nil {
			c = &v
		}
	}
	switch kind, why := UnstartedKind(a, c, unknown[run+" "+a.ID]); kind {
	case UnstartedClaimed:
		p.Claimed++
	case UnstartedMarked:
		p.Marked++
	case UnstartedUnknown:
		p.Unknown++
	default:
		v(checkUncertainUnclaimed, run, a.ID, "%s", why)
	}
}

// Unstarted is how the precision figure counts an action that was
// uncertain and never started a body (docs/semantics.md §8, "Closing an
// attempt"; docs/reliability.md, "Precision").
type Unstarted int

const (
	// UnstartedViolation is when no worker's claim and no close of unknown
	// outcome explains it, or the log records its last attempt closed
	// while its worker's claim was marked not started, or records the
	// worker's mark of it (attempt_not_started) with every attempt closed:
	// the action should have ended not_started.
	UnstartedViolation Unstarted = iota
	// UnstartedClaimed is a worker's claim never marked not started by the
	// time the action ended (killed between claim and body, or a worker
	// that could not or does not mark).
	UnstartedClaimed
	// UnstartedMarked is when the log records that the close of its last attempt
	// found a worker's claim (attempt_closed claimed), and that worker
	// marked the claim not started since: the decision the worker's check
	// after its claim found had read the claim before the mark
	// (docs/adr/0023-closing-attempts.md, "Claims released as not
	// started"). A mark the run recorded (attempt_not_started) ends such
	// an action not_started when no other attempt may have acted, on a
	// live run too ("A late mark on a live run"), so it is not counted at
	// all, and a recorded mark on an action every attempt of which is
	// closed is a violation; what stays here is a mark not read yet, one
	// read after a reconciliation (refused, not recorded), or one recorded
	// as evidence only because an earlier attempt may have acted.
	UnstartedMarked
	// UnstartedUnknown is an action with an attempt whose close had no known outcome.
	UnstartedUnknown
)

// UnstartedKind counts action a, uncertain without a body start, whose
// last attempt's key holds claim c (nil: no key, or not a claim); unknown
// says whether a close of it had no known outcome. A violation comes with
// why, the problem's text.
func UnstartedKind(a aggregate.Action, c *api.Claim, unknown bool) (kind Unstarted, why string) {
	marked := c != nil && c.NotStarted != nil
	switch {
	case marked && slices.Contains(a.Closed, a.Attempts) && !slices.Contains(a.Claimed, a.Attempts):
		return UnstartedViolation, fmt.Sprintf("uncertain (%s) without a body start, though the log records attempt %d closed and its worker %s marked its claim not started (%s)", a.Detail, a.Attempts, c.Worker, c.NotStarted.Why)
	case marked && slices.Contains(a.Closed, a.Attempts) && len(a.Closed) == a.Attempts:
		return UnstartedViolation, fmt.Sprintf("uncertain (%s) without a body start, though the log records the mark of attempt %d by its worker %s (%s) and every one of its %d attempt(s) closed", a.Detail, a.Attempts, c.Worker, c.NotStarted.Why, a.Attempts)
	case marked && slices.Contains(a.Claimed, a.Attempts):
		return UnstartedMarked, ""
	case len(a.Claimed) > 0 || c != nil && c.Closed == nil:
		return UnstartedClaimed, ""
	case unknown:
		return UnstartedUnknown, ""
	}
	return UnstartedViolation, fmt.Sprintf("uncertain (%s) without a body start nor a worker's claim, and no close of it had an unknown outcome (closed %v)", a.Detail, a.Closed)
}

// unknownCloses reads the parts' logs in dir and returns "<run> <action>"
// of every close a runner logged with no known outcome (runner.CloseUnknown,
// slog's text format: msg="…" run=… action=…).
func unknownCloses(dir string) map[string]bool {
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, runner.CloseUnknown) {
				continue
			}
			out[field(line, "run")+" "+field(line, "action")] = true
		}
	}
	return out
}

// field is the value of key in an slog text line ("" without it).
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// plus returns the sum of p and q.
func (p Precision) plus(q Precision) Precision {
	return Precision{Uncertain: p.Uncertain + q.Uncertain, Unstarted: p.Unstarted + q.Unstarted, Claimed: p.Claimed + q.Claimed, Marked: p.Marked + q.Marked, Unknown: p.Unknown + q.Unknown, Closed: p.Closed + q.Closed}
}

// write prints the precision line of a report over faults injected faults.
func (p Precision) write(w io.Writer, faults int) {
	per := 0.0
	if faults > 0 {
		per = float64(p.Uncertain) * 1000 / float64(faults)
	}
	fmt.Fprintf(w, "  precision: uncertain actions %d (%.1f per 1000 faults), %d of them without a body start (%d claimed by a worker, never marked not started — killed between claim and body, or a worker that could not or does not mark, %d marked not started after the decision read the claim, %d with an attempt whose close had no known outcome); attempts closed (unclaimed, or found claimed and marked not started) %d\n",
		p.Uncertain, per, p.Unstarted, p.Claimed, p.Marked, p.Unknown, p.Closed)
}
