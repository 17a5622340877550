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
	// Unstarted counts those of them with no body start in the ledger.
	// Claimed counts those of Unstarted whose last attempt has a worker's
	// claim that its worker never marked not started, or a close of which
	// found a worker's claim (attempt_closed claimed) that holds no such
	// mark now: the stated limit — a worker killed between its claim and
	// its body (or whose mark could not be written), which the runtime
	// cannot tell from a started body (docs/semantics.md §8, "Closing an
	// attempt"). Marked counts those of Unstarted whose worker marked its
	// claim not started (api.Claim.NotStarted) after the decision that
	// ended the attempt had read the claim: the decision its check after
	// the claim found. Unknown counts the others a runner logged a close of
	// with no known outcome (runner.CloseUnknown: the store was down). Any
	// other is a violation (checkUncertainUnclaimed): an attempt nobody
	// closed.
	Unstarted, Claimed, Marked, Unknown int
	// Closed counts the attempts closed before any worker claimed them.
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
	e, err := claims.Get(ctx, api.ClaimKey(run, a.ID, a.Attempts, a.Attempt.Incarnation))
	var c api.Claim
	decoded := err == nil && json.Unmarshal(e.Value(), &c) == nil
	switch {
	case decoded && c.NotStarted != nil:
		p.Marked++
	case len(a.Claimed) > 0 || decoded && c.Closed == nil:
		p.Claimed++
	case unknown[run+" "+a.ID]:
		p.Unknown++
	default:
		v(checkUncertainUnclaimed, run, a.ID, "uncertain (%s) without a body start nor a worker's claim, and no runner logged a close of it with an unknown outcome (closed %v)", a.Detail, a.Closed)
	}
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
	fmt.Fprintf(w, "  precision: uncertain actions %d (%.1f per 1000 faults), %d of them without a body start (%d claimed by a worker that never started the body nor marked it — killed between claim and body, %d marked not started after the decision read the claim, %d with an attempt whose close had no known outcome); attempts closed unclaimed %d\n",
		p.Uncertain, per, p.Unstarted, p.Claimed, p.Marked, p.Unknown, p.Closed)
}
