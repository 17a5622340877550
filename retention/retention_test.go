package retention

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/protocol"
)

var t0 = time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)

// now is the purges' time in these tests: with an age of 48h the cutoff
// is t0 + 3 days.
var now = t0.Add(5 * 24 * time.Hour)

const age = 48 * time.Hour

func started(input string) events.RunStarted {
	return events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: input, Runner: "r1", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}}
}

// finished is a run that answered at once.
func finished(input string) []events.Event {
	return []events.Event{
		started(input),
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyFinalAnswer, Text: "done", Usage: &events.Usage{InputTokens: 10, OutputTokens: 2}},
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"done"`)}},
	}
}

// deployment is a real server with the projector running.
func deployment(t testing.TB) *natstest.Server {
	t.Helper()
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	for _, b := range []string{protocol.SnapshotsBucket, protocol.ClaimsBucket} {
		if _, err := s.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// appendAt appends evs to run, one decision each, a second apart from at.
func appendAt(t testing.TB, s *natstest.Server, run string, at time.Time, evs ...events.Event) {
	t.Helper()
	ctx := context.Background()
	head, err := s.Log.Head(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range evs {
		if _, head, err = s.Log.Append(ctx, run, head, at.Add(time.Duration(i)*time.Second), e); err != nil {
			t.Fatal(err)
		}
	}
}

// waitViews waits until the projector stored every run's view at its
// log's head, and its checkpoint covers the head (the index entries too).
func waitViews(t testing.TB, s *natstest.Server, runs ...string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for _, run := range runs {
		h, err := s.Log.Head(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		for {
			views, err := Views(ctx, s.JS)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := projector.ReadCheckpoint(ctx, s.JS)
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(views, func(v projections.RunView) bool { return v.Run == run }); i >= 0 && views[i].Version == h.Version && cp.Seq >= h.Seq {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the view of %s never reached version %d", run, h.Version)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func kvHas(t *testing.T, s *natstest.Server, bucket, key string) bool {
	t.Helper()
	kv, err := s.JS.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kv.Get(context.Background(), key)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

func putKV(t *testing.T, s *natstest.Server, bucket, key string) {
	t.Helper()
	kv, err := s.JS.KeyValue(context.Background(), bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), key, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
}

func viewOf(t *testing.T, s *natstest.Server, run string) projections.RunView {
	t.Helper()
	views, err := Views(context.Background(), s.JS)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		if v.Run == run {
			return v
		}
	}
	t.Fatalf("no view of %s", run)
	return projections.RunView{}
}

// assertGone checks that no trace of run is left: events, view, summary,
// index entries (of its view before the purge), snapshot, claims, marker.
func assertGone(t *testing.T, s *natstest.Server, run string, before projections.RunView) {
	t.Helper()
	ctx := context.Background()
	if h, err := s.Log.Head(ctx, run); err != nil || !h.IsZero() {
		t.Errorf("%s: the log still has events (head %+v, %v)", run, h, err)
	}
	for _, b := range []string{protocol.ViewsBucket, protocol.RunsBucket, protocol.SnapshotsBucket} {
		if kvHas(t, s, b, run) {
			t.Errorf("%s: %s still has its key", run, b)
		}
	}
	// Its tombstone stays: the id is never used again.
	var we *weft.Error
	if err := CheckNotPurged(ctx, s.JS, run); !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || we.SameInput != nil {
		t.Errorf("%s: a start under the purged id: %v, want already_started without same_input", run, err)
	}
	if kvHas(t, s, protocol.ClaimsBucket, run+".YQ.1.1") {
		t.Errorf("%s: its claim is left", run)
	}
	keys := projector.IndexKeys(before)
	if len(keys) == 0 {
		t.Fatalf("%s: no index keys to check", run)
	}
	for _, k := range keys {
		if kvHas(t, s, protocol.IndexBucket, k) {
			t.Errorf("%s: index entry %s is left", run, k)
		}
	}
}

// TestRetentionRemovesOldFinishedRunsAndKeepsTheRest (docs/security.md,
// "Retention and legal hold"): an old finished run goes entirely —
// events, view, summary, index entries, snapshot, claims; a newer
// finished run, an unfinished one, a held one, and an old finished
// parent whose fork is unfinished (a family goes together) are kept,
// each with its reason; everything kept still verifies; a second apply
// removes nothing more.
func TestRetentionRemovesOldFinishedRunsAndKeepsTheRest(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	appendAt(t, s, "new", t0.Add(4*24*time.Hour), finished("new")...)
	appendAt(t, s, "live", t0, started("live"), events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart})
	appendAt(t, s, "held", t0, finished("held")...)
	appendAt(t, s, "parent", t0, finished("parent")...)
	appendAt(t, s, "fork", t0, started("parent"), events.RunForked{From: events.ForkedFrom{Run: "parent", Version: 4, Turn: 1}})
	all := []string{"old", "new", "live", "held", "parent", "fork"}
	waitViews(t, s, all...)
	putKV(t, s, protocol.SnapshotsBucket, "old")
	putKV(t, s, protocol.ClaimsBucket, "old.YQ.1.1")
	if _, err := Place(ctx, s.JS, "", "held", Person{By: "legal: r.ortiz"}, "dispute D-17", t0); err != nil {
		t.Fatal(err)
	}
	before := viewOf(t, s, "old")

	dry, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, DryRun: true})
	if err != nil || !slices.Equal(dry.Purged, []string{"old"}) {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if h, _ := s.Log.Head(ctx, "old"); h.IsZero() {
		t.Fatal("the dry run removed events")
	}

	var progress []string
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, Progress: func(done, total int, run string) {
		progress = append(progress, run)
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Purged, []string{"old"}) || !slices.Equal(progress, []string{"old"}) {
		t.Fatalf("purged %v (progress %v), want [old]", res.Purged, progress)
	}
	kept := map[string]string{}
	for _, k := range res.Kept {
		kept[k.Run] = k.Why
	}
	for run, want := range map[string]string{
		"new":    "newer than the cutoff",
		"live":   "unfinished (working)",
		"held":   "legal hold by legal: r.ortiz",
		"fork":   "unfinished",
		"parent": "a run of its family is kept: fork",
	} {
		if !strings.Contains(kept[run], want) {
			t.Errorf("kept[%s] = %q, want it to say %q", run, kept[run], want)
		}
	}
	assertGone(t, s, "old", before)
	for _, run := range all[1:] {
		envs, head, err := s.Log.Load(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		if rep := audit.Verify(envs, audit.WithHead(head.Hash), audit.WithUnfinished()); !rep.OK() {
			t.Errorf("%s after the purge: %v", run, rep.Problem)
		}
	}
	again, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || len(again.Purged) != 0 || len(again.Completed) != 0 {
		t.Fatalf("second apply: %+v %v", again, err)
	}

	// Released, the hold no longer keeps its run.
	if _, err := ReleaseHold(ctx, s.JS, "", "held", "", Person{By: "legal: r.ortiz"}, "D-17 settled", now); err != nil {
		t.Fatal(err)
	}
	res, err = Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || !slices.Equal(res.Purged, []string{"held"}) {
		t.Fatalf("after the release: %+v %v", res, err)
	}
	holds, err := Holds(ctx, s.JS)
	if err != nil || len(holds) != 1 || holds[0].Released == nil || holds[0].Released.Reason != "D-17 settled" {
		t.Fatalf("the released hold's record: %+v %v", holds, err)
	}
}

// TestRetentionInterruptedPurgeIsCompletedByTheNext: a purge stopped
// after the read models went (the view gone, the events still there) is
// completed by the next apply, which names it completed.
func TestRetentionInterruptedPurgeIsCompletedByTheNext(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	putKV(t, s, protocol.SnapshotsBucket, "old")
	before := viewOf(t, s, "old")
	applyStoppedAfter(t, s, stepReadModels)
	if kvHas(t, s, protocol.ViewsBucket, "old") || !kvHas(t, s, protocol.PurgesBucket, "old") || !kvHas(t, s, protocol.SnapshotsBucket, "old") {
		t.Fatal("the apply did not stop after the read models")
	}
	if h, _ := s.Log.Head(ctx, "old"); h.IsZero() {
		t.Fatal("the events went before the read models' step ended")
	}
	// A hold now is refused: the run is being removed.
	var we *weft.Error
	if _, err := Place(ctx, s.JS, "", "old", Person{By: "legal"}, "late", now); !errors.As(err, &we) || we.Code != weft.CodeConflict {
		t.Fatalf("hold of a run being purged: %v, want conflict", err)
	}
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || !slices.Equal(res.Completed, []string{"old"}) || len(res.Purged) != 0 {
		t.Fatalf("the next apply: %+v %v", res, err)
	}
	assertGone(t, s, "old", before)
}

// applyStoppedAfter runs an Apply (age, now) that stops after the first
// removal step named step, as a crash there would.
func applyStoppedAfter(t *testing.T, s *natstest.Server, step string) {
	t.Helper()
	crash := errors.New("crash")
	_, err := Apply(context.Background(), s.JS, Options{OlderThan: age, Now: now, afterStep: func(_, at string) error {
		if at == step {
			return crash
		}
		return nil
	}})
	if !errors.Is(err, crash) {
		t.Fatalf("the apply stopped after %s: %v", step, err)
	}
}

// activeHolds returns the active holds of run.
func activeHolds(t *testing.T, s *natstest.Server, run string) []Hold {
	t.Helper()
	all, err := Holds(context.Background(), s.JS)
	if err != nil {
		t.Fatal(err)
	}
	var out []Hold
	for _, h := range all {
		if h.Run == run && h.Active() {
			out = append(out, h)
		}
	}
	return out
}

// TestRetentionHoldPlacedBeforeTheHoldCheckKeepsTheFamily: a hold placed
// after Apply read the holds but before its hold check of the run (the
// race of docs/adr/0030 §5) keeps the run, untouched, and the run may be
// held again after.
func TestRetentionHoldPlacedBeforeTheHoldCheckKeepsTheFamily(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	var placed error
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, afterStep: func(run, step string) error {
		if step == stepHoldCheck {
			_, placed = Place(ctx, s.JS, "", run, Person{By: "legal"}, "subpoena S-3", now)
		}
		return nil
	}})
	if err != nil || placed != nil {
		t.Fatalf("apply %v, hold %v", err, placed)
	}
	if len(res.Purged) != 0 || len(res.Kept) != 1 || !strings.Contains(res.Kept[0].Why, "subpoena S-3") {
		t.Fatalf("the purge: %+v", res)
	}
	if h, _ := s.Log.Head(ctx, "old"); h.IsZero() || kvHas(t, s, protocol.PurgesBucket, "old") || !kvHas(t, s, protocol.ViewsBucket, "old") {
		t.Fatalf("the held run was touched (head %+v)", h)
	}
	if h, err := Place(ctx, s.JS, "", "old", Person{By: "legal"}, "dispute D-17", now); err != nil || h.ID != "h2" {
		t.Fatalf("a second hold after the purge gave the run back: %+v %v", h, err)
	}
}

// TestRetentionHoldAfterTheHoldCheckIsRefusedAndNotRecorded: once a purge
// passed its hold check on a run (compare-and-set on the run's holds), a
// hold is refused conflict and not recorded — no active hold is listed on
// a run that is then removed.
func TestRetentionHoldAfterTheHoldCheckIsRefusedAndNotRecorded(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	var placed error
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, afterStep: func(run, step string) error {
		if step == stepMarked {
			_, placed = Place(ctx, s.JS, "", run, Person{By: "legal"}, "subpoena S-3", now)
		}
		return nil
	}})
	if err != nil || !slices.Equal(res.Purged, []string{"old"}) {
		t.Fatalf("the purge: %+v %v", res, err)
	}
	var we *weft.Error
	if !errors.As(placed, &we) || we.Code != weft.CodeConflict || !strings.Contains(we.Message, "not placed") {
		t.Fatalf("the hold placed after the hold check: %v, want conflict", placed)
	}
	if hs := activeHolds(t, s, "old"); len(hs) != 0 {
		t.Fatalf("an active hold is listed on the removed run: %+v", hs)
	}
}

// TestRetentionSecondHoldIsKeptUntilReleased: a run holds several holds,
// each released on its own; the run is kept while any is active.
func TestRetentionSecondHoldIsKeptUntilReleased(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	a, err := Place(ctx, s.JS, "", "old", Person{By: "legal A"}, "dispute D-17", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Place(ctx, s.JS, "", "old", Person{By: "legal B"}, "subpoena S-3", now)
	if err != nil || a.ID == b.ID {
		t.Fatalf("second hold %+v %v (first %s)", b, err, a.ID)
	}
	var we *weft.Error
	if _, err := ReleaseHold(ctx, s.JS, "", "old", "", Person{By: "legal B"}, "done", now); !errors.As(err, &we) || we.Code != weft.CodeInvalidRequest {
		t.Fatalf("a release naming no hold of two: %v, want invalid_request", err)
	}
	if _, err := ReleaseHold(ctx, s.JS, "", "old", b.ID, Person{By: "legal B"}, "S-3 answered", now); err != nil {
		t.Fatal(err)
	}
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || len(res.Purged) != 0 || len(res.Kept) != 1 || !strings.Contains(res.Kept[0].Why, "dispute D-17") {
		t.Fatalf("with hold %s active: %+v %v", a.ID, res, err)
	}
	if _, err := ReleaseHold(ctx, s.JS, "", "old", "", Person{By: "legal A"}, "D-17 settled", now); err != nil {
		t.Fatal(err)
	}
	res, err = Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || !slices.Equal(res.Purged, []string{"old"}) {
		t.Fatalf("with both released: %+v %v", res, err)
	}
}

// TestRetentionHoldAndReleaseAreIdempotentByTheirCommandID
// (docs/adr/0030 §5; docs/protocol/40-commands.md, weft.api.hold): a hold
// placed again with the command id that placed it answers that hold and
// adds none, and a release again with its command id answers the
// released hold, from the holds' own key — a retry after the command's
// kept reply is gone (its TTL, a runner that died before keeping it) does
// not add a second hold that its user would not know to release.
func TestRetentionHoldAndReleaseAreIdempotentByTheirCommandID(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	a, err := Place(ctx, s.JS, "cmd-h", "old", Person{By: "legal"}, "dispute D-17", now)
	if err != nil || a.CommandID != "cmd-h" {
		t.Fatalf("the hold: %+v %v", a, err)
	}
	again, err := Place(ctx, s.JS, "cmd-h", "old", Person{By: "legal"}, "dispute D-17", now.Add(time.Hour))
	if err != nil || again.ID != a.ID || !again.At.Equal(a.At) {
		t.Fatalf("the hold placed again with its command id: %+v %v, want %s as placed", again, err, a.ID)
	}
	if hs, err := Holds(ctx, s.JS); err != nil || len(hs) != 1 {
		t.Fatalf("holds after the retry: %+v %v, want one", hs, err)
	}
	r, err := ReleaseHold(ctx, s.JS, "cmd-r", "old", a.ID, Person{By: "legal"}, "settled", now)
	if err != nil || r.Released == nil || r.Released.CommandID != "cmd-r" {
		t.Fatalf("the release: %+v %v", r, err)
	}
	r2, err := ReleaseHold(ctx, s.JS, "cmd-r", "old", a.ID, Person{By: "legal"}, "settled", now.Add(time.Hour))
	if err != nil || r2.ID != a.ID || r2.Released == nil || !r2.Released.At.Equal(r.Released.At) {
		t.Fatalf("the release again with its command id: %+v %v, want %s as released", r2, err, a.ID)
	}
	// Another command id is another hold, and releasing a released hold
	// under a new command id is refused.
	if b, err := Place(ctx, s.JS, "cmd-h2", "old", Person{By: "legal"}, "subpoena S-3", now); err != nil || b.ID == a.ID {
		t.Fatalf("a hold with another command id: %+v %v, want a new hold", b, err)
	}
	var we *weft.Error
	if _, err := ReleaseHold(ctx, s.JS, "cmd-r2", "old", a.ID, Person{By: "legal"}, "settled", now); !errors.As(err, &we) || we.Code != weft.CodeUnknownRun {
		t.Fatalf("a release of the released hold by another command: %v, want unknown_run", err)
	}
}

// TestRetentionInterruptedPurgeRefusesAHoldAndTheNextCompletes: a hold on
// a run whose removal stopped half way is refused conflict and not
// recorded, and the next apply completes the removal.
func TestRetentionInterruptedPurgeRefusesAHoldAndTheNextCompletes(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	crash := errors.New("crash")
	if _, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, afterStep: func(run, step string) error {
		if step == stepReadModels {
			return crash
		}
		return nil
	}}); !errors.Is(err, crash) {
		t.Fatal(err)
	}
	var we *weft.Error
	if _, err := Place(ctx, s.JS, "", "old", Person{By: "legal"}, "late", now); !errors.As(err, &we) || we.Code != weft.CodeConflict {
		t.Fatalf("a hold on the half-removed run: %v, want conflict", err)
	}
	if hs := activeHolds(t, s, "old"); len(hs) != 0 {
		t.Fatalf("the refused hold was recorded: %+v", hs)
	}
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || !slices.Equal(res.Completed, []string{"old"}) {
		t.Fatalf("the next apply: %+v %v", res, err)
	}
}

// TestRetentionInterruptedPurgeOfAHeldRunStops: a removal marked by an
// earlier release (its marker has no state, and no hold check took the
// run) of a run held since stops and says so — a dry run too lists it
// kept, not as completed.
func TestRetentionInterruptedPurgeOfAHeldRunStops(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	if _, err := Place(ctx, s.JS, "", "old", Person{By: "legal"}, "dispute D-17", now); err != nil {
		t.Fatal(err)
	}
	// A hold provisions weft_holds only; an Apply provisions weft_purges.
	_, kv, err := buckets(ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "old", []byte(`{"started":"2026-11-06T10:00:00Z","cutoff":"2026-11-04T10:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, DryRun: dry})
		if err != nil || len(res.Completed) != 0 || len(res.Kept) != 1 || !strings.Contains(res.Kept[0].Why, "interrupted") || !strings.Contains(res.Kept[0].Why, "dispute D-17") {
			t.Fatalf("dry run %v: %+v %v", dry, res, err)
		}
	}
	if h, _ := s.Log.Head(ctx, "old"); h.IsZero() {
		t.Fatal("the held run's events went")
	}
}

