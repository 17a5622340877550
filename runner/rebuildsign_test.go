package runner_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// The driver index rebuilt from the log (runner/rebuild.go) and signed
// heads (docs/security.md, "Signed heads"; docs/adr/0026-signed-heads.md).
// A runner that signs heads keeps a run's weft_drivers entry until the
// signature owed after a person's decision or the run's end is appended, so
// that whoever takes the partition over signs it when the run's driver died
// between the two appends. When weft_drivers is lost (or the deployment is
// new to it), the entries are derived again from the log (docs/semantics.md
// §8: work not recorded is derived again from the log, never dropped) — and
// so must those of the runs owing a signature be, though the run is idle
// or finished. Each history below is a dead runner's, left without its
// entry and without the "rebuilt" marker, as after the bucket's loss.

// waitRebuilt waits until the driver index rebuild is marked done, and
// returns the marker's value (the rebuild's count of entries it created).
func waitRebuilt(t *testing.T, h *harness) string {
	t.Helper()
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if e, err := kv.Get(c, "rebuilt"); err == nil {
			return string(e.Value())
		}
		if c.Err() != nil {
			t.Fatal(`"rebuilt" was never put`)
		}
		// wall clock: a poll of the rebuild's marker: the rebuild is made as the runner starts, not on ownership's time
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSemantics8_ARebuiltDriverIndexKeepsAnIdleRunOwingASignature: an idle
// run (it waits for a second approval) whose rejection its dead driver did
// not sign gets its entry from the rebuild, and the runner that takes its
// partition over takes it over and signs the rejection. Before, the rebuild
// skipped every idle run (aggregate.Idle), and the rejection stayed
// unsigned until the next decision — never, if nobody answers again.
func TestSemantics8_ARebuiltDriverIndexKeepsAnIdleRunOwingASignature(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	keyB, pubB := userKey(t, 41)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove))

	var s aggregate.State
	hd := appendDecided(t, h, "rb-idle", &s, aggregate.Start{Run: "rb-idle", Agent: desk.Ref(), Input: "pay twice", Limits: desk.Limits(), Runner: "runner-a"})
	one, two := payCall(500, "ok"), payCall(600, "ok")
	one.ID, two.ID = "call_1_1", "call_1_2"
	hd = appendDecidedAt(t, h, "rb-idle", &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{one, two}}}))
	cfg, _ := desk.ToolConfig("pay")
	approval := aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 1}}
	hd = appendDecidedAt(t, h, "rb-idle", &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{
		{CallID: one.ID, Validation: events.CallValid, Normalized: one.Arguments, Policy: approval, Tool: cfg},
		{CallID: two.ID, Validation: events.CallValid, Normalized: two.Arguments, Policy: approval, Tool: cfg}}})
	first, _ := s.Action(aggregate.Status(s).Approvals[0])
	hd = appendDecidedAt(t, h, "rb-idle", &s, hd, aggregate.Reject{Action: first.ID, Revision: first.Request.Revision, Reason: "too much", By: "alice"})
	rejected := hd.Version
	if !aggregate.Idle(s) || !s.HeadBehind() {
		t.Fatalf("crafted history: idle %v, head behind %v; want an idle run owing a signature", aggregate.Idle(s), s.HeadBehind())
	}

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(keyB))
	deadline := time.Now().Add(20 * time.Second)
	for {
		envs, _, err := h.srv.Log.Load(context.Background(), "rb-idle")
		if err != nil {
			t.Fatal(err)
		}
		rep := audit.Verify(envs, audit.WithTrust(pubB), audit.WithUnfinished())
		if rep.OK() && rep.SignedThrough >= rejected {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rejection at version %d was never signed after the rebuild (entry %q): verify %+v, signed through %d, log ends with %s", rejected, h.driverEntry("rb-idle"), rep.Problem, rep.SignedThrough, envs[len(envs)-1].Type)
		}
		// wall clock: a poll of the run's log for the signature: the lazy takeover of an idle run waits on no judgement
		time.Sleep(50 * time.Millisecond)
	}
	if rr := h.recoveries("rb-idle"); len(rr) != 1 || rr[0].Previous != "runner-a" || rr[0].Runner != "runner-b" {
		t.Errorf("recoveries %+v, want one by runner-b from runner-a", rr)
	}
	if st := aggregate.Status(h.state("rb-idle")); st.Kind != aggregate.StatusSuspended || len(st.Approvals) != 1 {
		t.Errorf("status %s with approvals %v after the signature, want still suspended on the other approval", st.Kind, st.Approvals)
	}
}

// finishedUnsigned appends a dead runner's history of run: started,
// answered, finished — and no head_signed after run_finished.
func finishedUnsigned(t *testing.T, h *harness, run string, desk *agent.Agent) {
	t.Helper()
	var s aggregate.State
	hd := appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: desk.Ref(), Input: "close the books", Limits: desk.Limits(), Runner: "ghost"})
	appendDecidedAt(t, h, run, &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyFinalAnswer, Turn: model.Message{Role: model.RoleAssistant, Text: "done"}}))
	if _, fin := s.Finished(); !fin || !s.HeadBehind() {
		t.Fatalf("crafted history: finished %v, head behind %v; want a finished run owing its end head", fin, s.HeadBehind())
	}
}

