package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/provision"
	"github.com/weftrun/weft/retention"
)

// answered is a run that answered at once and finished.
func answered(input string) []events.Event {
	return []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: input, Runner: "r1", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		events.ModelRequested{Turn: 1, Incarnation: 1, Why: events.TurnStart},
		events.ModelReplied{Turn: 1, Kind: events.ReplyFinalAnswer, Text: "done", Usage: &events.Usage{InputTokens: 10, OutputTokens: 2}},
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"done"`)}},
	}
}

// projected starts a server with the projector running and sets NATS_URL.
func projected(t *testing.T) *natstest.Server {
	t.Helper()
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	t.Setenv("NATS_URL", s.URL)
	return s
}

// waitProjected waits until the projector's checkpoint covers every run's
// log head (its view and index entries are stored).
func waitProjected(t *testing.T, s *natstest.Server, runs ...string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for _, run := range runs {
		h, err := s.Log.Head(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		for {
			cp, err := projector.ReadCheckpoint(ctx, s.JS)
			if err != nil {
				t.Fatal(err)
			}
			if cp.Seq >= h.Seq {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the projector never reached %s's head", run)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestRetentionAndHoldCLI (docs/cli.md, docs/security.md "Retention and
// legal hold"): `weft hold` places a hold that show and `hold list` print;
// `weft retention apply --older-than 48h --dry-run` names what would go and
// removes nothing; apply removes the old finished run (show then says
// unknown_run) and keeps the newer, the unfinished and the held one, which
// still verify; after `hold --release` the next apply removes the held run.
func TestRetentionAndHoldCLI(t *testing.T) {
	s := projected(t)
	serveCommands(t, s)
	// The age counts back from the machine's clock: the old runs' events
	// are three days old, the new one's a minute.
	old := time.Now().Add(-72 * time.Hour).Truncate(time.Second)
	appendRunAt(t, s.Log, "ret-old", old, answered("old")...)
	appendRunAt(t, s.Log, "ret-held", old, answered("held")...)
	appendRunAt(t, s.Log, "ret-live", old, answered("live")[:2]...)
	appendRunAt(t, s.Log, "ret-new", time.Now().Add(-time.Minute), answered("new")...)
	waitProjected(t, s, "ret-old", "ret-held", "ret-live", "ret-new")

	if code, _, errs := cli(t, "hold", "ret-held", "--by", "legal: r.ortiz"); code != exitUsage {
		t.Fatalf("hold without a reason: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "hold", "nope", "--by", "legal", "--reason", "x"); code != exitFailed || !strings.Contains(errs, "unknown_run") {
		t.Fatalf("hold of an unknown run: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "hold", "ret-held", "--by", "legal: r.ortiz", "--reason", "dispute D-17"); code != 0 || !strings.Contains(out, "held ret-held (hold h1) by legal: r.ortiz (unverified): dispute D-17") {
		t.Fatalf("hold: %d %s %s", code, out, errs)
	}
	_, out, _ := cli(t, "hold", "list")
	contains(t, "hold list", out, "RUN", "ret-held", "legal: r.ortiz", "dispute D-17")
	_, out, _ = cli(t, "show", "ret-held")
	contains(t, "show of the held run", out, "hold       by legal: r.ortiz (unverified) since", "dispute D-17")

	code, out, errs := cli(t, "retention", "apply", "--older-than", "48h", "--dry-run")
	if code != 0 {
		t.Fatalf("dry run: %d %s", code, errs)
	}
	contains(t, "dry run", out, "would remove ret-old\n", "kept ret-held: legal hold by legal: r.ortiz", "kept ret-live: unfinished", "kept ret-new: its last event")
	if code, _, errs := cli(t, "audit", "verify", "ret-old"); code != 0 {
		t.Fatalf("the dry run removed ret-old: %d %s", code, errs)
	}
	if code, _, _ := cli(t, "retention", "apply"); code != exitUsage {
		t.Fatalf("apply without an age: %d", code)
	}

	code, out, errs = cli(t, "retention", "apply", "--older-than", "48h")
	if code != 0 {
		t.Fatalf("apply: %d %s", code, errs)
	}
	contains(t, "apply", out, "removed ret-old\n", "removed 1 run(s)")
	contains(t, "apply's progress", errs, "cutoff ", "(now minus 48h0m0s)", "removed 1/1: ret-old")
	if code, _, errs := cli(t, "show", "ret-old"); code != exitFailed || !strings.Contains(errs, "unknown_run") {
		t.Fatalf("show of the removed run: %d %s", code, errs)
	}
	if code, _, errs := cli(t, "audit", "export", "ret-old"); code != exitFailed || !strings.Contains(errs, "unknown_run") {
		t.Fatalf("export of the removed run: %d %s", code, errs)
	}
	for _, run := range []string{"ret-held", "ret-new", "ret-live"} {
		if code, out, errs := cli(t, "audit", "verify", run); code != 0 || !strings.Contains(out, "ok: run "+run) {
			t.Fatalf("verify %s after the purge: %d %s %s", run, code, out, errs)
		}
	}

	if code, out, errs := cli(t, "hold", "--release", "ret-held", "--by", "legal: r.ortiz", "--reason", "D-17 settled"); code != 0 || !strings.Contains(out, "released hold h1 on ret-held") {
		t.Fatalf("release: %d %s %s", code, out, errs)
	}
	_, out, _ = cli(t, "hold", "list", "--all")
	contains(t, "hold list --all", out, "ret-held", "by legal: r.ortiz (unverified) at", "D-17 settled")
	if _, out, _ = cli(t, "retention", "apply", "--older-than", "48h", "--json"); !strings.Contains(out, `"purged": [
    "ret-held"
  ]`) {
		t.Fatalf("apply after the release:\n%s", out)
	}
}

// TestRetentionApplyUntilRemovesWhatTheExportKept (docs/cli.md,
// retention apply --until): with the export's --until as the purge's
// cutoff, the runs removed are exactly the runs exported.
func TestRetentionApplyUntilRemovesWhatTheExportKept(t *testing.T) {
	s := projected(t)
	now := time.Now().Truncate(time.Second)
	appendRunAt(t, s.Log, "cut-a", now.Add(-72*time.Hour), answered("a")...)
	appendRunAt(t, s.Log, "cut-b", now.Add(-50*time.Hour), answered("b")...)
	appendRunAt(t, s.Log, "cut-c", now.Add(-30*time.Hour), answered("c")...)
	waitProjected(t, s, "cut-a", "cut-b", "cut-c")
	until := now.Add(-48 * time.Hour).UTC().Format(time.RFC3339)
	file := filepath.Join(t.TempDir(), "range.jsonl")
	if code, _, errs := cli(t, "audit", "export", "--since", "2000-01-01", "--until", until, "-o", file); code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var l struct{ Run string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Run != "" {
			exported[l.Run] = true
		}
	}
	if code, _, _ := cli(t, "retention", "apply", "--until", until, "--older-than", "1h"); code != exitUsage {
		t.Fatalf("--until with --older-than: %d, want usage", code)
	}
	code, out, errs := cli(t, "retention", "apply", "--until", until, "--json")
	if code != 0 {
		t.Fatalf("apply --until: %d %s", code, errs)
	}
	var res struct{ Purged []string }
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	removed := map[string]bool{}
	for _, r := range res.Purged {
		removed[r] = true
	}
	if len(removed) != 2 || !removed["cut-a"] || !removed["cut-b"] || len(exported) != len(removed) || !exported["cut-a"] || !exported["cut-b"] {
		t.Fatalf("exported %v, removed %v: want both cut-a and cut-b", exported, removed)
	}
}

// TestShowSaysTheHoldIsUnknownWhenItCannotBeRead (docs/cli.md, hold):
// a hold that cannot be read is shown as unknown, never as none.
func TestShowSaysTheHoldIsUnknownWhenItCannotBeRead(t *testing.T) {
	s := projected(t)
	appendRunAt(t, s.Log, "hold-bad", time.Now().Add(-time.Hour), answered("x")...)
	waitProjected(t, s, "hold-bad")
	ctx := context.Background()
	if err := provision.EnsureOnly(ctx, s.JS, retention.Assets()); err != nil {
		t.Fatal(err)
	}
	kv, err := s.JS.KeyValue(ctx, retention.HoldsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "hold-bad", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "show", "hold-bad")
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	contains(t, "show", out, "hold       unknown (cannot read weft_holds: ")
	_, out, _ = cli(t, "show", "hold-bad", "--json")
	contains(t, "show --json", out, `"hold_unknown": "`)
}