// TestRetentionHoldCheckWithoutAMarkIsUndoneByTheNextApply: an apply that
// stopped between a run's hold check and its marker leaves the run taken;
// the next apply gives it back (it is decided again), so holds may be
// placed on it.
func TestRetentionHoldCheckWithoutAMarkIsUndoneByTheNextApply(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "new", t0.Add(4*24*time.Hour), finished("new")...)
	waitViews(t, s, "new")
	holds, _, err := buckets(ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := takeForPurge(ctx, holds, "new", now); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := Place(ctx, s.JS, "", "new", Person{By: "legal"}, "dispute D-17", now); err != nil {
		t.Fatalf("a hold after the next apply: %v", err)
	}
}

// TestSemantics6_PurgedRunLeavesATombstoneAndNoQueuedTask: a purge
// leaves the run id's tombstone (CheckNotPurged refuses it; an id never
// purged passes), the next apply does not take the tombstone for a
// removal to complete, and the run's tasks still queued in WEFT_TASKS (a
// run cancelled while its workers were down) are deleted, so no worker
// requeues them for ever or runs them under a reused id; another run's
// task stays.
func TestSemantics6_PurgedRunLeavesATombstoneAndNoQueuedTask(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	task := func(run string) uint64 {
		b, _ := json.Marshal(api.Task{Schema: 1, Run: run, Action: "1/call_1", Agent: "desk", Version: "1", Tool: "pay", Attempt: 1, Incarnation: 1})
		ack, err := s.JS.Publish(ctx, "weft.task.desk.1.pay", b)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	appendAt(t, s, "old", t0, finished("old")...)
	appendAt(t, s, "new", t0.Add(4*24*time.Hour), finished("new")...)
	waitViews(t, s, "old", "new")
	oldTask, newTask := task("old"), task("new")
	task("old")
	if err := CheckNotPurged(ctx, s.JS, "old"); err != nil {
		t.Fatalf("before the purge: %v", err)
	}
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || !slices.Equal(res.Purged, []string{"old"}) {
		t.Fatalf("apply: %+v %v", res, err)
	}
	var we *weft.Error
	if err := CheckNotPurged(ctx, s.JS, "old"); !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || !strings.Contains(we.Message, "was purged at") {
		t.Fatalf("after the purge: %v", err)
	}
	if err := CheckNotPurged(ctx, s.JS, "never"); err != nil {
		t.Fatalf("an id never purged: %v", err)
	}
	st, err := s.JS.Stream(ctx, protocol.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetMsg(ctx, oldTask); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the purged run's task: %v, want it deleted", err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("tasks left: %+v %v, want only new's", info, err)
	}
	if _, err := st.GetMsg(ctx, newTask); err != nil {
		t.Fatalf("the kept run's task: %v", err)
	}
	again, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil || len(again.Completed) != 0 || len(again.Purged) != 0 {
		t.Fatalf("the next apply took the tombstone for a removal: %+v %v", again, err)
	}
}

// TestRetentionOneApplyAtATime: an apply that starts while another runs
// (a cron that overlaps itself) is refused conflict and removes nothing;
// a lock left by an apply that died is taken over once its lease ran out.
func TestRetentionOneApplyAtATime(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	appendAt(t, s, "old2", t0, finished("old2")...)
	waitViews(t, s, "old", "old2")
	var second error
	var secondRes Result
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now, afterStep: func(run, step string) error {
		if step == stepMarked && run == "old" {
			secondRes, second = Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
		}
		return nil
	}})
	if err != nil || !slices.Equal(res.Purged, []string{"old", "old2"}) {
		t.Fatalf("the first apply: %+v %v", res, err)
	}
	var we *weft.Error
	if !errors.As(second, &we) || we.Code != weft.CodeConflict || len(secondRes.Purged)+len(secondRes.Completed) != 0 {
		t.Fatalf("the overlapping apply: %+v %v, want conflict", secondRes, second)
	}
	// A dead apply's lock, its lease run out.
	kv, err := s.JS.KeyValue(ctx, protocol.PurgesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, lockKey, []byte(`{"by":"gone","until":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now}); err != nil {
		t.Fatalf("after a dead apply's lock ran out: %v", err)
	}
}

// TestSemantics6_APurgedIdIsRefusedWhenTheDirectGetIsNotAnswered
// (docs/semantics.md §6, docs/adr/0030-retention-and-legal-hold.md §6): a
// direct get of the tombstone that nobody answers (here the bucket's
// direct gets are off, as while its replicas do not answer) is not taken
// for "no weft_purges": the tombstone is read through the JetStream API,
// and the purged id is still refused already_started; an id never purged
// passes, as does any id once the bucket does not exist (JetStream says
// "stream not found"); and a JetStream that does not answer at all is
// unavailable, never "not purged".
func TestSemantics6_APurgedIdIsRefusedWhenTheDirectGetIsNotAnswered(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "old", t0, finished("old")...)
	waitViews(t, s, "old")
	if res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now}); err != nil || !slices.Equal(res.Purged, []string{"old"}) {
		t.Fatalf("apply: %+v %v", res, err)
	}
	st, err := s.JS.Stream(ctx, "KV_"+PurgesBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := s.JS.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var we *weft.Error
	if err := CheckNotPurged(ctx, s.JS, "old"); !errors.As(err, &we) || we.Code != weft.CodeAlreadyStarted || !strings.Contains(we.Message, "was purged at") {
		t.Fatalf("the purged id with its direct get not answered: %v, want already_started", err)
	}
	if err := CheckNotPurged(ctx, s.JS, "never"); err != nil {
		t.Fatalf("an id never purged: %v", err)
	}
	if err := s.JS.DeleteStream(ctx, "KV_"+PurgesBucket); err != nil {
		t.Fatal(err)
	}
	if err := CheckNotPurged(ctx, s.JS, "old"); err != nil {
		t.Fatalf("without weft_purges: %v", err)
	}

	// A server without JetStream: nobody answers its API.
	plain, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go plain.Start()
	t.Cleanup(plain.Shutdown)
	if !plain.ReadyForConnections(10 * time.Second) {
		t.Fatal("the plain server did not start")
	}
	nc, err := nats.Connect(plain.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckNotPurged(ctx, js, "old"); !errors.As(err, &we) || we.Code != weft.CodeUnavailable {
		t.Fatalf("a JetStream that does not answer: %v, want unavailable", err)
	}
}

// TestRetentionFamilyMarkedInPartIsCompletedWhole (docs/adr/0030 §2, §3):
// an apply that died while it marked a family (its hold check took both
// runs, it marked the parent and not the fork) leaves a removal the next
// apply completes for the whole family — also when that apply's cutoff is
// earlier and would keep the fork on its own: the family is never split
// (a fork kept whose parent's log is gone).
func TestRetentionFamilyMarkedInPartIsCompletedWhole(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "fa", t0, finished("fa")...)
	fork := append([]events.Event{started("fa"), events.RunForked{From: events.ForkedFrom{Run: "fa", Version: 4, Turn: 1}}}, finished("fa")[1:]...)
	appendAt(t, s, "fb", t0.Add(60*time.Hour), fork...)
	waitViews(t, s, "fa", "fb")
	before := viewOf(t, s, "fa")
	// What the apply that died left: both runs taken by its hold check,
	// fa marked, fb not yet.
	holds, purges, err := buckets(ctx, s.JS)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"fa", "fb"} {
		if _, err := takeForPurge(ctx, holds, run, now); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := json.Marshal(marker{Started: now, Cutoff: t0.Add(3 * 24 * time.Hour), State: statePurging})
	if _, err := purges.Put(ctx, "fa", m); err != nil {
		t.Fatal(err)
	}
	// The next apply's cutoff, t0 + 2 days, is before fb's last event.
	res, err := Apply(ctx, s.JS, Options{Until: t0.Add(48 * time.Hour), Now: now})
	if err != nil || !slices.Equal(res.Completed, []string{"fa", "fb"}) || len(res.Purged) != 0 {
		t.Fatalf("the next apply: %+v %v, want fa and fb completed", res, err)
	}
	assertGone(t, s, "fa", before)
	if h, _ := s.Log.Head(ctx, "fb"); !h.IsZero() {
		t.Fatal("fb's events are still there: the family was split")
	}
	e, err := purges.Get(ctx, "fb")
	if err != nil {
		t.Fatal(err)
	}
	var mk marker
	if err := json.Unmarshal(e.Value(), &mk); err != nil || mk.State != statePurged {
		t.Fatalf("fb's tombstone: %s %v", e.Value(), err)
	}
}

// TestRetentionInterruptedPurgeCompletesOnlyTheRunsItChose (docs/adr/0030
// §2, §3): the next apply completes only the runs the stopped apply chose
// (its markers' family). A fork of a marked run started after the mark
// (a restart while the parent was not yet purged) is live: it is kept,
// with its reason, and its log stays; the marked parent is completed.
func TestRetentionInterruptedPurgeCompletesOnlyTheRunsItChose(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	appendAt(t, s, "pa", t0, finished("pa")...)
	waitViews(t, s, "pa")
	applyStoppedAfter(t, s, stepMarked)
	live := []events.Event{started("pa"), events.RunForked{From: events.ForkedFrom{Run: "pa", Version: 4, Turn: 1}}, events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart}}
	appendAt(t, s, "pc", now.Add(-time.Second), live...)
	waitViews(t, s, "pc")
	res, err := Apply(ctx, s.JS, Options{OlderThan: age, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Completed, []string{"pa"}) || len(res.Purged) != 0 {
		t.Fatalf("the next apply: %+v, want pa completed and nothing else removed", res)
	}
	if i := slices.IndexFunc(res.Kept, func(k Kept) bool { return k.Run == "pc" }); i < 0 || !strings.Contains(res.Kept[i].Why, "unfinished") {
		t.Fatalf("pc is not kept as unfinished: %+v", res.Kept)
	}
	if h, _ := s.Log.Head(ctx, "pc"); h.Version != 3 {
		t.Fatalf("the live fork pc's log: head %+v, want version 3", h)
	}
}

// TestRetentionHoldsOfListsARunsHoldsInOrder (docs/security.md,
// "Retention and legal hold"): HoldsOf answers none without the bucket or
// the run's key, a run's holds in the order placed with a released one
// still listed, and a value written before a run could hold several (one
// Hold) as that hold, h1; HoldOf answers the first active one.
func TestRetentionHoldsOfListsARunsHoldsInOrder(t *testing.T) {
	s := deployment(t)
	ctx := context.Background()
	if hs, err := HoldsOf(ctx, s.JS, "old"); err != nil || hs != nil {
		t.Fatalf("without the bucket: %+v %v, want none", hs, err)
	}
	appendAt(t, s, "old", t0, finished("old")...)
	a, err := Place(ctx, s.JS, "", "old", Person{By: "legal A"}, "dispute D-17", now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Place(ctx, s.JS, "", "old", Person{By: "legal B"}, "subpoena S-3", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReleaseHold(ctx, s.JS, "", "old", a.ID, Person{By: "legal A"}, "D-17 settled", now); err != nil {
		t.Fatal(err)
	}
	hs, err := HoldsOf(ctx, s.JS, "old")
	if err != nil || len(hs) != 2 || hs[0].ID != a.ID || hs[0].Active() || hs[0].Released.By != "legal A" || hs[1].ID != b.ID || !hs[1].Active() {
		t.Fatalf("two holds, the first released: %+v %v", hs, err)
	}
	if h, err := HoldOf(ctx, s.JS, "old"); err != nil || h.ID != b.ID {
		t.Fatalf("HoldOf: %+v %v, want the active %s", h, err, b.ID)
	}
	if hs, err := HoldsOf(ctx, s.JS, "other"); err != nil || len(hs) != 0 {
		t.Fatalf("a run without a key: %+v %v, want none", hs, err)
	}
	kv, err := s.JS.KeyValue(ctx, HoldsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "legacy", []byte(`{"run":"legacy","by":"legal C","reason":"audit","at":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	hs, err = HoldsOf(ctx, s.JS, "legacy")
	if err != nil || len(hs) != 1 || hs[0].ID != "h1" || hs[0].By != "legal C" || !hs[0].Active() {
		t.Fatalf("the single-hold value: %+v %v, want h1 by legal C, active", hs, err)
	}
	if h, err := HoldOf(ctx, s.JS, "legacy"); err != nil || h.ID != "h1" {
		t.Fatalf("HoldOf of the single-hold value: %+v %v", h, err)
	}
}