// TestSemantics8_ARebuiltDriverIndexKeepsAFinishedRunOwingItsEndHead: a
// run whose driver died between run_finished and its end head gets its
// entry from the rebuild of a runner that signs heads, whose wake signs the
// end head and removes the entry. Before, the rebuild read a last
// run_finished as a run needing nothing (endsFinished), so the run's end
// stayed unsigned: its history never verifies with --trust.
func TestSemantics8_ARebuiltDriverIndexKeepsAFinishedRunOwingItsEndHead(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runnerKey, runnerPub := userKey(t, 42)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	finishedUnsigned(t, h, "rb-end", desk)

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(runnerKey))
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "rb-end")
	ev, err := envs[len(envs)-1].Event()
	if err != nil {
		t.Fatal(err)
	}
	if hs := ev.(events.HeadSigned); !hs.End || hs.Key != runnerPub || hs.Signer != "runner-b" {
		t.Fatalf("last event %+v: want the end head signed by runner-b's key", hs)
	}
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() {
		t.Fatalf("verify with --trust: %+v", rep.Problem)
	}
	if rr := h.recoveries("rb-end"); len(rr) != 0 {
		t.Errorf("recoveries %+v: a finished run is never taken over", rr)
	}
	deadline := time.Now().Add(20 * time.Second)
	for h.driverEntry("rb-end") != "" {
		if time.Now().After(deadline) {
			t.Fatal("the finished run's rebuilt weft_drivers entry was never removed once its end was signed")
		}
		// wall clock: a poll until the entry is removed after the end head: the runner's work, not ownership's time
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemantics8_ARebuildWithoutAHeadKeyLeavesAFinishedRunWithoutAnEntry:
// a runner that signs nothing owes no end head, so its rebuild gives a
// finished run no entry, as before (its history verifies "unsigned" with
// --trust, docs/security.md).
func TestSemantics8_ARebuildWithoutAHeadKeyLeavesAFinishedRunWithoutAnEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	finishedUnsigned(t, h, "rb-nokey", desk)

	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"))
	if got := waitRebuilt(t, h); got != `{"schema":1,"runs":0}` {
		t.Errorf("rebuilt marker %s, want no entry created", got)
	}
	if d := h.driverEntry("rb-nokey"); d != "" {
		t.Fatalf("the finished run got an entry naming %q from a rebuild that signs nothing", d)
	}
}

// TestSemantics8_ARebuildGivesAFinishedRunOwingItsEndAnEntryUnreadAndLast:
// the rebuild of a runner that signs heads gives a run whose last message
// is run_finished its entry without loading the run (that message proves
// the end head owed), and only after the runs it loads, which may have
// work in flight (docs/semantics.md §8: pending work is derived again
// from the log; docs/adr/0026-signed-heads.md, "Cost"): turning keys on
// in a deployment that ran without them makes every run it finished such
// a run, and their signing backlog must not hold back the recovery of
// work in flight. Before, each was loaded, in the log's order, among
// the unfinished runs.
func TestSemantics8_ARebuildGivesAFinishedRunOwingItsEndAnEntryUnreadAndLast(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	runnerKey, runnerPub := userKey(t, 43)
	desk := build(t, model.NewScripted("desk", model.Answer("done")), nil, policy.AlwaysAllow())
	// First in the log and by name: read first in either order.
	finishedUnsigned(t, h, "rb-a-end", desk)
	var s aggregate.State
	appendDecided(t, h, "rb-z-live", &s, aggregate.Start{Run: "rb-z-live", Agent: desk.Ref(), Input: "close the books", Limits: desk.Limits(), Runner: "ghost"})
	if _, fin := s.Finished(); fin || aggregate.Idle(s) {
		t.Fatalf("crafted history: finished %v, idle %v; want a run with work in flight", fin, aggregate.Idle(s))
	}

	var mu sync.Mutex
	var seen []string
	hook := func(event string, _ int, run string) {
		if strings.HasPrefix(event, "rebuild-") {
			mu.Lock()
			seen = append(seen, event+" "+run)
			mu.Unlock()
		}
	}
	h.startRunner([]*agent.Agent{desk}, runner.WithID("runner-b"), runner.WithHeadKey(runnerKey), runner.WithHook(hook))
	if got := waitRebuilt(t, h); got != `{"schema":1,"runs":2}` {
		t.Errorf("rebuilt marker %s, want two entries created", got)
	}
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	if want := []string{"rebuild-read rb-z-live", "rebuild-entry rb-z-live", "rebuild-entry rb-a-end"}; !slices.Equal(got, want) {
		t.Errorf("the rebuild's reads and entries %q, want %q: the finished run unread, after the run in flight", got, want)
	}
	envs, _ := audittest.WaitEndHead(t, h.srv.Log, "rb-a-end")
	if rep := audit.Verify(envs, audit.WithTrust(runnerPub)); !rep.OK() {
		t.Fatalf("verify with --trust: %+v", rep.Problem)
	}
	// The run in flight is taken over and driven to its signed end.
	audittest.WaitEndHead(t, h.srv.Log, "rb-z-live")
	if rr := h.recoveries("rb-z-live"); len(rr) != 1 || rr[0].Runner != "runner-b" {
		t.Errorf("recoveries %+v, want one by runner-b", rr)
	}
}
