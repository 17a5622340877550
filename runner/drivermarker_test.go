package runner_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// TestIssue17_RunsThatNeedNoEntryLeaveNoSubjectInTheDriversBucket (an idle run
// costs nothing; docs/adr/0019-partitions.md): a run whose
// weft_drivers entry is removed — it went idle, or finished — leaves no
// subject behind once the removal's marker expired. A delete marker kept
// forever made every partition scan (a last-per-subject watch of the
// bucket) cost the server a message per run that ever had work in flight:
// at a million runs an idle runner's scans kept nats-server at half a
// core.
func TestIssue17_RunsThatNeedNoEntryLeaveNoSubjectInTheDriversBucket(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "pay", Match: func(r model.Request) bool { return r.Turn == 1 }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	r, _ := h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	const n = 8
	for i := range n {
		if _, err := h.client.Start(c, api.StartRequest{Run: fmt.Sprint("mark-", i), Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		h.waitStatus(fmt.Sprint("mark-", i), aggregate.StatusSuspended)
	}
	// Two of them finish: approved, their body runs, the model answers.
	for _, run := range []string{"mark-0", "mark-1"} {
		s := h.state(run)
		act, _ := s.Action(aggregate.Status(s).Approvals[0])
		if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: "a-" + run, Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
			t.Fatal(err)
		}
		h.waitStatus(run, aggregate.StatusFinished)
	}
	st, err := h.srv.JS.Stream(context.Background(), "KV_"+runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ictx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := st.Info(ictx, jetstream.WithSubjectFilter("$KV."+runner.DriversBucket+".>"))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if info.State.NumSubjects == 0 && r.Stats().Driven == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the runs went idle or finished, weft_drivers still has %d subjects (%d messages): %v; want none (runner holds %d runs)",
				info.State.NumSubjects, info.State.Msgs, info.State.Subjects, r.Stats().Driven)
		}
		// wall clock: a poll until the entries' markers expire (their TTL: the server's time) and the runs are evicted
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIssue17_ABucketWithoutMarkerTTLsStillLosesTheEntries: a weft_drivers
// bucket provisioned by an earlier release (no LimitMarkerTTL: the server
// refuses a message TTL) still has the entries of idle runs removed — with
// a plain delete — so that no scan wakes them again and again.
func TestIssue17_ABucketWithoutMarkerTTLsStillLosesTheEntries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bg := context.Background()
	if err := h.srv.JS.DeleteKeyValue(bg, runner.DriversBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := h.srv.JS.CreateKeyValue(bg, jetstream.KeyValueConfig{Bucket: runner.DriversBucket, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	b := &bodies{}
	m := model.NewRules("s",
		model.Rule{Name: "pay", Match: func(r model.Request) bool { return r.Turn == 1 }, Step: model.CallTools(payCall(500, "ok"))})
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	r, _ := h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	for i := range 4 {
		if _, err := h.client.Start(c, api.StartRequest{Run: fmt.Sprint("old-", i), Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		h.waitStatus(fmt.Sprint("old-", i), aggregate.StatusSuspended)
	}
	kv, err := h.srv.JS.KeyValue(bg, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(bg, 5*time.Second)
		keys, err := kv.ListKeys(lctx)
		var n []string
		if err == nil {
			for k := range keys.Keys() {
				n = append(n, k)
			}
		}
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			t.Fatal(err)
		}
		if len(n) == 0 && r.Stats().Driven == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the runs went idle, weft_drivers still has entries %v (runner holds %d runs)", n, r.Stats().Driven)
		}
		// wall clock: a poll until the evictions deleted the entries: not ownership's time
		time.Sleep(100 * time.Millisecond)
	}
}
