package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// answeredReport is a report another worker sent and the answer it got.
type answeredReport struct {
	rep api.Report
	err error
}

// otherWorker runs a second worker of a's pay queue in a connection of its
// own, as another process's would, whose reports go through the command
// API; each answered report is sent to answered.
func otherWorker(t *testing.T, h *harness, a *agent.Agent, answered func(answeredReport), opts ...worker.Option) {
	t.Helper()
	nc := h.srv.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	report := func(ctx context.Context, r api.Report) error {
		q := r.Queue
		r.Queue = nil // the command API's subject, not the queue's, carries it
		_, err := h.client.Report(ctx, r)
		r.Queue = q
		if answered != nil {
			answered(answeredReport{rep: r, err: err})
		}
		return err
	}
	other := worker.New(nc, js, append([]worker.Option{worker.WithID("other-worker"), worker.WithReporter(report)}, opts...)...)
	pay, _ := a.Tool("pay")
	other.Handle(api.Queue{Agent: a.Name(), Version: a.Version(), Tool: "pay"}, runner.ToolHandler(pay, nil))
	wctx, stopOther := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- other.Run(wctx) }()
	t.Cleanup(func() { stopOther(); <-wdone })
}

// TestSemantics8_ALossNoticeForAnAttemptTheOwnersWorkerDidNotClaimIsRecorded:
// with runner.WithEagerTaskCopy (by default the copy is published only
// after the hold ended: docs/adr/0039-the-stream-copy-only-when-needed.md,
// TestSemantics8_AVanishedWorkersClaimOfAHandedAttemptIsRecordedLost),
// the runner's own worker holds each handed attempt (its check waits) while
// the attempt's claim is held by a worker that vanished; another worker
// receives stream copies, finds that claim and reports the attempt lost
// (worker_lost). While the runner's worker holds the attempt the notice is
// refused runner_busy (not applied, retry): never answered as applied
// without being recorded. Once the handed task finds the claim taken and
// ends without a report, the other worker's retry — or the notice of the
// copy's next delivery — is recorded: every run records its attempt lost,
// none is stranded with its action running and nothing in flight
// (docs/semantics.md §8: no report is dropped; an unfinished run makes
// progress).
func TestSemantics8_ALossNoticeForAnAttemptTheOwnersWorkerDidNotClaimIsRecorded(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	check := func(ctx context.Context, tk api.Task) (bool, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		return true, nil
	}
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a}, runner.WithEagerTaskCopy(), runner.WithWorkerOptions(worker.WithAttemptCheck(check)))

	var (
		mu          sync.Mutex
		open        bool // the gate is open
		whileHeld   []answeredReport
		firstNotice = make(chan struct{})
		once        sync.Once
	)
	otherWorker(t, h, a, func(ar answeredReport) {
		if ar.rep.Outcome != api.OutcomeLost || ar.rep.Cause != "worker_lost" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !open {
			whileHeld = append(whileHeld, ar)
			once.Do(func() { close(firstNotice) })
		}
	})

	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, api.ClaimsBucket)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		run := fmt.Sprint("held-", i)
		for inc := 0; inc <= 1; inc++ {
			v, _ := json.Marshal(api.Claim{Schema: 1, Worker: "vanished", Token: "feed", Claimed: time.Now().UTC()})
			if _, err := kv.Create(c, api.ClaimKey(run, "1/call_1_1", 1, inc), v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := h.client.Start(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-firstNotice:
	case <-c.Done():
		t.Fatal("no stream copy reached the other worker")
	}
	mu.Lock()
	open = true
	held := slices.Clone(whileHeld)
	mu.Unlock()
	close(gate)
	for _, ar := range held {
		var we *weft.Error
		if !errors.As(ar.err, &we) || we.Code != weft.CodeRunnerBusy {
			t.Errorf("run %s: the other worker's worker_lost while the runner's worker held the attempt was answered %v, want runner_busy", ar.rep.Run, ar.err)
		}
	}
	for i := range n {
		run := fmt.Sprint("held-", i)
		lost := false
		for !lost {
			for _, msg := range messagesOf(t, h, run) {
				lost = lost || slices.Contains(msg, events.NameAttemptLost)
			}
			if lost {
				break
			}
			select {
			case <-c.Done():
				t.Fatalf("run %s: no attempt_lost recorded; its log: %v", run, messagesOf(t, h, run))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// TestSemantics7_AnotherWorkerDelaysTheStreamCopyOfAHandedTask: with a
// second worker on the queue (another runner's, or a standalone one), the
// stream copy of every task the runner handed to its own worker (with
// runner.WithEagerTaskCopy: docs/adr/0039) names that
// worker (worker.HeaderHandedTo); the other worker gives the copy's first
// delivery back with a delay instead of checking, claiming and reporting
// it at once. Ten runs of three instant steps: thirty bodies started, all
// by the runner's worker at the first attempt; the other worker sent no
// report, and no run's log holds a ReportRefused (a stale worker_lost
// notice) or an attempt_lost — the copy costs no append (docs/adr/0027).
// The delay is a minute here, longer than the test, so that what is
// counted never races the redelivery; after it the copy's attempt is no
// longer current and it is acked. docs/semantics.md §7.
func TestSemantics7_AnotherWorkerDelaysTheStreamCopyOfAHandedTask(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s",
		model.CallTools(payCall(1, "")), model.CallTools(payCall(1, "")), model.CallTools(payCall(1, "")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a}, runner.WithEagerTaskCopy())
	var reports atomic.Int64
	otherWorker(t, h, a, func(answeredReport) { reports.Add(1) }, worker.WithHandedCopyDelay(time.Minute))
	c := ctx(t)
	const n = 10
	for i := range n {
		if _, err := h.client.Start(c, api.StartRequest{Run: fmt.Sprint("copy-", i), Agent: "desk", Input: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	refused, lost := 0, 0
	for i := range n {
		for _, msg := range completedAtFirstAttempts(t, h, fmt.Sprint("copy-", i)) {
			if slices.Contains(msg, events.NameReportRefused) {
				refused++
			}
			if slices.Contains(msg, events.NameAttemptLost) {
				lost++
			}
		}
	}
	if refused != 0 || lost != 0 {
		t.Errorf("%d steps: %d ReportRefused and %d attempt_lost appends, want none", 3*n, refused, lost)
	}
	if got := reports.Load(); got != 0 {
		t.Errorf("the other worker sent %d reports, want none: it never ran or claimed a handed task's copy", got)
	}
	if got := b.starts.Load(); got != 3*n {
		t.Errorf("%d body starts for %d attempts, want %d", got, 3*n, 3*n)
	}
}

// completedAtFirstAttempts waits for run to finish, checks that it
// completed with every action succeeded at its first attempt, and returns
// its log's messages (messagesOf).
func completedAtFirstAttempts(t *testing.T, h *harness, run string) [][]events.Name {
	t.Helper()
	s, out := finished(t, h, run)
	if out.Kind != events.OutcomeCompleted {
		t.Errorf("run %s ended %s, want completed", run, out.Kind)
	}
	for _, act := range s.Actions() {
		if act.State != aggregate.ActionSucceeded || act.Attempts != 1 {
			t.Errorf("run %s action %s: %s after %d attempts, want succeeded at the first", run, act.ID, act.State, act.Attempts)
		}
	}
	return messagesOf(t, h, run)
}
