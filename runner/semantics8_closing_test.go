package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// ledger is the test tool's record of every body start, written before the
// body acts (as an application's fsynced ledger would be): run, action and
// attempt.
type ledger struct {
	mu     sync.Mutex
	starts []ledgerStart
}

type ledgerStart struct {
	Run, Action string
	Attempt     int
}

// tool is "pay", whose body appends to the ledger before it answers.
func (l *ledger) tool() tools.Tool {
	return tools.Bind(payDef, func(ctx context.Context, call tools.Call, in payIn) (payOut, error) {
		l.mu.Lock()
		l.starts = append(l.starts, ledgerStart{call.Run, call.Action, call.Attempt})
		l.mu.Unlock()
		return payOut{ID: "pay-" + call.Action}, nil
	}, func(err error) tools.Failure { return tools.Uncertain(err.Error()) })
}

// payOnce is agent "desk" whose model calls the ledger's "pay" once (no
// deadline, allowed) and then answers.
func (l *ledger) payOnce(t *testing.T) *agent.Agent {
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	return build(t, m, []tools.Tool{tools.WithTimeout(l.tool(), tools.Infinity())}, policy.Func(allow))
}

// started reports whether any body of run's action started.
func (l *ledger) started(run, action string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.starts, func(s ledgerStart) bool { return s.Run == run && s.Action == action })
}

// check checks run's final state s against the ledger (docs/semantics.md §5 and
// §8 "Closing an attempt"): no body started under an attempt the run
// records closed, no action with a body start ended not_started, and an
// action uncertain without any body start has a worker's claim on its
// attempt — the one case the runtime cannot tell apart from a started body
// (docs/adr/0023-closing-attempts.md). It returns how many actions are
// uncertain, how many of those never started a body, and how many of these
// hold a claim its worker marked not started after the decision that ended
// the attempt had read it: the run records that close as having found the
// claim (attempt_closed claimed; the worker found, after its claim, the
// very decision that had just read its claim: "Claims released as not
// started"). A marked claim whose attempt the run records closed while the
// action is uncertain is an error: the action should have ended
// not_started.
func (l *ledger) check(t *testing.T, h *harness, run string, s aggregate.State) (uncertain, unstarted, marked int) {
	t.Helper()
	claims, err := h.srv.JS.KeyValue(context.Background(), api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range s.Actions() {
		started := l.started(run, a.ID)
		if a.State == aggregate.ActionUncertain {
			uncertain++
			if !started {
				unstarted++
				var c api.Claim
				e, err := claims.Get(context.Background(), api.ClaimKey(run, a.ID, a.Attempts, a.Attempt.Incarnation))
				if err == nil {
					err = json.Unmarshal(e.Value(), &c)
				}
				if err != nil || c.Closed != nil || c.Worker == "" {
					t.Errorf("run %s: action %s is uncertain (%s) but no body of it ever started, and no worker claimed attempt %d (claim %+v, %v)", run, a.ID, a.Detail, a.Attempts, c, err)
				}
				switch {
				case c.NotStarted != nil && slices.Contains(a.Closed, a.Attempts):
					t.Errorf("run %s: action %s is uncertain (%s) with no body start, though the run records attempt %d closed and its worker %s marked its claim not started", run, a.ID, a.Detail, a.Attempts, c.Worker)
				case c.NotStarted != nil && slices.Contains(a.Claimed, a.Attempts):
					marked++
				}
			}
		}
		if a.State == aggregate.ActionNotStarted && started {
			t.Errorf("run %s: action %s ended not_started but a body of it started", run, a.ID)
		}
		l.mu.Lock()
		for _, st := range l.starts {
			if st.Run == run && st.Action == a.ID && slices.Contains(a.Closed, st.Attempt) {
				t.Errorf("run %s: action %s attempt %d started a body after its claim was closed", run, a.ID, st.Attempt)
			}
		}
		l.mu.Unlock()
	}
	return uncertain, unstarted, marked
}

// TestSemantics8_ClosingAnAttemptCancelRacingApprovals races a cancel with
// the worker's claim of an approved payment's attempt, 20 times, in an
// order a fixed seed draws per run. The worker's check before its claim is
// held by the test (claimGate) until the side drawn to go first is done:
// when the cancel goes first, its close lands before the claim, the worker
// finds the attempt closed and the payment ends not_started; when the
// claim goes first, the cancel cannot close the attempt. In every run the
// payment is uncertain only when its body started or a worker claimed it
// (checked against the tool's ledger), and no body starts after its
// attempt's claim was closed. Both outcomes occur: without the gate the
// worker's claim won every race under sync_interval always.
func TestSemantics8_ClosingAnAttemptCancelRacingApprovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("paid"))
	a := build(t, m, []tools.Tool{l.tool()}, policy.Func(approvalAbove))
	g := newClaimGate(worker.LogCheck(h.srv.JS))
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithWorkerOptions(worker.WithAttemptCheck(g.check)))
	c := ctx(t)
	claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	rng := rand.New(rand.NewPCG(8, 20))
	cancelFirst := make([]bool, n)
	for i := range n {
		cancelFirst[i] = rng.IntN(2) == 0
	}
	if !slices.Contains(cancelFirst, true) || !slices.Contains(cancelFirst, false) {
		t.Fatalf("the seed draws one order only: %v", cancelFirst)
	}
	var keys []string
	for i := range n {
		run := fmt.Sprint("race-", i)
		held := g.hold(run)
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "pay"}); err != nil {
			t.Fatal(err)
		}
		s := h.waitStatus(run, aggregate.StatusSuspended)
		act, _ := s.Action(aggregate.Status(s).Approvals[0])
		if _, err := h.client.Approve(c, api.ApproveRequest{CommandID: run + "-a", Run: run, Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "alice"}); err != nil {
			t.Fatal(err)
		}
		// The worker has checked the attempt and is about to claim it.
		task := <-held.reached
		key := api.ClaimKey(run, task.Action, task.Attempt, task.Incarnation)
		keys = append(keys, key)
		cancel := func() {
			if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: run + "-c", Run: run, By: "dave"}); err != nil && weft.ErrorCode(err) != weft.CodeRunEnded {
				t.Errorf("cancel %s: %v", run, err) // run_ended: the payment and the run completed first
			}
		}
		if cancelFirst[i] {
			cancel()
			close(held.release)
			continue
		}
		close(held.release)
		deadline := time.Now().Add(15 * time.Second)
		for {
			if _, err := claims.Get(c, key); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s: the worker never claimed %s", run, key)
			}
			// wall clock: a poll of weft_claims until the worker claimed the attempt: not ownership's time
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}
	drained(t, h, r, a, "pay", keys...)
	uncertain, unstarted, marked := 0, 0, 0
	for i := range n {
		run := fmt.Sprint("race-", i)
		s := h.waitFor(run, "finished", func(s aggregate.State) bool { _, fin := s.Finished(); return fin })
		u, un, mk := l.check(t, h, run, s)
		uncertain += u
		unstarted += un
		marked += mk
		p := s.Actions()[0]
		switch closed := len(p.Closed) > 0; {
		case cancelFirst[i] && (!closed || p.State != aggregate.ActionNotStarted || l.started(run, p.ID)):
			t.Errorf("run %s: the cancel went first, yet the payment is %s (%s), closed attempts %v, body started %v; want not_started, attempt 1 closed, no body", run, p.State, p.Detail, p.Closed, l.started(run, p.ID))
		case !cancelFirst[i] && closed && !slices.Contains(p.Claimed, 1):
			// Closed after the cancel's close found the claim only by
			// its worker's late mark (attempt_not_started).
			t.Errorf("run %s: the worker claimed the attempt first, yet the run records attempts %v closed, claimed %v", run, p.Closed, p.Claimed)
		case !cancelFirst[i] && closed && (p.State != aggregate.ActionNotStarted || l.started(run, p.ID)):
			t.Errorf("run %s: the claim found by the cancel was marked not started, yet the payment is %s (%s), body started %v; want not_started, no body", run, p.State, p.Detail, l.started(run, p.ID))
		}
	}
	// Every worker let go of its attempt (drained) after its report was
	// answered, and no worker was killed: a claim the cancel found and
	// its worker then marked is recorded by now (attempt_not_started), and
	// no uncertain payment is left without a body start.
	if marked != 0 || unstarted != 0 {
		t.Errorf("%d uncertain payments without a body start, %d of them with a claim marked not started that was not recorded; want none", unstarted, marked)
	}
	t.Logf("%d runs, %d with the cancel first: %d uncertain payments, %d of them without a body start (%d with a claim its worker marked not started after the cancel read it); %d body starts", n, len(slices.DeleteFunc(slices.Clone(cancelFirst), func(first bool) bool { return !first })), uncertain, unstarted, marked, len(l.starts))
}

