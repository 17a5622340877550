package e2e_test

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
)

// startsOf returns the attempts of run's action whose body started, from
// the ledger, in the order they started.
func (e *env) startsOf(run, action string) []int {
	f, err := os.Open(e.ledger)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 4 && fs[0] == run && fs[1] == action {
			n, _ := strconv.Atoi(fs[3])
			out = append(out, n)
		}
	}
	return out
}

// TestSemantics8_ClosingAnAttemptRunnerKilled: a runner is SIGKILLed while
// a non-replayable write is fenced but no worker claimed it (no worker runs
// yet) and a second write is queued behind it. The runner that takes the
// run over closes the fenced attempt's claim first (docs/semantics.md §8,
// "Closing an attempt"): the write did not act, so it is replayed without
// spending its single attempt instead of ending uncertain. A worker started
// afterwards finds the closed claim of attempt 1 and never starts it (the
// ledger of body starts), runs attempt 2, then the queued write: the run
// completes, nothing uncertain, each body started once.
func TestSemantics8_ClosingAnAttemptRunnerKilled(t *testing.T) {
	e := newEnv(t)
	a := e.spawnWith("ra", "WEFT_E2E_NO_WORKER=1")
	const run = "r19k"
	e.start(run, input{Calls: []call{{Tool: "write", Args: workIn{Amount: 1}}, {Tool: "write", Args: workIn{Amount: 2}}}})
	e.waitFor(run, "a fenced write and a queued write", func(s aggregate.State) bool {
		w1, _ := s.Action("1/call_1_1")
		w2, _ := s.Action("1/call_1_2")
		return w1.State == aggregate.ActionRunning && w2.State == aggregate.ActionQueued
	})
	e.spawnWith("rb", "WEFT_E2E_NO_WORKER=1")
	a.kill(t, syscall.SIGKILL)
	s := e.waitFor(run, "the takeover", func(s aggregate.State) bool { return s.Incarnation() == 2 })
	w1, _ := s.Action("1/call_1_1")
	if w1.State == aggregate.ActionUncertain {
		t.Fatalf("the fenced write no worker ever claimed is uncertain after the takeover (%s); ledger starts %v", w1.Detail, e.startsOf(run, w1.ID))
	}
	e.spawnWorker("w1")
	s = e.waitFor(run, "its end", func(s aggregate.State) bool {
		st := aggregate.Status(s).Kind
		return st == aggregate.StatusFinished || st == aggregate.StatusSuspended
	})
	if out, fin := s.Finished(); !fin || out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %+v (finished %v), status %+v", out, fin, aggregate.Status(s))
	}
	for _, act := range s.Actions() {
		starts := e.startsOf(run, act.ID)
		if act.State == aggregate.ActionUncertain || len(starts) != 1 {
			t.Errorf("%s: %s, body starts (attempts) %v; want one start", act.ID, act.State, starts)
		}
		for _, n := range starts {
			for _, closed := range act.Closed {
				if n == closed {
					t.Errorf("%s: attempt %d started a body after its claim was closed", act.ID, n)
				}
			}
		}
	}
	if w1, _ := s.Action("1/call_1_1"); len(w1.Closed) != 1 || w1.Closed[0] != 1 {
		t.Errorf("1/call_1_1 closed attempts %v, want [1] (closed by the takeover)", w1.Closed)
	}
}

// TestSemantics8_ClosingAnAttemptWorkerKilledBetweenClaimAndBody: a worker
// process claims a non-replayable write's attempt and is killed before the
// body's first instruction (no ledger line). The claim exists, so nothing
// can close the attempt: the runtime cannot tell this from a body that
// started (docs/adr/0023-closing-attempts.md, "What stays uncertain
// without a body start"; docs/semantics.md §8, "Closing an attempt": the
// limit), and the write ends uncertain — with the worker's claim as its
// evidence, never a closed one nor one marked not started (a killed worker
// decides nothing), and no body start ever after.
// The next worker that gets the task finds the claim and reports the
// attempt worker_lost.
func TestSemantics8_ClosingAnAttemptWorkerKilledBetweenClaimAndBody(t *testing.T) {
	e := newEnv(t)
	e.spawnWith("ra", "WEFT_E2E_NO_WORKER=1")
	const run = "r19w"
	e.start(run, input{Calls: []call{{Tool: "write", Args: workIn{Amount: 1, CrashBeforeStart: 1}}}})
	w0 := e.spawnWorker("w0")
	select {
	case <-w0.done: // claimed attempt 1, then died before the body
	case <-time.After(60 * time.Second): // a bound on a hang, not a timing assertion
		t.Fatal("worker w0 did not exit within 60 s: it never reached its crash between the claim and the body")
	}
	e.spawnWorker("w1")
	s := e.waitFor(run, "the write's end", func(s aggregate.State) bool {
		a, _ := s.Action("1/call_1_1")
		return a.State == aggregate.ActionUncertain || a.State.Ended()
	})
	a, _ := s.Action("1/call_1_1")
	if a.State != aggregate.ActionUncertain || len(a.Closed) != 0 {
		t.Fatalf("write %s (%s), closed attempts %v; want uncertain, none closed: a worker claimed it", a.State, a.Detail, a.Closed)
	}
	kv, err := e.srv.JS.KeyValue(cctx(t), api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(cctx(t), api.ClaimKey(run, a.ID, 1, 1))
	var claim api.Claim
	if err == nil {
		err = json.Unmarshal(entry.Value(), &claim)
	}
	if err != nil || claim.Closed != nil || claim.NotStarted != nil || claim.Worker != "w0" {
		t.Fatalf("claim of attempt 1: %+v (%v); want w0's, never marked not started (it was killed before it could decide)", claim, err)
	}
	if starts := e.startsOf(run, a.ID); len(starts) != 0 {
		t.Fatalf("body starts %v; want none (w0 died before its body, w1 found the claim)", starts)
	}
}