// TestAuditExportRangeVerifiesRunByRun (docs/cli.md, audit export of a
// range; exit 4): an export of [since, until) holds the three runs whose
// last event is in it — not the one after — one after another, a repaired
// run's void record with it (as in the export of that run alone, which
// omitted it before); verify --file checks each run and says so;
// one byte edited in the second run fails that run (exit 4, naming it and
// its event) while the others still verify.
func TestAuditExportRangeVerifiesRunByRun(t *testing.T) {
	s := projected(t)
	ctx := context.Background()
	appendRunAt(t, s.Log, "rg-1", t0, answered("first")...)
	appendRunAt(t, s.Log, "rg-2", t0.Add(time.Hour), answered("second")...)
	appendRunAt(t, s.Log, "rg-3", t0.Add(2*time.Hour), answered("third")[:2]...)
	appendRunAt(t, s.Log, "rg-late", t0.Add(48*time.Hour), answered("late")...)
	// rg-3 is repaired: a message no reader can fold, voided.
	ack, err := s.JS.Publish(ctx, "weft.ev.rg-3.events", []byte("<html>oops</html>"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log.Void(ctx, "rg-3", ack.Sequence, "pasted into the wrong terminal", "alice", t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, s, "rg-1", "rg-2", "rg-3", "rg-late")

	path := filepath.Join(t.TempDir(), "range.jsonl")
	if code, _, _ := cli(t, "audit", "export", "--since", "2026-11-30", "-o", path); code != exitUsage {
		t.Fatalf("a range without --until: %d", code)
	}
	code, _, errs := cli(t, "audit", "export", "--since", "2026-11-30", "--until", "2026-12-01T00:00:00Z", "-o", path)
	if code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	contains(t, "export's progress", errs, "exported 3/3: rg-3, 2 events and 1 void record(s)", "exported 3 runs")
	b, _ := os.ReadFile(path)
	if bytes.Contains(b, []byte("rg-late")) || !bytes.Contains(b, []byte(`{"run":"rg-3","void":`)) {
		t.Fatalf("the export:\n%s", b)
	}
	code, out, errs := cli(t, "audit", "verify", "--file", path)
	if code != 0 {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	contains(t, "verify", out, "== run rg-1 (4 events)", "ok: run rg-1, 4 events", "ok: run rg-2, 4 events", "ok: run rg-3, 2 events", "3 of 3 runs verified")
	contains(t, "verify's repair note", errs, "voided by alice (unverified)", "pasted into the wrong terminal")

	// The export of the one run carries its void record too, and verify
	// --file checks it.
	one := filepath.Join(t.TempDir(), "rg-3.jsonl")
	if code, _, errs := cli(t, "audit", "export", "rg-3", "-o", one); code != 0 || !strings.Contains(errs, "exported 2 events of rg-3 to "+one+" and 1 void record(s)") {
		t.Fatalf("export of rg-3: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", one); code != 0 || !strings.Contains(out, "ok: run rg-3, 2 events") || !strings.Contains(errs, "voided by alice (unverified)") {
		t.Fatalf("verify of rg-3's export: %d %s %s", code, out, errs)
	}

	i := bytes.Index(b, []byte(`"input":"second"`))
	b[i+len(`"input":"s`)] = 'S'
	os.WriteFile(path, b, 0o644)
	code, out, errs = cli(t, "audit", "verify", "--file", path)
	if code != exitAudit {
		t.Fatalf("edited: exit %d, want %d: %s %s", code, exitAudit, out, errs)
	}
	contains(t, "verify of the edited file", out, "ok: run rg-1", "FAILED: run rg-2: chain: event 1 (", "ok: run rg-3", "2 of 3 runs verified")
	contains(t, "verify's error", errs, "1 of 3 runs do not verify (rg-2); the first, run rg-2: chain")
}

// restricted starts a server whose users are admin (everything; the
// test's own connection and the projector) and the users of denied, each
// allowed everything but publishing to its subjects; the projector runs
// and NATS_URL is set.
func restricted(t *testing.T, denied map[string][]string) *natstest.Server {
	t.Helper()
	users := "{ user: admin, password: a }\n"
	for u, subjects := range denied {
		// Quoted as the server's config reads them (no \u escapes of
		// JSON: a subject may hold '>').
		q := `["` + strings.Join(subjects, `", "`) + `"]`
		users += fmt.Sprintf("{ user: %s, password: p, permissions: { publish: { allow: [\">\"], deny: %s }, subscribe: [\">\"] } }\n", u, q)
	}
	conf := filepath.Join(t.TempDir(), "users.conf")
	if err := os.WriteFile(conf, []byte("jetstream: enabled\nauthorization { users = [\n"+users+"] }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := natstest.Start(t, natstest.WithAssets(projector.Assets()...), natstest.WithNodeOptions(natsnode.WithConfigFile(conf), natsnode.WithUserPassword("admin", "a")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- projector.RunAll(ctx, s.Conn, s.JS, s.Log, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("NATS_PASSWORD", "p")
	return s
}

// TestRetentionExitCodesOfARefusalAndAPartialPurge (docs/cli.md, exit
// codes 7 and 8): a KV or stream call the server refuses these
// credentials is "not allowed", exit 7 (it was unavailable, exit 3: the
// refused request is never answered); a purge that removed a run and then
// failed on the next (its queued task may not be deleted) is partial,
// exit 8, naming the run removed and why it stopped, and the next apply
// with credentials that may completes the run it stopped in.
func TestRetentionExitCodesOfARefusalAndAPartialPurge(t *testing.T) {
	s := restricted(t, map[string][]string{
		"noviews": {"$JS.API.STREAM.INFO.KV_weft_views"},
		"notasks": {"$JS.API.STREAM.MSG.DELETE.WEFT_TASKS"},
	})
	ctx := context.Background()
	old := time.Now().Add(-72 * time.Hour).Truncate(time.Second)
	appendRunAt(t, s.Log, "perm-a", old, answered("a")...)
	appendRunAt(t, s.Log, "perm-b", old, answered("b")...)
	waitProjected(t, s, "perm-a", "perm-b")
	b, _ := json.Marshal(api.Task{Schema: 1, Run: "perm-b", Action: "1/call_1", Agent: "payment-desk", Version: "1", Tool: "send_payment", Attempt: 1, Incarnation: 1})
	if _, err := s.JS.Publish(ctx, "weft.task.payment-desk.1.send_payment", b); err != nil {
		t.Fatal(err)
	}

	t.Setenv("NATS_USER", "noviews")
	code, out, errs := cli(t, "retention", "apply", "--older-than", "48h")
	if code != exitDenied || !strings.Contains(errs, "permission_denied: not allowed") || !strings.Contains(errs, "$JS.API.STREAM.INFO.KV_weft_views") {
		t.Fatalf("apply without permission to read the views: exit %d, want %d (not allowed)\n%s%s", code, exitDenied, out, errs)
	}

	t.Setenv("NATS_USER", "notasks")
	code, out, errs = cli(t, "retention", "apply", "--older-than", "48h")
	if code != exitPartial {
		t.Fatalf("a purge that stopped half way: exit %d, want %d\n%s%s", code, exitPartial, out, errs)
	}
	contains(t, "the partial purge", out+errs, "removed perm-a\n", "partial: retention removed 1 run(s) (perm-a) and stopped", "not allowed", "$JS.API.STREAM.MSG.DELETE.WEFT_TASKS", "remove perm-b (runtime)")

	t.Setenv("NATS_USER", "admin")
	t.Setenv("NATS_PASSWORD", "a")
	code, out, errs = cli(t, "retention", "apply", "--older-than", "48h")
	if code != 0 || !strings.Contains(out, "removed perm-b (completing an interrupted purge)") {
		t.Fatalf("the next apply: exit %d\n%s%s", code, out, errs)
	}
}

// TestRetentionAnApplyStoppedInItsFirstFamilyIsPartial (docs/cli.md,
// exit 8): an apply that marked a family and purged its read models, then
// failed (its queued task may not be deleted), removed no run whole, yet
// changed the store (the run's marker is written, its view gone): partial,
// exit 8, naming the run it stopped in — never "nothing applied".
func TestRetentionAnApplyStoppedInItsFirstFamilyIsPartial(t *testing.T) {
	s := restricted(t, map[string][]string{"notasks": {"$JS.API.STREAM.MSG.DELETE.WEFT_TASKS"}})
	ctx := context.Background()
	appendRunAt(t, s.Log, "perm-b", time.Now().Add(-72*time.Hour).Truncate(time.Second), answered("b")...)
	waitProjected(t, s, "perm-b")
	b, _ := json.Marshal(api.Task{Schema: 1, Run: "perm-b", Action: "1/call_1", Agent: "payment-desk", Version: "1", Tool: "send_payment", Attempt: 1, Incarnation: 1})
	if _, err := s.JS.Publish(ctx, "weft.task.payment-desk.1.send_payment", b); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_USER", "notasks")
	code, out, errs := cli(t, "retention", "apply", "--older-than", "48h")
	if code != exitPartial {
		t.Fatalf("an apply that stopped in its first family: exit %d, want %d\n%s%s", code, exitPartial, out, errs)
	}
	contains(t, "the partial purge", out+errs, "stopped in perm-b", "remove perm-b (runtime)")
}

// rangeRuns appends three finished runs whose last events are in
// [2026-11-30, 2026-12-01) (t0 on), the second repaired (a void record
// follows its events in an export), and waits for the projector.
func rangeRuns(t *testing.T, s *natstest.Server) {
	t.Helper()
	appendRunAt(t, s.Log, "mf-1", t0, answered("first")...)
	appendRunAt(t, s.Log, "mf-2", t0.Add(time.Hour), answered("second")...)
	appendRunAt(t, s.Log, "mf-3", t0.Add(2*time.Hour), answered("third")...)
	ack, err := s.JS.Publish(context.Background(), "weft.ev.mf-2.events", []byte("<html>oops</html>"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log.Void(context.Background(), "mf-2", ack.Sequence, "pasted into the wrong terminal", "alice", t0.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitProjected(t, s, "mf-1", "mf-2", "mf-3")
}

// exportLines exports [2026-11-30, 2026-12-01) to a new file and returns
// its path and its lines.
func exportLines(t *testing.T) (string, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "range.jsonl")
	if code, _, errs := cli(t, "audit", "export", "--since", "2026-11-30", "--until", "2026-12-01", "-o", path); code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestAuditExportRangeManifest (docs/cli.md, audit export of a range and
// verify --file; exit 4): the export starts with the range asked for and
// ends with a manifest of its runs (each with its last version and head),
// and verify --file checks the file against it: the file cut short (no
// manifest), a run dropped, and a run's last event dropped all fail
// `manifest`, naming what is missing; an empty range exports a file that
// verifies (0 runs); an export stopped half way leaves no file at -o.
func TestAuditExportRangeManifest(t *testing.T) {
	s := projected(t)
	rangeRuns(t, s)
	path, lines := exportLines(t)
	if !strings.HasPrefix(lines[0], `{"range":{"schema":1,"since":"2026-11-30T00:00:00Z","until":"2026-12-01T00:00:00Z"}}`) || !strings.HasPrefix(lines[len(lines)-1], `{"manifest":{"schema":1,`) || !strings.Contains(lines[len(lines)-1], `"count":3`) {
		t.Fatalf("the export's first and last lines:\n%s%s", lines[0], lines[len(lines)-1])
	}
	code, out, errs := cli(t, "audit", "verify", "--file", path)
	if code != 0 {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	contains(t, "verify", out, "ok: run mf-2, 4 events", "the manifest lists 3 run(s)", "3 of 3 runs verified")

	write := func(name string, ls []string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(strings.Join(ls, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cut := write("cut.jsonl", lines[:len(lines)-1])
	code, out, errs = cli(t, "audit", "verify", "--file", cut)
	if code != exitAudit || !strings.Contains(errs, "manifest: the export is cut short: its manifest") || !strings.Contains(errs, "the last, run mf-3, up to version 4") {
		t.Fatalf("verify of the file without its manifest: exit %d, want %d\n%s%s", code, exitAudit, out, errs)
	}
	var noTwo, shortTwo []string
	for _, l := range lines {
		mf2 := strings.HasPrefix(l, `{"id"`) && strings.Contains(l, `"run":"mf-2"`)
		if !mf2 && !strings.HasPrefix(l, `{"run":"mf-2"`) {
			noTwo = append(noTwo, l)
		}
		if !(mf2 && strings.Contains(l, `"version":4`)) {
			shortTwo = append(shortTwo, l)
		}
	}
	code, out, errs = cli(t, "audit", "verify", "--file", write("no2.jsonl", noTwo))
	if code != exitAudit || !strings.Contains(errs, "manifest: the file does not hold what its manifest lists (3 runs): missing from the file: mf-2 (4 events)") {
		t.Fatalf("verify of the file without mf-2: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = cli(t, "audit", "verify", "--file", write("short2.jsonl", shortTwo))
	if code != exitAudit || !strings.Contains(errs, "not as listed: mf-2 (3 events and 1 void record(s) in the file, listed 4 and 1") {
		t.Fatalf("verify of the file with mf-2 cut: exit %d\n%s%s", code, out, errs)
	}

	empty := filepath.Join(t.TempDir(), "empty.jsonl")
	if code, _, errs := cli(t, "audit", "export", "--since", "2020-01-01", "--until", "2020-02-01", "-o", empty); code != 0 || !strings.Contains(errs, "exported 0 runs") {
		t.Fatalf("export of an empty range: %d %s", code, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", empty); code != 0 || !strings.Contains(out, "the manifest lists 0 run(s)") || !strings.Contains(out, "0 of 0 runs verified") {
		t.Fatalf("verify of an empty range's export: %d %s %s", code, out, errs)
	}

	// An export stopped on its second run leaves nothing at -o (it wrote
	// a temp file beside it, removed).
	crash := errors.New("crash")
	exportRead = func(run, step string) error {
		if run == "mf-2" {
			return crash
		}
		return nil
	}
	t.Cleanup(func() { exportRead = nil })
	dir := t.TempDir()
	stopped := filepath.Join(dir, "stopped.jsonl")
	if code, _, errs := cli(t, "audit", "export", "--since", "2026-11-30", "--until", "2026-12-01", "-o", stopped); code == 0 {
		t.Fatalf("the stopped export: exit 0 %s", errs)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("the stopped export left %v", left)
	}
}

// TestAuditVerifyManifestDigestCatchesAnEditedRangeFile (docs/security.md,
// what an auditor keeps): the range line and manifest alone catch a file
// cut short, not an edit — a run dropped with both lines, or with the
// manifest's entry and count, verifies without a digest (verify says the
// file's completeness is not checked). The export prints the manifest's
// digest on stderr; `verify --file --manifest-digest D` fails both edits
// (manifest), and passes the file as exported. With --json the manifest
// problem is in the JSON.
func TestAuditVerifyManifestDigestCatchesAnEditedRangeFile(t *testing.T) {
	s := projected(t)
	rangeRuns(t, s)
	path := filepath.Join(t.TempDir(), "range.jsonl")
	code, _, errs := cli(t, "audit", "export", "--since", "2026-11-30", "--until", "2026-12-01", "-o", path)
	if code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	i := strings.Index(errs, "manifest digest sha256:")
	if i < 0 {
		t.Fatalf("the export prints no manifest digest:\n%s", errs)
	}
	digest := strings.Fields(errs[i+len("manifest digest "):])[0]
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
	write := func(name string, ls []string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(strings.Join(ls, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var bare, relisted []string // mf-2 dropped: with both lines; with its manifest entry
	for i, l := range lines {
		if strings.Contains(l, `"run":"mf-2"`) && !strings.HasPrefix(l, `{"manifest"`) {
			continue
		}
		if i > 0 && i < len(lines)-1 {
			bare = append(bare, l)
		}
		if strings.HasPrefix(l, `{"manifest"`) {
			var m struct {
				Manifest audit.Manifest `json:"manifest"`
			}
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			m.Manifest.Runs = slices.DeleteFunc(m.Manifest.Runs, func(r audit.ManifestRun) bool { return r.Run == "mf-2" })
			m.Manifest.Count = len(m.Manifest.Runs)
			nb, _ := json.Marshal(m)
			l = string(nb) + "\n"
		}
		relisted = append(relisted, l)
	}
	code, out, errs := cli(t, "audit", "verify", "--file", write("bare.jsonl", bare))
	if code != 0 || !strings.Contains(out, "no range line: whether the file is complete is not checked") {
		t.Fatalf("verify of the edited file without a digest: exit %d\n%s%s", code, out, errs)
	}
	for name, ls := range map[string][]string{"bare.jsonl": bare, "relisted.jsonl": relisted} {
		code, out, errs := cli(t, "audit", "verify", "--file", write(name, ls), "--manifest-digest", digest)
		if code != exitAudit || !strings.Contains(errs, "manifest: ") {
			t.Fatalf("verify of %s with the digest: exit %d, want %d (manifest)\n%s%s", name, code, exitAudit, out, errs)
		}
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", path, "--manifest-digest", digest); code != 0 || !strings.Contains(out, "the manifest's digest is the one given") {
		t.Fatalf("verify of the file as exported with its digest: exit %d\n%s%s", code, out, errs)
	}
	code, out, _ = cli(t, "audit", "verify", "--file", write("cut.jsonl", lines[:len(lines)-1]), "--json")
	var rep struct {
		Reports  []audit.Report `json:"reports"`
		Manifest *audit.Problem `json:"manifest_problem"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != exitAudit || err != nil || len(rep.Reports) != 3 || rep.Manifest == nil || rep.Manifest.Kind != audit.KindManifest {
		t.Fatalf("verify --json of the cut-short file: exit %d, %v\n%s", code, err, out)
	}
}

// TestAuditExportOutputIsWrittenLikeAFile (docs/cli.md, audit export -o):
// written whole (a temp file renamed), yet -o behaves as a file written in
// place would: through a symlink (the link stays, its target gets the
// export), keeping an existing file's mode, and into a FIFO (what
// /dev/stdout may be) directly — never replacing it.
func TestAuditExportOutputIsWrittenLikeAFile(t *testing.T) {
	s := projected(t)
	rangeRuns(t, s)
	dir := t.TempDir()
	target, link := filepath.Join(dir, "target.jsonl"), filepath.Join(dir, "link.jsonl")
	if err := os.WriteFile(target, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(target, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli(t, "audit", "export", "mf-1", "-o", link); code != 0 {
		t.Fatalf("export through a symlink: %d %s", code, errs)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink at -o was replaced: %v %v", fi, err)
	}
	b, err := os.ReadFile(target)
	if fi, serr := os.Stat(target); err != nil || serr != nil || !strings.HasPrefix(string(b), `{"id"`) || fi.Mode().Perm() != 0o640 {
		t.Fatalf("the link's target: %v %v, mode %v, %.40q", err, serr, fi.Mode(), b)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- b
	}()
	if code, _, errs := cli(t, "audit", "export", "mf-1", "-o", fifo); code != 0 {
		t.Fatalf("export into a FIFO: %d %s", code, errs)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO at -o was replaced: %v %v", fi, err)
	}
	if b := <-got; !strings.HasPrefix(string(b), `{"id"`) {
		t.Fatalf("the FIFO's reader read %.40q", b)
	}
}

// TestAuditExportRangeSkipsARunPurgedWhileItReads (docs/cli.md, audit
// export of a range; exit 8): a run removed by retention while the export
// reads it (its events and void records purged after its events were
// read, before its void records) is left out whole — never its events
// without its void records — named on stderr and in the manifest, exit 8;
// the file verifies and says what it left out.
func TestAuditExportRangeSkipsARunPurgedWhileItReads(t *testing.T) {
	s := projected(t)
	rangeRuns(t, s)
	exportRead = func(run, step string) error {
		if run != "mf-2" || step != "events" {
			return nil
		}
		st, err := s.JS.Stream(context.Background(), "WEFT_EVENTS")
		if err != nil {
			return err
		}
		return st.Purge(context.Background(), jetstream.WithPurgeSubject("weft.ev.mf-2.>"))
	}
	t.Cleanup(func() { exportRead = nil })
	path := filepath.Join(t.TempDir(), "range.jsonl")
	code, out, errs := cli(t, "audit", "export", "--since", "2026-11-30", "--until", "2026-12-01", "-o", path)
	if code != exitPartial {
		t.Fatalf("export while mf-2 is purged: exit %d, want %d\n%s%s", code, exitPartial, out, errs)
	}
	contains(t, "the export", errs, "skipped 2/3: mf-2, removed (retention)", "exported 2 runs", "skipped 1 run(s) removed while the export read them (listed in the file's manifest): mf-2")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), `"run":"mf-2","version"`) || strings.Contains(string(b), `"run":"mf-2","void"`) {
		t.Fatalf("the export holds part of mf-2:\n%s", b)
	}
	code, out, errs = cli(t, "audit", "verify", "--file", path)
	if code != 0 {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	contains(t, "verify", out, "note: the export left out run mf-2: removed (retention)", "2 of 2 runs verified")
}

// TestAuditVerifyHeadNamesARunOfAFileOfSeveral (docs/cli.md, audit
// verify --head): in a file of several runs a head names its run,
// --head RUN:VERSION:HASH: the right head verifies, another hash fails
// that run (`head`, exit 4); a head without a run, or naming a run the
// file does not hold, is a bad command line (exit 2), never applied to
// every run.
func TestAuditVerifyHeadNamesARunOfAFileOfSeveral(t *testing.T) {
	s := projected(t)
	rangeRuns(t, s)
	path, lines := exportLines(t)
	var m struct {
		Manifest struct {
			Runs []struct {
				Run     string
				Version uint64
				Head    string
			}
		}
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil || len(m.Manifest.Runs) != 3 {
		t.Fatalf("the manifest: %v %s", err, lines[len(lines)-1])
	}
	two := m.Manifest.Runs[1]
	head := fmt.Sprintf("%d:%s", two.Version, two.Head)
	if code, out, errs := cli(t, "audit", "verify", "--file", path, "--head", head); code != exitUsage || !strings.Contains(errs, "names no run, and the file holds 3 runs (mf-1, mf-2, mf-3): give --head RUN:VERSION:HASH") {
		t.Fatalf("a head without a run: exit %d, want %d\n%s%s", code, exitUsage, out, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", path, "--head", "mf-9:"+head); code != exitUsage || !strings.Contains(errs, `no run "mf-9" in it`) {
		t.Fatalf("a head of a run not in the file: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", path, "--head", "mf-2:"+head); code != 0 || !strings.Contains(out, "3 of 3 runs verified") {
		t.Fatalf("the head of mf-2: exit %d\n%s%s", code, out, errs)
	}
	wrong := fmt.Sprintf("mf-2:%d:%s", two.Version, m.Manifest.Runs[0].Head)
	code, out, errs := cli(t, "audit", "verify", "--file", path, "--head", wrong)
	if code != exitAudit {
		t.Fatalf("another head for mf-2: exit %d, want %d\n%s%s", code, exitAudit, out, errs)
	}
	contains(t, "another head for mf-2", out, "ok: run mf-1", "FAILED: run mf-2: head", "ok: run mf-3", "2 of 3 runs verified")
}

// TestRetentionApplyKilledMidwayIsCompletedByTheNext (docs/cli.md,
// retention apply; docs/adr/0030 §3, §5): a `weft retention apply`
// process SIGKILLed while it removes a family — the parent fully removed,
// the fork's read models gone, its events still there — leaves the lock
// and the fork's marker; the next apply is refused conflict while the
// dead apply's lease runs, and once it ran out completes the fork: every
// run of the family is gone and tombstoned. The fork's removal is held in
// its runtime step by a call the subprocess's credentials may not make
// (the server never answers it; the subprocess does not end on the
// refusal: WEFT_TEST_REFUSED_CALLS_WAIT, testRefusalsWait — not the
// shipped weft's path, where the refusal would end the apply cleanly and
// release the lock), which is where it is killed.
func TestRetentionApplyKilledMidwayIsCompletedByTheNext(t *testing.T) {
	s := restricted(t, map[string][]string{"notasks": {"$JS.API.STREAM.MSG.DELETE.WEFT_TASKS"}})
	ctx := context.Background()
	old := time.Now().Add(-72 * time.Hour).Truncate(time.Second)
	appendRunAt(t, s.Log, "kill-a", old, answered("a")...)
	fork := append([]events.Event{answered("a")[0], events.RunForked{From: events.ForkedFrom{Run: "kill-a", Version: 4, Turn: 1}}}, answered("a")[1:]...)
	appendRunAt(t, s.Log, "kill-b", old, fork...)
	waitProjected(t, s, "kill-a", "kill-b")
	b, _ := json.Marshal(api.Task{Schema: 1, Run: "kill-b", Action: "1/call_1", Agent: "payment-desk", Version: "1", Tool: "send_payment", Attempt: 1, Incarnation: 1})
	if _, err := s.JS.Publish(ctx, "weft.task.payment-desk.1.send_payment", b); err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer
	cmd := exec.Command(exe, "retention", "apply", "--older-than", "48h")
	cmd.Env = append(os.Environ(), "WEFT_TEST_AS_WEFT=1", "WEFT_TEST_REFUSED_CALLS_WAIT=1", "NATS_URL="+s.URL, "NATS_USER=notasks", "NATS_PASSWORD=p")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed once kill-a is gone and kill-b's view too: kill-b's removal
	// is in its runtime step, waiting for the task's delete the server
	// refused.
	views, err := s.JS.KeyValue(ctx, "weft_views")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ha, _ := s.Log.Head(ctx, "kill-a")
		_, verr := views.Get(ctx, "kill-b")
		if ha.IsZero() && errors.Is(verr, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apply never reached kill-b's runtime step:\n%s", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil || cmd.ProcessState.Exited() {
		t.Fatalf("the apply was not killed (it ended on its own: %v):\n%s", err, stderr.String())
	}
	if hb, _ := s.Log.Head(ctx, "kill-b"); hb.IsZero() {
		t.Fatal("kill-b's events went before the kill")
	}

	t.Setenv("NATS_USER", "admin")
	t.Setenv("NATS_PASSWORD", "a")
	if code, out, errs := cli(t, "retention", "apply", "--older-than", "48h"); code != exitFailed || !strings.Contains(errs, "conflict") || !strings.Contains(errs, "one apply at a time") {
		t.Fatalf("an apply while the dead one's lease runs: exit %d\n%s%s", code, out, errs)
	}
	// Its lease ran out (2 minutes; here, the lock's value says so).
	purges, err := s.JS.KeyValue(ctx, "weft_purges")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := purges.Put(ctx, "lock.apply", []byte(`{"by":"the killed apply","until":"2026-01-01T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "retention", "apply", "--older-than", "48h")
	if code != 0 || !strings.Contains(out, "removed kill-b (completing an interrupted purge)") {
		t.Fatalf("the next apply: exit %d\n%s%s", code, out, errs)
	}
	for _, run := range []string{"kill-a", "kill-b"} {
		if h, _ := s.Log.Head(ctx, run); !h.IsZero() {
			t.Errorf("%s's events are still there", run)
		}
		e, err := purges.Get(ctx, run)
		if err != nil || !strings.Contains(string(e.Value()), `"state":"purged"`) {
			t.Errorf("%s's tombstone: %v", run, err)
		}
	}
}

// TestSecurityWhoDidIt_SignedReleaseNamesItsHold (docs/security.md, "Who
// did it"): `weft hold --release --signing-key` without --hold is a bad
// command line (exit 2), and signs nothing: a proof of "the run's one
// active hold" would release a hold placed after it was signed.
func TestSecurityWhoDidIt_SignedReleaseNamesItsHold(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	key := filepath.Join(t.TempDir(), "ortiz.nk")
	if err := os.WriteFile(key, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "hold", "--release", "pay-42", "--reason", "settled", "--signing-key", key, "--print-proof")
	if code != exitUsage || out != "" || !strings.Contains(errs, "--hold") {
		t.Fatalf("a signed release without --hold: exit %d, out %q, err %q; want usage naming --hold, nothing signed", code, out, errs)
	}
	if code, out, _ := cli(t, "hold", "--release", "--hold", "h1", "pay-42", "--reason", "settled", "--signing-key", key, "--print-proof"); code != 0 || !strings.Contains(out, `"action":"h1"`) {
		t.Fatalf("a signed release naming h1: exit %d, out %q; want its proof, naming h1", code, out)
	}
}