// claimGate wraps an AttemptCheck so that a test decides when the worker
// goes on to claim the attempt of a held run: the check runs first (the
// attempt is current), then the worker reports the task on reached and
// waits for release.
type claimGate struct {
	base  worker.AttemptCheck
	mu    sync.Mutex
	holds map[string]*claimHold
}

type claimHold struct {
	reached chan api.Task
	release chan struct{}
	once    sync.Once
}

func newClaimGate(base worker.AttemptCheck) *claimGate {
	return &claimGate{base: base, holds: map[string]*claimHold{}}
}

// hold makes the next check of run's attempts wait for the hold's release.
func (g *claimGate) hold(run string) *claimHold {
	g.mu.Lock()
	defer g.mu.Unlock()
	h := &claimHold{reached: make(chan api.Task, 1), release: make(chan struct{})}
	g.holds[run] = h
	return h
}

func (g *claimGate) check(ctx context.Context, task api.Task) (bool, error) {
	current, err := g.base(ctx, task)
	g.mu.Lock()
	h := g.holds[task.Run]
	g.mu.Unlock()
	if h == nil || err != nil || !current {
		return current, err
	}
	h.once.Do(func() { h.reached <- task })
	select {
	case <-h.release:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return current, nil
}

// drained waits until the workers let go of the attempts of keys (claim
// keys) and of every task of a's tool: r's in-process worker holds none
// of keys and every stream copy of a's tool in WEFT_TASKS was acked, in
// two passes one after the other with no handed task of r falling back
// to its stream copy since the first. A handed task (the task r gives its
// own worker) has no stream copy unless it needs one
// (docs/adr/0039-the-stream-copy-only-when-needed.md), so the queue alone
// says nothing about it: its hold does. The hold ends after the task's
// report or not-started mark was answered (recorded, or refused), or once
// it found the attempt's claim closed or taken — or, when it ends without
// its report answered, just before it counts (r.HandedFallbacks) and
// publishes its copy, whose delivery then holds the attempt again: the
// second pass sees that copy unless its publish takes longer than one
// poll. Once drained returns, a delivery of a closed attempt's task has
// found the closed claim (and would have started its body, in the ledger,
// had the claim not been closed), and a worker's report or mark of an
// attempt of keys was answered.
func drained(t *testing.T, h *harness, r *runner.Runner, a *agent.Agent, tool string, keys ...string) {
	t.Helper()
	c := ctx(t)
	cons, err := h.srv.JS.Consumer(c, api.TaskStream, api.Queue{Agent: a.Name(), Version: a.Version(), Tool: tool}.Consumer())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	quiet, fallbacks := 0, int64(-1)
	// wall clock: a poll of the workers' holds and acks, two passes in a row: not ownership's time
	for ; ; time.Sleep(20 * time.Millisecond) {
		f := r.HandedFallbacks()
		held := slices.IndexFunc(keys, r.WorkerHolds)
		info, err := cons.Info(c)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case held >= 0 || info.NumPending != 0 || info.NumAckPending != 0:
			quiet = 0
		case f == fallbacks:
			quiet++
		default:
			quiet = 1
		}
		fallbacks = f
		if quiet == 2 {
			return
		}
		if time.Now().After(deadline) {
			if held >= 0 {
				t.Fatalf("the worker still holds the attempt of %s", keys[held])
			}
			t.Fatalf("the tasks of %s were not all acked: %+v", tool, info)
		}
	}
}

