package e2e_test

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/tools"
)

// Scenario 30: runner killed (SIGKILL) while a replayable body runs →
// recovery restarts it once (2 starts, replays 1), the run completes.
func TestScenario30_KillDuringReplayableBody(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	e.start("r30", input{Calls: []call{{Tool: "read", Args: workIn{MS: 60000, Block: true}}}})
	e.waitStarts("r30", "1/call_1_1", 1)
	// The survivor starts after the kill: started before it, it could be
	// given ra's partitions by the rebalancing of its join, a graceful
	// hand-off (no approval re-asked), not the loss this scenario is.
	a.kill(t, syscall.SIGKILL)
	e.spawn("rb")
	s := e.waitStatus("r30", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	act, _ := s.Action("1/call_1_1")
	if n := e.starts("r30", "1/call_1_1"); n != 2 || act.Replays() != 1 {
		t.Fatalf("body starts %d (ledger), replays %d; want 2 and 1", n, act.Replays())
	}
}

// Scenario 32: runner killed while a non-replayable tool runs → recovery →
// suspended with one uncertain action (lost-runner evidence); reconcile →
// completes; body started exactly once.
func TestScenario32_KillDuringNonReplayableBody(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	e.start("r32", input{Calls: []call{{Tool: "write", Args: workIn{MS: 60000, Block: true}}}})
	e.waitStarts("r32", "1/call_1_1", 1)
	// The survivor starts after the kill: started before it, it could be
	// given ra's partitions by the rebalancing of its join, a graceful
	// hand-off (no approval re-asked), not the loss this scenario is.
	a.kill(t, syscall.SIGKILL)
	e.spawn("rb")
	s := e.waitStatus("r32", aggregate.StatusSuspended)
	act, _ := s.Action("1/call_1_1")
	if act.State != aggregate.ActionUncertain || !strings.Contains(act.Detail, "runner") {
		t.Fatalf("action %s %q, want uncertain with lost-runner evidence", act.State, act.Detail)
	}
	if _, err := e.client.Reconcile(cctx(t), api.ReconcileRequest{CommandID: "rc", Run: "r32", Action: act.ID, Content: []byte(`{"done":"by hand"}`)}); err != nil {
		t.Fatal(err)
	}
	s = e.waitStatus("r32", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if n := e.starts("r32", "1/call_1_1"); n != 1 {
		t.Fatalf("body started %d times", n)
	}
}

// Scenario 31: approval pending, whole node killed (runner SIGKILL and the
// NATS server restarted) → the same request is pending; approve → the tool
// runs exactly once.
func TestScenario31_NodeKilledWithPendingApproval(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	e.start("r31", input{Calls: []call{{Tool: "write", Args: workIn{Amount: 500}}}})
	s := e.waitStatus("r31", aggregate.StatusSuspended)
	before, _ := s.Action("1/call_1_1")
	a.kill(t, syscall.SIGKILL)
	e.srv.Restart()
	e.client = api.NewClient(e.srv.Conn)
	e.spawn("rb")
	s = e.state("r31")
	act, _ := s.Action("1/call_1_1")
	if act.State != aggregate.ActionAwaitingApproval || act.Request.Revision != before.Request.Revision {
		t.Fatalf("after restart: %s revision %d, want awaiting_approval revision %d", act.State, act.Request.Revision, before.Request.Revision)
	}
	// rb just started after the server restart: until it can tell that ra
	// is gone (its grace, docs/protocol/40-commands.md) the approve is
	// answered runner_busy, which a client retries.
	c := cctx(t)
	for {
		_, err := e.client.Approve(c, api.ApproveRequest{CommandID: "a", Run: "r31", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"})
		if err == nil {
			break
		}
		if weft.ErrorCode(err) != weft.CodeRunnerBusy || c.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s = e.waitStatus("r31", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if n := e.starts("r31", "1/call_1_1"); n != 1 {
		t.Fatalf("body started %d times", n)
	}
}

// Scenario 33: SIGTERM while a tool runs → the tool finishes, its result is
// recorded, the run is handed off; a restarted runner completes it with
// nothing uncertain.
func TestScenario33_SigtermWhileToolRuns(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	e.start("r33", input{Calls: []call{{Tool: "write", Args: workIn{MS: 1000}}}})
	e.waitStarts("r33", "1/call_1_1", 1)
	a.kill(t, syscall.SIGTERM)
	s := e.state("r33")
	act, _ := s.Action("1/call_1_1")
	if act.State != aggregate.ActionSucceeded || !s.HandedOff() {
		t.Fatalf("after drain: action %s, handed off %v", act.State, s.HandedOff())
	}
	e.spawn("rb")
	s = e.waitStatus("r33", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if st := aggregate.Status(s); len(st.Uncertain) != 0 {
		t.Fatalf("uncertain actions %v", st.Uncertain)
	}
	if n := e.starts("r33", "1/call_1_1"); n != 1 {
		t.Fatalf("body started %d times", n)
	}
}

// Scenario 34: an approved tool not yet started at a loss → a new approval
// request (higher revision); the old reference → stale_reference;
// approving the new one runs the tool once.
func TestScenario34_ApprovedNotStartedAtLoss(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	// Concurrency 1: the read blocks the only slot, so the approved write
	// stays queued.
	e.start("r34", input{Calls: []call{{Tool: "read", Args: workIn{MS: 60000, Block: true}}, {Tool: "write", Args: workIn{Amount: 500}}}})
	e.waitStarts("r34", "1/call_1_1", 1)
	s := e.waitFor("r34", "approval", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 1 })
	old, _ := s.Action("1/call_1_2")
	if _, err := e.client.Approve(cctx(t), api.ApproveRequest{CommandID: "a1", Run: "r34", Action: old.ID, Revision: old.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("r34", "queued", func(s aggregate.State) bool { a, _ := s.Action("1/call_1_2"); return a.State == aggregate.ActionQueued })
	// The survivor starts after the kill: started before it, it could be
	// given ra's partitions by the rebalancing of its join, a graceful
	// hand-off (no approval re-asked), not the loss this scenario is.
	a.kill(t, syscall.SIGKILL)
	e.spawn("rb")
	s = e.waitFor("r34", "re-asked approval", func(s aggregate.State) bool {
		a, _ := s.Action("1/call_1_2")
		return a.State == aggregate.ActionAwaitingApproval && a.Request.Revision > old.Request.Revision
	})
	_, err := e.client.Approve(cctx(t), api.ApproveRequest{CommandID: "a2", Run: "r34", Action: old.ID, Revision: old.Request.Revision, Approver: "desk", Credential: "alice"})
	if weft.ErrorCode(err) != weft.CodeStaleReference {
		t.Fatalf("old reference: %v", err)
	}
	cur, _ := s.Action("1/call_1_2")
	if _, err := e.client.Approve(cctx(t), api.ApproveRequest{CommandID: "a3", Run: "r34", Action: cur.ID, Revision: cur.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
		t.Fatal(err)
	}
	s = e.waitStatus("r34", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if n := e.starts("r34", "1/call_1_2"); n != 1 {
		t.Fatalf("approved write started %d times", n)
	}
}

// Scenario 35: a model reply in flight at SIGTERM is waited for and
// recorded; recovery runs the requested tool.
func TestScenario35_ModelReplyInFlightAtSigterm(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	e.start("r35", input{ModelMS: 800, Calls: []call{{Tool: "write", Args: workIn{}}}})
	e.waitFor("r35", "model requested", func(s aggregate.State) bool { return s.Turn() == 1 })
	a.kill(t, syscall.SIGTERM)
	s := e.state("r35")
	if len(s.Actions()) != 1 || !s.HandedOff() {
		t.Fatalf("after drain: %d actions, handed off %v; the reply was not recorded", len(s.Actions()), s.HandedOff())
	}
	e.spawn("rb")
	s = e.waitStatus("r35", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if n := e.starts("r35", "1/call_1_1"); n != 1 {
		t.Fatalf("tool started %d times", n)
	}
}

var _ = tools.Unconfirmed

// Scenario 37: two runners decide on the same run at once (both take over
// a lost runner's run) → exactly one append wins; the loser re-reads and
// performs no effect: one recovery, one new attempt, two body starts.
func TestScenario37_TwoRunnersTakeOverOnce(t *testing.T) {
	e := newEnv(t)
	a := e.spawn("ra")
	e.start("r37", input{Calls: []call{{Tool: "read", Args: workIn{MS: 60000, Block: true}}}})
	e.waitStarts("r37", "1/call_1_1", 1)
	e.spawn("rb")
	e.spawn("rc")
	a.kill(t, syscall.SIGKILL)
	s := e.waitStatus("r37", aggregate.StatusFinished)
	if s.Incarnation() != 2 {
		t.Fatalf("incarnation %d, want exactly one takeover", s.Incarnation())
	}
	if n := e.starts("r37", "1/call_1_1"); n != 2 {
		t.Fatalf("body started %d times, want 2", n)
	}
}

// Scenario 29 (crash variants): a replayable read whose worker crashes
// twice with replay 3 completes after 3 starts (replays 2); crashing 5
// times with replay 2 gives uncertain after 2 starts. Workers are separate
// processes that exit inside the body; the test starts a new one after
// each crash.
func TestScenario29_WorkerCrashes(t *testing.T) {
	e := newEnv(t)
	os.Setenv("WEFT_E2E_NO_WORKER", "1")
	e.spawn("ra")
	os.Unsetenv("WEFT_E2E_NO_WORKER")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; ; i++ {
			w := e.spawnWorker(fmt.Sprint("w", i))
			select {
			case <-w.done:
			case <-stop:
				return
			}
		}
	}()
	e.start("r29c", input{Calls: []call{{Tool: "read", Args: workIn{Crash: 2}}}})
	s := e.waitStatus("r29c", aggregate.StatusFinished)
	act, _ := s.Action("1/call_1_1")
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted || act.Replays() != 2 || e.starts("r29c", act.ID) != 3 {
		t.Fatalf("outcome %s replays %d starts %d", out.Kind, act.Replays(), e.starts("r29c", act.ID))
	}
	e.start("r29d", input{Calls: []call{{Tool: "read2", Args: workIn{Crash: 5}}}})
	s = e.waitStatus("r29d", aggregate.StatusSuspended)
	act, _ = s.Action("1/call_1_1")
	if act.State != aggregate.ActionUncertain || e.starts("r29d", act.ID) != 2 {
		t.Fatalf("state %s starts %d", act.State, e.starts("r29d", act.ID))
	}
}

// Scenario 33 with a peer: SIGTERM to the driving runner while a tool runs
// → the tool finishes and is recorded, the run is handed off and the live
// peer takes it over at once and completes it, nothing uncertain.
func TestScenario33_SigtermHandsOffToPeer(t *testing.T) {
	e := newEnv(t)
	procs := map[string]*proc{"ra": e.spawn("ra"), "rb": e.spawn("rb")}
	e.start("r33p", input{Calls: []call{{Tool: "write", Args: workIn{MS: 800}}}})
	e.waitStarts("r33p", "1/call_1_1", 1)
	driver := e.state("r33p").Runner()
	procs[driver].kill(t, syscall.SIGTERM)
	s := e.waitStatus("r33p", aggregate.StatusFinished)
	if out, _ := s.Finished(); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v", out)
	}
	if st := aggregate.Status(s); len(st.Uncertain) != 0 || s.Runner() == driver {
		t.Fatalf("uncertain %v, final driver %s (drained %s)", st.Uncertain, s.Runner(), driver)
	}
	if n := e.starts("r33p", "1/call_1_1"); n != 1 {
		t.Fatalf("body started %d times", n)
	}
}
