package eventlog_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

// groupRound appends one decision to each run at once through l, from
// heads[run], and returns each outcome.
func groupRound(t *testing.T, l *eventlog.Log, runs []string, heads map[string]eventlog.Head, turn int64) map[string]error {
	t.Helper()
	ctx := ctxT(t)
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]error{}
		got = map[string]eventlog.Head{}
	)
	for _, run := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, h, err := l.Append(ctx, run, heads[run], t0, ev(turn))
			mu.Lock()
			out[run], got[run] = err, h
			mu.Unlock()
		}()
	}
	wg.Wait()
	for run, err := range out {
		if err == nil {
			heads[run] = got[run]
		}
	}
	return out
}

// syncAlwaysRuns starts a server with sync_interval: always and creates n
// runs prefix0.. with one event each: their ids and heads.
func syncAlwaysRuns(t *testing.T, prefix string, n int) (*natstest.Server, []string, map[string]eventlog.Head) {
	t.Helper()
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	var runs []string
	heads := map[string]eventlog.Head{}
	for i := range n {
		run := fmt.Sprintf("%s%d", prefix, i)
		runs = append(runs, run)
		heads[run] = mustAppend(t, s.Log, run, eventlog.Head{}, ev(1))
	}
	return s, runs, heads
}

// checkRuns loads every run and fails unless its head is want[run] and it
// holds want[run].Version events.
func checkRuns(t *testing.T, l *eventlog.Log, want map[string]eventlog.Head) {
	t.Helper()
	for run, h := range want {
		envs, head, err := l.Load(ctxT(t), run)
		if err != nil {
			t.Fatalf("load %s: %v", run, err)
		}
		if head != h || uint64(len(envs)) != h.Version {
			t.Fatalf("%s: head %+v with %d events, want %+v", run, head, len(envs), h)
		}
	}
}

// TestSemantics8_GroupCommitOneRunsConflictLeavesTheOthersLanding proves
// group commit (docs/adr/0025-group-commit.md) under sync_interval: always:
// the decisions of many runs waiting at once leave as ONE atomic batch,
// each keeps its own expected-sequence check, and when one run's head has
// moved ("only one append wins", docs/semantics.md §8) the batch refused whole
// costs the others one retry: they land, the stale one gets its
// *ConflictError and wrote nothing.
func TestSemantics8_GroupCommitOneRunsConflictLeavesTheOthersLanding(t *testing.T) {
	const n = 24
	s, runs, heads := syncAlwaysRuns(t, "g", n)
	l := eventlog.New(s.JS, eventlog.WithGroupCommitTest(n, 0))

	// All fresh: one batch of n.
	st0 := eventlog.ReadCommitStats()
	for run, err := range groupRound(t, l, runs, heads, 2) {
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
	}
	st1 := eventlog.ReadCommitStats()
	if st1.Batches-st0.Batches != 1 || st1.Batched-st0.Batched != n || st1.Retried != st0.Retried {
		t.Fatalf("commit stats %+v → %+v: want one batch of %d", st0, st1, n)
	}
	checkRuns(t, s.Log, heads)

	// g7's head moves under the batch: g7 conflicts, the others land.
	stale := heads["g7"]
	heads["g7"] = mustAppend(t, s.Log, "g7", stale, ev(99))
	moved := heads["g7"]
	heads["g7"] = stale
	out := groupRound(t, l, runs, heads, 3)
	var ce *eventlog.ConflictError
	if !errors.As(out["g7"], &ce) || ce.Current != moved || ce.Expected != stale {
		t.Fatalf("g7: %v, want a conflict at %+v", out["g7"], moved)
	}
	heads["g7"] = moved
	for run, err := range out {
		if run != "g7" && err != nil {
			t.Fatalf("%s failed with g7's conflict: %v", run, err)
		}
	}
	if st2 := eventlog.ReadCommitStats(); st2.Retried-st1.Retried != n || st2.Batches != st1.Batches {
		t.Fatalf("commit stats %+v → %+v: want the refused batch's %d messages retried alone", st1, st2, n)
	}
	checkRuns(t, s.Log, heads)
}

// TestSemantics8_GroupCommitLostAckLandsOnce proves a batch whose
// acknowledgement is lost keeps Append's rule for an unknown outcome: each
// decision is published again with its message id and check, is answered
// "wrong last sequence" because the batch had landed, and Append finds its
// own message in the log: success, stored once.
func TestSemantics8_GroupCommitLostAckLandsOnce(t *testing.T) {
	const n = 8
	s, runs, heads := syncAlwaysRuns(t, "l", n)
	l := eventlog.New(s.JS, eventlog.WithGroupCommitTest(n, 1))
	st0 := eventlog.ReadCommitStats()
	for run, err := range groupRound(t, l, runs, heads, 2) {
		if err != nil {
			t.Fatalf("%s: %v", run, err)
		}
	}
	if st1 := eventlog.ReadCommitStats(); st1.Retried-st0.Retried != n {
		t.Fatalf("commit stats %+v → %+v: the lost acknowledgement was not retried", st0, st1)
	}
	checkRuns(t, s.Log, heads)
}

// TestSemantics8_GroupCommitRandomConflicts runs rounds (fixed seed) in
// which each run decides from its head or, at random, from a stale one:
// exactly the stale ones conflict, every other decision lands, and the
// runs load back with exactly the decisions that were answered success.
func TestSemantics8_GroupCommitRandomConflicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 25))
	const n, rounds = 16, 12
	s, runs, heads := syncAlwaysRuns(t, "x", n)
	prev := map[string]eventlog.Head{}
	l := eventlog.New(s.JS, eventlog.WithGroupCommitTest(n, 0))
	for round := range rounds {
		from := map[string]eventlog.Head{}
		stale := map[string]bool{}
		for _, run := range runs {
			from[run] = heads[run]
			if rng.IntN(4) == 0 {
				stale[run] = true
				from[run] = prev[run] // the head before the last decision
			}
		}
		out := groupRound(t, l, runs, from, int64(round+2))
		for _, run := range runs {
			err := out[run]
			var ce *eventlog.ConflictError
			switch {
			case stale[run] && (!errors.As(err, &ce) || ce.Current != heads[run]):
				t.Fatalf("round %d, %s from a stale head: %v", round, run, err)
			case !stale[run] && err != nil:
				t.Fatalf("round %d, %s: %v", round, run, err)
			case !stale[run]:
				prev[run], heads[run] = heads[run], from[run]
			}
		}
	}
	checkRuns(t, s.Log, heads)
}