// claimAsWorker creates the claim of run's action attempt (incarnation) as
// a worker does before it starts the body: the attempt may have acted, so
// nothing can close it (docs/adr/0023-closing-attempts.md). Tests of the
// paths that end an attempt whose body may have run use it where no worker
// of theirs takes the task.
func claimAsWorker(t *testing.T, h *harness, run, action string, attempt, incarnation int) {
	t.Helper()
	kv, err := h.srv.JS.KeyValue(ctx(t), api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(api.Claim{Schema: 1, Worker: "w-elsewhere", Token: "t-1", Claimed: time.Now().UTC()})
	if _, err := kv.Create(ctx(t), api.ClaimKey(run, action, attempt, incarnation), b); err != nil {
		t.Fatal(err)
	}
}

// TestSemantics8_ClosingAnAttemptFoundClosedByTheNextDecision
// (docs/adr/0023-closing-attempts.md, item 5): a close that landed but
// whose decision was lost — its runner died between the close and the
// append — leaves the attempt's claim closed. The next decision about the
// attempt (here its deadline timer) tries to close it again, finds the
// closed value and records it: the attempt did not act, the action is
// replayed without spending its single attempt, and a cancel then ends it
// not_started (every attempt closed), nothing uncertain.
func TestSemantics8_ClosingAnAttemptFoundClosedByTheNextDecision(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{tools.WithTimeout(l.tool(), tools.After(300*time.Millisecond))}, policy.Func(allow))
	h.startRunner([]*agent.Agent{a}, runner.WithExternalTools("pay")) // no worker takes pay
	const run = "found-closed"
	act := fencedAttempt(t, h, run)
	kv, err := h.srv.JS.KeyValue(ctx(t), api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The dead runner's close.
	b, _ := json.Marshal(api.Claim{Schema: 1, Closed: &api.ClaimClose{By: "dead-runner", Why: "cancelled", At: time.Now().UTC()}})
	if _, err := kv.Create(ctx(t), api.ClaimKey(run, act.ID, 1, act.Attempt.Incarnation), b); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor(run, "attempt 1 recorded closed", func(s aggregate.State) bool {
		a, _ := s.Action(act.ID)
		return slices.Contains(a.Closed, 1) || a.State == aggregate.ActionUncertain
	})
	if a, _ := s.Action(act.ID); a.State == aggregate.ActionUncertain || a.Attempts < 2 {
		t.Fatalf("after its deadline the attempt whose claim was closed is %s (%s), %d attempt(s); want replayed", a.State, a.Detail, a.Attempts)
	}
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: run, By: "dave"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitFor(run, "finished", func(s aggregate.State) bool { _, fin := s.Finished(); return fin })
	if a, _ := s.Action(act.ID); a.State != aggregate.ActionNotStarted || len(a.Closed) != a.Attempts {
		t.Fatalf("after the cancel: %s (%s), attempts %d, closed %v; want not_started, every attempt closed", a.State, a.Detail, a.Attempts, a.Closed)
	}
	if u, _, _ := l.check(t, h, run, s); u != 0 {
		t.Fatalf("%d uncertain", u)
	}
}

// fencedAttempt starts run (agent "desk", one call) and returns its action
// once its first attempt is fenced.
func fencedAttempt(t *testing.T, h *harness, run string) aggregate.Action {
	t.Helper()
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor(run, "a fenced attempt", func(s aggregate.State) bool {
		return len(s.Actions()) == 1 && s.Actions()[0].State == aggregate.ActionRunning
	})
	return s.Actions()[0]
}

// ghostOwnsEveryPartition records every partition as owned by "ghost", a
// runner that stopped heartbeating: a runner started afterwards judges it
// gone and takes its runs over (cause runner_lost). The runs are the
// caller's, written with appendDecided and Runner "ghost", with a driver
// key (ghostDrives).
func ghostOwnsEveryPartition(t *testing.T, h *harness) {
	t.Helper()
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, runner.PartitionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(c, "config", []byte(fmt.Sprintf(`{"schema":1,"partitions":%d}`, runner.DefaultPartitions))); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, "rebuilt", []byte(`{"schema":1}`)); err != nil {
		t.Fatal(err)
	}
	for p := range runner.DefaultPartitions {
		if _, err := kv.Put(c, fmt.Sprintf("p.%04d", p), []byte("ghost")); err != nil {
			t.Fatal(err)
		}
	}
}

