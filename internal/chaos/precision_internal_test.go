package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/runner"
)

// TestSemantics8_ClosingAnAttemptUnknownClosesAreReadFromTheRunnersLogs:
// the precision check (uncertain_without_start_or_claim) excuses exactly
// the actions a runner logged a close of with no known outcome, read from
// the parts' logs as a runner part writes them (slog's text format).
func TestSemantics8_ClosingAnAttemptUnknownClosesAreReadFromTheRunnersLogs(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "r1.log"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelWarn})).With("runner", "r1-1")
	log.Warn(runner.CloseUnknown, "run", "c-7", "action", "1/call_1_1", "attempt", 1, "err", "context deadline exceeded")
	log.Warn("something else", "run", "c-8", "action", "1/call_1_1")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got := unknownCloses(dir)
	if len(got) != 1 || !got["c-7 1/call_1_1"] {
		t.Fatalf("unknown closes %v, want exactly c-7 1/call_1_1", got)
	}
}

// TestSemantics8_ClosingAnAttemptPrecisionCountsAMarkOnlyWhereTheLogFoundTheClaim:
// the precision figure (docs/reliability.md, "Precision") counts an
// uncertain action without a body start as marked not started after the
// decision read the claim only when the log records its last attempt's
// close as having found the worker's claim (attempt_closed claimed); when
// the log records that attempt closed, or records the worker's mark of it
// with every attempt closed (attempt_not_started: the mark ends such an
// action not_started, on a live run too), the action should have ended
// not_started, so it is a violation (uncertain_without_start_or_claim).
// Each other case is counted once in its own bucket.
func TestSemantics8_ClosingAnAttemptPrecisionCountsAMarkOnlyWhereTheLogFoundTheClaim(t *testing.T) {
	s := natstest.Start(t)
	ctx := context.Background()
	claims, err := s.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: api.ClaimsBucket})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	plain := api.Claim{Schema: 1, Worker: "w-1", Token: "t-1", Claimed: at}
	marked := plain
	marked.NotStarted = &api.ClaimNotStarted{Why: api.ClaimEnded, At: at}
	closed := api.Claim{Schema: 1, Closed: &api.ClaimClose{By: "r-1", Why: "cancelled", At: at}}
	type want struct{ claimed, marked, unknown, violations int }
	for n, tc := range []struct {
		name            string
		attempts        int        // the action's attempts; 0: 1
		claim           *api.Claim // on the last attempt's key; nil: none
		closed, claimed []int      // what the log records of the attempts' closes
		unknown         bool       // a runner logged a close with no known outcome
		want            want
	}{
		{name: "marked, its close found the claim", claim: &marked, claimed: []int{1}, want: want{marked: 1}},
		{name: "marked, the log records it closed", claim: &marked, closed: []int{1}, want: want{violations: 1}},
		{name: "marked, its close found the claim, the mark recorded", claim: &marked, claimed: []int{1}, closed: []int{1}, want: want{violations: 1}},
		{name: "marked, its close found the claim, the mark recorded as evidence after an attempt that may have acted", attempts: 2, claim: &marked, claimed: []int{1, 2}, closed: []int{2}, want: want{marked: 1}},
		{name: "marked, no close recorded", claim: &marked, want: want{claimed: 1}},
		{name: "plain claim, its close found it", claim: &plain, claimed: []int{1}, want: want{claimed: 1}},
		{name: "plain claim, no close recorded", claim: &plain, want: want{claimed: 1}},
		{name: "closed by the runtime", claim: &closed, closed: []int{1}, want: want{violations: 1}},
		{name: "no claim, close unknown", unknown: true, want: want{unknown: 1}},
		{name: "no claim, nothing logged", want: want{violations: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, id := fmt.Sprintf("p-%d", n), "1/call_1_1"
			attempts := max(tc.attempts, 1)
			a := aggregate.Action{ID: id, State: aggregate.ActionUncertain, Detail: "worker_lost", Attempts: attempts, Closed: tc.closed, Claimed: tc.claimed}
			a.Attempt.Attempt, a.Attempt.Incarnation = attempts, 1
			if tc.claim != nil {
				b, err := json.Marshal(tc.claim)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := claims.Create(ctx, api.ClaimKey(run, id, attempts, 1), b); err != nil {
					t.Fatal(err)
				}
			}
			var p Precision
			var got want
			p.add(ctx, claims, map[string]bool{run + " " + id: tc.unknown}, run, a, nil, func(check, run, action, format string, args ...any) {
				if check != checkUncertainUnclaimed {
					t.Errorf("violation %s, want only %s", check, checkUncertainUnclaimed)
				}
				got.violations++
			})
			got.claimed, got.marked, got.unknown = p.Claimed, p.Marked, p.Unknown
			if got != tc.want || p.Uncertain != 1 || p.Unstarted != 1 {
				t.Fatalf("counted %+v (uncertain %d, unstarted %d), want %+v (1, 1)", got, p.Uncertain, p.Unstarted, tc.want)
			}
		})
	}
}
