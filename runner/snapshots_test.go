package runner_test

import (
	"encoding/json"
	"testing"

	"github.com/weftrun/weft"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// snapshotHead reads the head of run's weft_snapshots entry (false: none).
func snapshotHead(t *testing.T, h *harness, run string) (eventlog.Head, bool) {
	t.Helper()
	kv, err := h.srv.JS.KeyValue(ctx(t), runner.SnapshotsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx(t), run)
	if err != nil {
		return eventlog.Head{}, false
	}
	var snap struct {
		Head eventlog.Head `json:"head"`
	}
	if err := json.Unmarshal(e.Value(), &snap); err != nil {
		t.Fatal(err)
	}
	return snap.Head, true
}

// docs/semantics.md §6 and §8, docs/adr/0032-fewer-writes-per-run.md: a
// run that finishes fewer than 16 versions past its last snapshot stores
// no snapshot at its end (one fsync fewer per run of weft bench's
// workload); a runner that reads it back folds the log's tail after the
// snapshot and answers from the finished state, as from a snapshot of the
// end. A run that suspends is still stored at its suspension (an idle run
// is read back with no tail).
func TestSemantics8_AShortFinishedRunIsReadBackFromItsLastSnapshotAndTheTail(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s",
		model.CallTools(payCall(1, "ok")), model.CallTools(payCall(2, "ok")), model.CallTools(payCall(3, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	_, stop := h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "snap-fin", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s, out := finished(t, h, "snap-fin")
	if out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", out.Kind)
	}
	stop() // its snapshot puts are done
	head, ok := snapshotHead(t, h, "snap-fin")
	if !ok || head.Version < 16 {
		t.Fatalf("snapshot %+v (stored %v): want the one due at 16 versions", head, ok)
	}
	if head.Version >= s.Version() {
		t.Fatalf("snapshot at version %d of a run that finished at %d, %d versions after the snapshot due at 16: a finished run is stored only when due", head.Version, s.Version(), s.Version()-16)
	}

	// Another runner reads the run back (snapshot, then the tail) and
	// answers from its finished state.
	r2, _ := h.startRunner([]*agent.Agent{a})
	loaded := r2.Stats().Loaded
	_, err := h.client.Cancel(c, api.CancelRequest{Run: "snap-fin", By: "test", Reason: "after the end"})
	if r2.Stats().Loaded == loaded {
		t.Fatal("the second runner did not read the finished run back")
	}
	if weft.ErrorCode(err) != weft.CodeRunEnded {
		t.Fatalf("a cancel of the run read back is answered %v, want %s (it has finished)", err, weft.CodeRunEnded)
	}
	if got := h.state("snap-fin"); got.Version() != s.Version() {
		t.Fatalf("a cancel of a finished run appended: version %d, was %d", got.Version(), s.Version())
	}

	// A run that suspends is stored at its suspension.
	waiting := build(t, model.NewScripted("w", model.CallTools(payCall(500, "ok")), model.Answer("ok")), []tools.Tool{b.tool()}, policy.Func(approvalAbove))
	hw := newHarness(t)
	_, stopw := hw.startRunner([]*agent.Agent{waiting})
	if _, err := hw.client.Start(c, api.StartRequest{Run: "snap-wait", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	hw.waitStatus("snap-wait", aggregate.StatusSuspended)
	stopw()
	sw := hw.state("snap-wait")
	if st := aggregate.Status(sw).Kind; st != aggregate.StatusSuspended {
		t.Fatalf("run snap-wait is %s after its runner stopped, want suspended", st)
	}
	if head, ok := snapshotHead(t, hw, "snap-wait"); !ok || head.Version != sw.Version() {
		t.Fatalf("snapshot %+v (stored %v) of a run suspended at version %d: a suspended run is stored at its suspension", head, ok, sw.Version())
	}
}