// ghostDrives records "ghost" as the driver of runs.
func ghostDrives(t *testing.T, h *harness, runs ...string) {
	t.Helper()
	drivers, err := h.srv.JS.KeyValue(ctx(t), runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range runs {
		if _, err := drivers.Put(ctx(t), runner.DriverKey(run, runner.DefaultPartitions), []byte("ghost")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemantics8_ClosingAnAttemptFoundClaimedIsNeverClosedAgain
// (docs/semantics.md
// §5 rule 1, docs/adr/0023-closing-attempts.md): a close that found a
// worker's claim is recorded (attempt_closed with claimed), and no later
// decision closes that attempt again — the claim expires (a no-deadline
// tool's claim lives for the bucket's max age), after which a close would
// win over a body that may have run. A replayable, approved payment with
// no deadline was claimed by a worker when its runner ("ghost") was lost;
// the takeover's close finds the claim and asks the approval again. The
// claim then goes (purged here, as its expiry would), and the re-asked
// approval is rejected: the payment ends uncertain, not rejected.
func TestSemantics8_ClosingAnAttemptFoundClaimedIsNeverClosedAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ghostOwnsEveryPartition(t, h)
	var l ledger
	m := model.NewScripted("s", model.Answer("ok"))
	a := build(t, m, []tools.Tool{tools.WithReplay(tools.WithTimeout(l.tool(), tools.Infinity()), 2)}, policy.Func(approvalAbove))
	const run, id = "claimed-once", "1/call_1_1"
	var s aggregate.State
	hd := appendDecided(t, h, run, &s, aggregate.Start{Run: run, Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	call := payCall(500, "ok")
	call.ID = "call_1_1"
	hd = appendDecidedAt(t, h, run, &s, hd, runner.ReplyCommand(1, model.Reply{Kind: model.ReplyToolRequest, Turn: model.Message{Role: model.RoleAssistant, Calls: []model.ToolCall{call}}}))
	finance := events.Requirement{Name: "finance", Version: 1}
	hd = appendDecidedAt(t, h, run, &s, hd, aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: call.ID, Validation: events.CallValid, Normalized: call.Arguments,
		Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: finance}}}})
	appendDecidedAt(t, h, run, &s, hd, aggregate.Approve{Action: id, Revision: 1, Reviewer: "alice", Verifier: "desk",
		Policy: aggregate.PolicyResult{Decision: events.PolicyAllow}, Tool: events.ToolConfig{Timeout: -1, MaxAttempts: 2}})
	if act, _ := s.Action(id); act.State != aggregate.ActionRunning || act.Attempt.Deadline != nil {
		t.Fatalf("crafted history: action %s, deadline %v; want running with no deadline", act.State, act.Attempt.Deadline)
	}
	ghostDrives(t, h, run)
	claimAsWorker(t, h, run, id, 1, 1) // the ghost's worker claimed it: its body may have run

	// On the fake ownership clock: the judgement's grace (the ghost's key
	// was never written) passes by hand until the runner owns the ghost's
	// partitions; then the clock follows the wall clock.
	clk := newOwnClock(t)
	h.unbalanced = true // nothing is claimed before the clock moves
	r, _ := h.startRunner([]*agent.Agent{a}, append(clk.options(nil), runner.WithExternalTools("pay"))...)
	clk.advanceUntil(t, "the runner claimed every partition of the gone ghost", 40, func() bool { return ownsAll(r) })
	clk.follow()
	s = h.waitFor(run, "the approval asked again", func(s aggregate.State) bool {
		a, _ := s.Action(id)
		return a.State == aggregate.ActionAwaitingApproval && a.Request.Revision == 2
	})
	if act, _ := s.Action(id); !slices.Contains(act.Claimed, 1) || len(act.Closed) != 0 {
		t.Fatalf("after the takeover: claimed %v, closed %v; want attempt 1 recorded claimed", act.Claimed, act.Closed)
	}
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(c, api.ClaimKey(run, id, 1, 1)); err != nil { // the worker's claim expired
		t.Fatal(err)
	}
	if _, err := h.client.Reject(c, api.RejectRequest{CommandID: "r2", Run: run, Action: id, Revision: 2, Reason: "no", Approver: "desk", Credential: "bob"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitFor(run, "the answer recorded", func(s aggregate.State) bool {
		a, _ := s.Action(id)
		return a.State != aggregate.ActionAwaitingApproval
	})
	if act, _ := s.Action(id); act.State != aggregate.ActionUncertain || len(act.Closed) != 0 {
		t.Fatalf("after the rejection: %s (%s), closed %v; want uncertain: a worker claimed attempt 1", act.State, act.Detail, act.Closed)
	}
}

// TestSemantics8_ClosingAnAttemptWhoseDecisionWasNotRecorded
// (docs/adr/0023-closing-attempts.md, item 5): a cancel closes the claim
// of a running attempt without a deadline, then its append fails with
// nothing landed (unavailable) and the client does not send it again. The
// closed attempt never starts nor reports, and no timer would ever decide
// it: the runner records the close itself on the run's next wake, and the
// attempt — which did not act — is replayed, its one attempt unspent.
// Before, the action stayed running attempt 1 forever.
func TestSemantics8_ClosingAnAttemptWhoseDecisionWasNotRecorded(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	a := l.payOnce(t)
	js := &lossyJS{JetStream: h.srv.JS}
	h.runOn(h.srv.Connect(), js, []*agent.Agent{a}, runner.WithExternalTools("pay"))
	c := ctx(t)
	const run = "close-unrecorded"
	h.startServed(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	s := h.waitFor(run, "a fenced attempt", func(s aggregate.State) bool {
		return len(s.Actions()) == 1 && s.Actions()[0].State == aggregate.ActionRunning
	})
	act := s.Actions()[0]
	if act.Attempt.Deadline != nil {
		t.Fatalf("attempt 1 has deadline %v, want none", act.Attempt.Deadline)
	}
	js.evFails.Store(1)
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c", Run: run, By: "dave"}); weft.ErrorCode(err) != weft.CodeUnavailable {
		t.Fatalf("cancel whose append failed: %v, want unavailable", err)
	}
	kv, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	var cl api.Claim
	if e, err := kv.Get(c, api.ClaimKey(run, act.ID, 1, act.Attempt.Incarnation)); err != nil || json.Unmarshal(e.Value(), &cl) != nil || cl.Closed == nil {
		t.Fatalf("attempt 1's claim after the cancel: %+v, %v; want closed", cl, err)
	}
	s = h.waitFor(run, "attempt 1 recorded closed", func(s aggregate.State) bool {
		a, _ := s.Action(act.ID)
		return slices.Contains(a.Closed, 1)
	})
	if a, _ := s.Action(act.ID); a.State != aggregate.ActionRunning || a.Attempts != 2 {
		t.Fatalf("after the close was recorded: %s (%s), %d attempt(s); want attempt 2 running", a.State, a.Detail, a.Attempts)
	}
	if _, fin := s.Finished(); fin {
		t.Fatal("the run finished, though the cancel was never recorded")
	}
}

// TestSemantics8_ClosingAnAttemptWhoseClaimWasMarkedNotStarted
// (docs/adr/0023-closing-attempts.md, "Claims released as not started"): a
// worker claimed a payment's attempt and then decided not to start its
// body, and marked its own claim so (api.Claim.NotStarted; the worker's
// side: worker/notstarted_test.go). A cancel that comes next closes the
// attempt: its close finds the key taken, reads the mark and counts the
// attempt closed — the payment ends not_started, with no body start, not
// uncertain. Before, any worker's value counted as claimed. The log's
// attempt_closed names the worker that claimed it and why it did not start
// the body (not_started), so its evidence is not "closed unclaimed".
func TestSemantics8_ClosingAnAttemptWhoseClaimWasMarkedNotStarted(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	a := l.payOnce(t)
	h.startRunner([]*agent.Agent{a}, runner.WithExternalTools("pay")) // the worker is the test's
	c := ctx(t)
	const run = "marked-not-started"
	act := fencedAttempt(t, h, run)
	kv, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := api.ClaimKey(run, act.ID, 1, act.Attempt.Incarnation)
	claim := api.Claim{Schema: 1, Worker: "w-1", Token: "t-1", Claimed: time.Now().UTC()}
	b, _ := json.Marshal(claim)
	rev, err := kv.Create(c, key, b)
	if err != nil {
		t.Fatal(err)
	}
	claim.NotStarted = &api.ClaimNotStarted{Why: api.ClaimEnded, At: time.Now().UTC()}
	b, _ = json.Marshal(claim)
	if _, err := kv.Update(c, key, b, rev); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c", Run: run, By: "dave"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor(run, "finished", func(s aggregate.State) bool { _, fin := s.Finished(); return fin })
	if p, _ := s.Action(act.ID); p.State != aggregate.ActionNotStarted || !slices.Contains(p.Closed, 1) || len(p.Claimed) != 0 {
		t.Fatalf("after the cancel: %s (%s), closed %v, claimed %v; want not_started, attempt 1 closed", p.State, p.Detail, p.Closed, p.Claimed)
	}
	var closes []events.AttemptClosed
	for _, e := range h.eventsOf(run) {
		if ac, ok := e.(events.AttemptClosed); ok {
			closes = append(closes, ac)
		}
	}
	if want := (events.ClosedNotStarted{Worker: "w-1", Why: api.ClaimEnded}); len(closes) != 1 || closes[0].Claimed || closes[0].NotStarted == nil || *closes[0].NotStarted != want {
		t.Fatalf("attempt_closed %+v; want one, not claimed, not_started %+v", closes, want)
	}
	if u, _, _ := l.check(t, h, run, s); u != 0 {
		t.Fatalf("%d uncertain", u)
	}
}

// afterClaimGate wraps an AttemptCheck so that a test holds a worker
// between its claim and its body: the second check of attempt 1 of a held
// run's task (the worker's check after the claim) reports reached and
// waits for release, then checks.
type afterClaimGate struct {
	h       *harness
	base    worker.AttemptCheck
	run     string
	calls   atomic.Int64
	reached chan struct{}
	release chan struct{}
}

// newAfterClaimGate holds run's worker after its claim of attempt 1
// (worker.LogCheck checks); the hold ends by the end of the test.
func newAfterClaimGate(h *harness, run string) *afterClaimGate {
	g := &afterClaimGate{h: h, base: worker.LogCheck(h.srv.JS), run: run, reached: make(chan struct{}), release: make(chan struct{})}
	h.t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	})
	return g
}

// wait returns once the worker holds attempt 1's claim, its body not
// started; it fails the test when c ends first, or at once when the run
// closed attempt 1 before any worker claimed it (its deadline passed
// first: the test's deadline is too short for this machine).
func (g *afterClaimGate) wait(c context.Context) {
	g.h.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-g.reached:
			return
		case <-tick.C:
			if as := g.h.state(g.run).Actions(); len(as) > 0 && slices.Contains(as[0].Closed, 1) && !slices.Contains(as[0].Claimed, 1) {
				g.h.t.Fatalf("run %s: attempt 1 was closed before any worker claimed it (actions %+v); want the worker held after its claim", g.run, as)
			}
		case <-c.Done():
			g.h.t.Fatalf("run %s: the worker never held attempt 1's claim (%v); actions %+v", g.run, c.Err(), g.h.state(g.run).Actions())
		}
	}
}

func (g *afterClaimGate) check(ctx context.Context, task api.Task) (bool, error) {
	if task.Run == g.run && task.Attempt == 1 && g.calls.Add(1) == 2 {
		close(g.reached)
		select {
		case <-g.release:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return g.base(ctx, task)
}

// TestSemantics8_ClosingAnAttemptMarkedNotStartedBeforeTheTakeover
// (docs/adr/0023-closing-attempts.md, "Claims released as not started"):
// a worker claimed a non-replayable payment's attempt; before its check
// after the claim, the run's runner drained (SIGTERM: the run handed off)
// and left. The worker's check finds the run handed off by a runner that
// is gone, so it does not start the body and marks its claim not started.
// The runner that takes the run over closes the attempt, finds the mark
// and counts it closed: the attempt did not act, the payment is replayed
// without spending its single attempt and paid once (one body start,
// attempt 2). Before, the takeover's close found the worker's claim and
// the payment ended uncertain with no body start.
func TestSemantics8_ClosingAnAttemptMarkedNotStartedBeforeTheTakeover(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	a := l.payOnce(t)
	const run = "marked-before-takeover"
	rA, stopA := h.startRunner([]*agent.Agent{a}, runner.WithExternalTools("pay"), runner.WithDrainWindow(time.Second))
	g := newAfterClaimGate(h, run)
	nc := h.srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(nc, js, worker.WithID("w-held"), worker.WithAttemptCheck(g.check))
	w.Handle(api.Queue{Agent: a.Name(), Version: a.Version(), Tool: "pay"}, runner.ToolHandler(l.tool(), nil))
	wctx, wstop := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	t.Cleanup(func() { wstop(); <-wdone })
	c := ctx(t)
	h.startServed(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	g.wait(c) // the worker holds attempt 1's claim, its body not started
	stopA()
	live, err := h.srv.JS.KeyValue(c, runner.RunnersBucket)
	if err != nil {
		t.Fatal(err)
	}
	until(t, "the drained runner is gone", func() bool {
		_, err := live.Get(c, rA.ID())
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if s := h.state(run); !s.HandedOff() {
		t.Fatal("the drained runner did not hand the run off")
	}
	close(g.release)
	claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	act := h.state(run).Actions()[0]
	until(t, "the worker marked its claim not started", func() bool {
		e, err := claims.Get(c, api.ClaimKey(run, act.ID, 1, act.Attempt.Incarnation))
		var cl api.Claim
		return err == nil && json.Unmarshal(e.Value(), &cl) == nil && cl.NotStarted != nil && cl.Worker == "w-held"
	})
	h.startRunner([]*agent.Agent{a}, runner.WithExternalTools("pay"))
	s := h.waitFor(run, "finished, or the payment uncertain", func(s aggregate.State) bool {
		p, _ := s.Action(act.ID)
		_, fin := s.Finished()
		return fin || p.State == aggregate.ActionUncertain
	})
	p, _ := s.Action(act.ID)
	if p.State != aggregate.ActionSucceeded || !slices.Contains(p.Closed, 1) || p.Attempts != 2 {
		t.Fatalf("payment %s (%s), attempts %d, closed %v, claimed %v; want succeeded by attempt 2, attempt 1 closed", p.State, p.Detail, p.Attempts, p.Closed, p.Claimed)
	}
	l.mu.Lock()
	starts := slices.Clone(l.starts)
	l.mu.Unlock()
	if len(starts) != 1 || starts[0].Attempt != 2 {
		t.Fatalf("body starts %+v; want one, of attempt 2", starts)
	}
	if u, _, _ := l.check(t, h, run, s); u != 0 {
		t.Fatalf("%d uncertain", u)
	}
}

// TestSemantics8_ClosingAnAttemptCancelledBetweenClaimAndCheckEndsNotStartedFromTheMark
// (docs/semantics.md §8 "Closing an attempt"; docs/adr/0023-closing-attempts.md,
// "Late evidence: a mark after the decision"): a worker holds a payment's
// claim, its check after the claim not made yet, when a cancel comes. The
// cancel's close finds the worker's claim — unmarked: the worker has seen
// nothing yet — and the payment is decided uncertain. The worker's check
// then finds the attempt cancelled: it never starts the body, marks its
// claim not started (ended) and reports the mark. The runner reads the
// claim and records attempt_not_started: the payment leaves uncertain for
// not_started in the finished run, attributed to the worker's mark. The
// ledger shows no body start; nobody is asked to reconcile. Before, the
// payment stayed uncertain.
func TestSemantics8_ClosingAnAttemptCancelledBetweenClaimAndCheckEndsNotStartedFromTheMark(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	a := l.payOnce(t)
	const run = "cancel-after-claim"
	g := newAfterClaimGate(h, run)
	headKey, headPub := userKey(t, 7)
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithHeadKey(headKey), runner.WithWorkerOptions(worker.WithAttemptCheck(g.check)))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	g.wait(c) // the worker holds attempt 1's claim, its body not started
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c", Run: run, By: "dave"}); err != nil {
		t.Fatal(err)
	}
	if p := h.state(run).Actions()[0]; p.State != aggregate.ActionUncertain || !slices.Contains(p.Claimed, 1) {
		t.Fatalf("payment %s (%s), claimed %v; want the cancel's close to find the claim: uncertain", p.State, p.Detail, p.Claimed)
	}
	close(g.release)
	// The worker lets go of the attempt once its mark's report was
	// answered: the run has recorded it by then.
	drained(t, h, r, a, "pay", api.ClaimKey(run, h.state(run).Actions()[0].ID, 1, 1))
	s := h.state(run)
	p := s.Actions()[0]
	if p.State != aggregate.ActionNotStarted || p.Detail != events.NotStartedMarked || !slices.Contains(p.Claimed, 1) || !slices.Contains(p.Closed, 1) {
		t.Fatalf("payment %s (%s), claimed %v, closed %v; want not_started by the mark, attempt 1 found claimed then marked", p.State, p.Detail, p.Claimed, p.Closed)
	}
	if u, _, _ := l.check(t, h, run, s); u != 0 {
		t.Fatalf("%d uncertain; want none", u)
	}
	if l.started(run, p.ID) {
		t.Fatal("the ledger shows a body start")
	}
	// The corrected finished run still verifies against the runner's head
	// key (docs/security.md, "Signed heads"): its runner signs the end
	// head again after attempt_not_started.
	envs := waitSignedAfter(t, h, run, events.NameAttemptNotStarted)
	if rep := audit.Verify(envs, audit.WithTrust(headPub)); !rep.OK() {
		t.Fatalf("the corrected run does not verify with --trust: %+v", rep.Problem)
	}
}

// TestSemantics8_ClosingAnAttemptAMarkOnAnotherClaimUnderTheKeyStaysUncertain
// (docs/semantics.md §5 rule 1; docs/adr/0023-closing-attempts.md, "Late
// evidence: a mark after the decision"): the cancel's close found the
// worker's claim (its token recorded in attempt_closed). That claim then
// expires — deleted here, as a stand-in — and another delivery creates the
// key again and marks it not started, and reports so. That mark is not the
// found claim's, whose body may have run: the payment stays uncertain.
func TestSemantics8_ClosingAnAttemptAMarkOnAnotherClaimUnderTheKeyStaysUncertain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	a := l.payOnce(t)
	const run = "mark-on-another-claim"
	g := newAfterClaimGate(h, run)
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithWorkerOptions(worker.WithAttemptCheck(g.check)))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	g.wait(c) // the worker holds attempt 1's claim, its body not started
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c", Run: run, By: "dave"}); err != nil {
		t.Fatal(err)
	}
	p := h.state(run).Actions()[0]
	if p.State != aggregate.ActionUncertain || !slices.Contains(p.Claimed, 1) || p.ClaimToken == "" {
		t.Fatalf("payment %s (%s), claimed %v, token %q; want the cancel's close to find the claim and record its token", p.State, p.Detail, p.Claimed, p.ClaimToken)
	}
	claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := api.ClaimKey(run, p.ID, 1, 1)
	if err := claims.Delete(c, key); err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(api.Claim{Schema: 1, Worker: "w-late", Token: "another-delivery", Claimed: time.Now().UTC(), NotStarted: &api.ClaimNotStarted{Why: api.ClaimEnded}})
	if _, err := claims.Create(c, key, other); err != nil {
		t.Fatal(err)
	}
	// Its report is answered after the runner read the claim.
	rep := api.Report{Schema: api.Schema, CommandID: "late", Run: run, Action: p.ID, Attempt: 1, Incarnation: 1, Outcome: api.OutcomeLost, Cause: api.CauseNotStarted,
		Evidence: "the claim of attempt 1 was marked not started (ended)"}
	if _, err := runnerReport(c, h, rep); err != nil {
		t.Fatal(err)
	}
	if p := h.state(run).Actions()[0]; p.State != aggregate.ActionUncertain || slices.Contains(p.Closed, 1) {
		t.Fatalf("payment %s (%s), closed %v; want uncertain: the marked claim is not the one the close found", p.State, p.Detail, p.Closed)
	}
	close(g.release)
	drained(t, h, r, a, "pay", key)
	if p := h.state(run).Actions()[0]; p.State != aggregate.ActionUncertain || slices.Contains(p.Closed, 1) {
		t.Fatalf("payment %s (%s), closed %v after the worker let go; want uncertain", p.State, p.Detail, p.Closed)
	}
	// Its mark, if it tried one, left the other delivery's claim as it
	// was.
	e, err := claims.Get(c, key)
	if err != nil {
		t.Fatal(err)
	}
	var cl api.Claim
	if err := json.Unmarshal(e.Value(), &cl); err != nil || cl.Token != "another-delivery" || cl.Worker != "w-late" {
		t.Fatalf("claim %+v (%v): want the other delivery's, untouched", cl, err)
	}
}

// waitSignedAfter waits until run's log ends with an event of type typ
// and the signed end head after it, and returns the log. It fails the
// test when that never comes.
func waitSignedAfter(t *testing.T, h *harness, run string, typ events.Name) []events.Envelope {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		envs, _, err := h.srv.Log.Load(context.Background(), run)
		if err != nil {
			t.Fatal(err)
		}
		n := len(envs)
		if n >= 2 && envs[n-1].Type == events.NameHeadSigned && envs[n-2].Type == typ {
			return envs
		}
		if time.Now().After(deadline) {
			var last events.Name
			if n > 0 {
				last = envs[n-1].Type
			}
			t.Fatalf("run %s: its log never ended with %s and a signed head (last %s)", run, typ, last)
		}
		// wall clock: a poll of the run's log until its signed head: not ownership's time
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemantics8_ClosingAnAttemptAMarkAfterAReconciliationChangesNothing
// (docs/adr/0023-closing-attempts.md, "Late evidence: a mark after the
// decision"): as above, but a person reconciles the uncertain payment
// before the worker's check: the reconciliation recorded first wins, the
// mark read afterwards is not recorded and the payment stays reconciled.
func TestSemantics8_ClosingAnAttemptAMarkAfterAReconciliationChangesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	a := l.payOnce(t)
	const run = "reconciled-before-mark"
	g := newAfterClaimGate(h, run)
	r, _ := h.startRunner([]*agent.Agent{a}, runner.WithWorkerOptions(worker.WithAttemptCheck(g.check)))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	g.wait(c)
	if _, err := h.client.Cancel(c, api.CancelRequest{CommandID: "c", Run: run, By: "dave"}); err != nil {
		t.Fatal(err)
	}
	id := h.state(run).Actions()[0].ID
	if _, err := h.client.ReconcileStored(c, api.ReconcileRequest{Run: run, Action: id, Content: json.RawMessage(`{"error":"never sent"}`), By: "carol"}); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	drained(t, h, r, a, "pay", api.ClaimKey(run, id, 1, 1))
	claims, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := claims.Get(c, api.ClaimKey(run, id, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	var cl api.Claim
	if err := json.Unmarshal(e.Value(), &cl); err != nil || cl.NotStarted == nil {
		t.Fatalf("claim %+v (%v): want it marked not started", cl, err)
	}
	// The worker let go of the attempt once its mark's report was answered
	// (drained): a mark the run recorded (the bug this test catches) shows.
	p := h.state(run).Actions()[0]
	if p.State != aggregate.ActionReconciled || slices.Contains(p.Closed, 1) {
		t.Fatalf("payment %s (%s), closed %v; want reconciled, the late mark not recorded", p.State, p.Detail, p.Closed)
	}
}

// TestSemantics8_ClosingAnAttemptAMarkOnALiveRunEndsNotStartedAndTheRunGoesOn
// (docs/semantics.md §8 "Closing an attempt"; docs/adr/0023-closing-attempts.md,
// "A late mark on a live run"): a worker holds a non-replayable payment's
// claim, its check after the claim not made yet, when the attempt's
// deadline passes. The timer's close finds the worker's claim — unmarked —
// and the payment is decided uncertain on the live run. The worker then
// never starts the body and marks its claim not started; the runner reads
// the mark and records it: the payment ends not_started, the model reads
// that the call did not run, and the run completes without anyone
// reconciling. The ledger shows no body start. Before, the mark was
// evidence only and the run stayed suspended on the uncertain payment.
func TestSemantics8_ClosingAnAttemptAMarkOnALiveRunEndsNotStartedAndTheRunGoesOn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	var l ledger
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("not paid"))
	// The attempt's deadline leaves the worker seconds to claim, even on a
	// loaded machine: the gate fails the test at once if the run closed
	// attempt 1 unclaimed first.
	a := build(t, m, []tools.Tool{tools.WithTimeout(l.tool(), tools.After(5*time.Second))}, policy.Func(allow))
	const run = "mark-on-a-live-run"
	g := newAfterClaimGate(h, run)
	h.startRunner([]*agent.Agent{a}, runner.WithWorkerOptions(worker.WithAttemptCheck(g.check)))
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	g.wait(c) // the worker holds attempt 1's claim, its body not started
	s := h.waitFor(run, "the payment uncertain", func(s aggregate.State) bool {
		return len(s.Actions()) == 1 && s.Actions()[0].State == aggregate.ActionUncertain
	})
	if p := s.Actions()[0]; !slices.Contains(p.Claimed, 1) || p.Outcome != events.CauseTimedOut {
		t.Fatalf("payment %s (%s), outcome %s, claimed %v; want the timer's close to find the claim", p.State, p.Detail, p.Outcome, p.Claimed)
	}
	if _, fin := s.Finished(); fin {
		t.Fatal("the run finished; want it live")
	}
	close(g.release)
	s = h.waitFor(run, "the mark recorded", func(s aggregate.State) bool {
		_, fin := s.Finished()
		return fin || slices.Contains(s.Actions()[0].Closed, 1)
	})
	p := s.Actions()[0]
	if p.State != aggregate.ActionNotStarted || p.Detail != events.NotStartedMarked {
		t.Fatalf("payment %s (%s), closed %v; want not_started by the mark on the live run", p.State, p.Detail, p.Closed)
	}
	s = h.waitFor(run, "finished", func(s aggregate.State) bool {
		_, fin := s.Finished()
		return fin
	})
	if o, _ := s.Finished(); o.Kind != events.OutcomeCompleted || string(o.Answer) != `"not paid"` {
		t.Fatalf("outcome %+v; want completed with the model's answer", o)
	}
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests; want 2", len(reqs))
	}
	if got, ok := model.ResultOf(reqs[1], "pay"); !ok || string(got) != string(aggregate.NotStartedContent()) {
		t.Fatalf("the model read %s (%v) for the payment; want %s", got, ok, aggregate.NotStartedContent())
	}
	if u, _, _ := l.check(t, h, run, s); u != 0 {
		t.Fatalf("%d uncertain; want none", u)
	}
	if l.started(run, p.ID) {
		t.Fatal("the ledger shows a body start")
	}
}
