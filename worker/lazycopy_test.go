package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// handOffLazy hands task to w as a runner does by default: no stream copy
// is published with it; the handed task's Fallback publishes it (counted
// in copies), as the runner's does
// (docs/adr/0039-the-stream-copy-only-when-needed.md).
func handOffLazy(t *testing.T, w *worker.Worker, js jetstream.JetStream, task api.Task, copies *atomic.Int64) {
	t.Helper()
	fallback := func(_ context.Context, unstarted string) {
		copies.Add(1)
		publishCopy(t, js, task, unstarted)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !w.HandOff(task, nats.Header{}, fallback) {
		if time.Now().After(deadline) {
			t.Fatal("the worker took no handed task within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// publishCopy publishes task's stream copy as the runner's Fallback does:
// naming unstarted, when not empty, as api.HeaderUnstartedClaim.
func publishCopy(t *testing.T, js jetstream.JetStream, task api.Task, unstarted string) {
	t.Helper()
	b, _ := json.Marshal(task)
	msg := nats.NewMsg(api.Queue{Agent: task.Agent, Version: task.Version, Tool: task.Tool}.Subject())
	msg.Data = b
	if unstarted != "" {
		msg.Header.Set(api.HeaderUnstartedClaim, unstarted)
	}
	if _, err := js.PublishMsg(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
}

// TestSemantics8_AHandedTaskThatRunsToItsReportPublishesNoCopy: a handed
// task whose body runs and whose report is answered never calls its
// Fallback: no stream copy is written for it.
func TestSemantics8_AHandedTaskThatRunsToItsReportPublishesNoCopy(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	var starts, copies atomic.Int64
	w, rs, stop := handedWorker(t, nc, js, &starts)
	handOffLazy(t, w, js, handedTask("1/normal"), &copies)
	if got := firstReport(t, rs); got.Outcome != api.OutcomeOutput {
		t.Errorf("reported %s, want output", got.Outcome)
	}
	stop()
	if n := copies.Load(); n != 0 {
		t.Errorf("%d stream copies published for a handed task that reported, want 0", n)
	}
	if n := w.HandedFallbacks(); n != 0 {
		t.Errorf("HandedFallbacks = %d, want 0", n)
	}
}

// TestSemantics8_AHandedTaskWhoseClaimOutcomeIsUnknownPublishesItsCopy:
// the claim's create has no answer (it landed); the handed task removes
// the claim, or keeps its token, and then publishes the copy, whose
// delivery runs the body exactly once, as a first delivery
// (docs/semantics.md §8: never dropped; §5: no body twice).
func TestSemantics8_AHandedTaskWhoseClaimOutcomeIsUnknownPublishesItsCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failGets int32
	}{
		{"the claim is removed", 0},
		{"the claim cannot be read: the copy takes it over", 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, realJS := startServer(t)
			kv := &lostCreateKV{failGets: tc.failGets}
			js := &lostCreateClaims{JetStream: realJS, kv: kv}
			var starts, copies atomic.Int64
			w, rs, _ := handedWorker(t, nc, js, &starts, worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
			handOffLazy(t, w, realJS, handedTask("1/unknown"), &copies)
			got := firstReport(t, rs)
			if got.Outcome != api.OutcomeOutput {
				t.Errorf("reported %s (%s: %s), want output", got.Outcome, got.Cause, got.Evidence)
			}
			if n := starts.Load(); n != 1 {
				t.Errorf("the body started %d times, want 1", n)
			}
			if n := copies.Load(); n != 1 {
				t.Errorf("%d copies published, want 1", n)
			}
		})
	}
}

// TestSemantics8_AHandedTaskOfAWorkerThatStopsPublishesItsCopyBeforeRunReturns:
// the worker stops before the handed task's body started (a graceful
// drain); the task removes its claim and publishes the copy before the
// worker's Run returns — so before its runner releases its partitions — and a
// worker started afterwards runs the body once from the copy.
func TestSemantics8_AHandedTaskOfAWorkerThatStopsPublishesItsCopyBeforeRunReturns(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	stoppedCheck := func(ctx context.Context, _ api.Task) (bool, error) {
		<-ctx.Done()
		return true, nil
	}
	var firstStarts, secondStarts, copies atomic.Int64
	w1, _, stop1 := handedWorker(t, nc, js, &firstStarts, worker.WithAttemptCheck(stoppedCheck))
	handOffLazy(t, w1, js, handedTask("1/stopped"), &copies)
	stop1()
	if n := copies.Load(); n != 1 {
		t.Fatalf("%d copies published when the stopped worker's Run returned, want 1", n)
	}
	_, rs2, _ := handedWorker(t, nc, js, &secondStarts, worker.WithID("w-2"), worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	if got := firstReport(t, rs2); got.Outcome != api.OutcomeOutput {
		t.Errorf("the copy's delivery reported %s (%s: %s), want output", got.Outcome, got.Cause, got.Evidence)
	}
	if n := firstStarts.Load() + secondStarts.Load(); n != 1 {
		t.Errorf("the body started %d times, want 1", n)
	}
}

// TestSemantics8_AHandedTaskPastItsDeadlineBeforeTheClaimPublishesItsCopy:
// the deadline passed before the handed task claimed: it starts nothing
// and publishes the copy, whose delivery reports the attempt timed_out.
func TestSemantics8_AHandedTaskPastItsDeadlineBeforeTheClaimPublishesItsCopy(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	var starts, copies atomic.Int64
	w, rs, _ := handedWorker(t, nc, js, &starts)
	task := handedTask("1/late")
	past := time.Now().Add(-time.Minute)
	task.Deadline = &past
	handOffLazy(t, w, js, task, &copies)
	got := firstReport(t, rs)
	if got.Outcome != api.OutcomeLost || got.Cause != "timed_out" {
		t.Errorf("reported %s (%s), want lost timed_out", got.Outcome, got.Cause)
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("the body started %d times, want 0", n)
	}
	if n := copies.Load(); n != 1 {
		t.Errorf("%d copies published, want 1", n)
	}
}

// TestSemantics8_AHandedTaskThatFindsAVanishedWorkersClaimPublishesItsCopy:
// the attempt's claim is held by a worker that vanished; the handed task
// does nothing more than publish the copy, whose delivery reports the
// attempt lost (worker_lost): never left running with nobody to report it.
func TestSemantics8_AHandedTaskThatFindsAVanishedWorkersClaimPublishesItsCopy(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(c, worker.ClaimsConfig())
	if err != nil {
		t.Fatal(err)
	}
	task := handedTask("1/vanished")
	v, _ := json.Marshal(api.Claim{Schema: 1, Worker: "vanished", Token: "feed", Claimed: time.Now().UTC()})
	if _, err := kv.Create(c, task.Claim, v); err != nil {
		t.Fatal(err)
	}
	var starts, copies atomic.Int64
	w, rs, _ := handedWorker(t, nc, js, &starts, worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	handOffLazy(t, w, js, task, &copies)
	got := firstReport(t, rs)
	if got.Outcome != api.OutcomeLost || got.Cause != "worker_lost" {
		t.Errorf("reported %s (%s), want lost worker_lost", got.Outcome, got.Cause)
	}
	if n := starts.Load(); n != 0 {
		t.Errorf("the body started %d times, want 0", n)
	}
	if n := copies.Load(); n != 1 {
		t.Errorf("%d copies published, want 1", n)
	}
}

// TestSemantics8_AHandOffOfAnAttemptAnAbortedPreparationHoldsIsNotTaken:
// a preparation of the attempt was aborted (its fence's append had no
// answer) while its claim's create was in flight; the read-back found the
// fence recorded and the runner dispatches the attempt again, handing it
// off with a fallback. The aborted task still holds the attempt and ends
// with no body, no report and no copy, so HandOff must not take the task:
// the runner then publishes the copy itself, whose delivery runs the body
// once, as a first delivery (docs/semantics.md §8: never dropped; §5: no
// body twice). A HandOff that answered "taken" left the attempt with
// nothing to run it.
func TestSemantics8_AHandOffOfAnAttemptAnAbortedPreparationHoldsIsNotTaken(t *testing.T) {
	t.Parallel()
	nc, realJS := startServer(t)
	ctx := context.Background()
	claims, err := realJS.CreateKeyValue(ctx, worker.ClaimsConfig())
	if err != nil {
		t.Fatal(err)
	}
	js := &heldCreateClaims{JetStream: realJS, entered: make(chan struct{}, 8), release: make(chan struct{})}
	var starts, otherStarts, copies atomic.Int64
	w, _, stop := handedWorker(t, nc, js, &starts)
	task := handedTask("1/aborted")
	p := prepare(t, w, task)
	select {
	case <-js.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the prepared task sent no claim create within 30 s")
	}
	ended := p.Abort()
	took := w.HandOff(task, nats.Header{}, func(context.Context, string) { copies.Add(1) })
	close(js.release)
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("the aborted task did not end within 60 s")
	}
	if took {
		t.Fatal("HandOff took a task whose attempt an aborted preparation held: nothing runs the attempt (no body, no report, no copy)")
	}
	stop()
	if n := starts.Load(); n != 0 {
		t.Errorf("the body started %d times in the worker of the aborted preparation, want 0", n)
	}
	if n := copies.Load(); n != 0 {
		t.Errorf("the refused hand-off's fallback was called %d times, want 0 (the runner publishes the copy)", n)
	}
	if _, err := claims.Get(ctx, task.Claim); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the aborted task's claim is still there (%v): the copy's delivery would report the attempt lost", err)
	}
	// The copy the runner publishes for the refused hand-off.
	_, rs2, _ := handedWorker(t, nc, realJS, &otherStarts, worker.WithID("w-2"), worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
	publish(t, realJS, task)
	if got := firstReport(t, rs2); got.Outcome != api.OutcomeOutput {
		t.Errorf("the copy's delivery reported %s (%s: %s), want output", got.Outcome, got.Cause, got.Evidence)
	}
	if n := otherStarts.Load(); n != 1 {
		t.Errorf("the body started %d times from the copy, want 1", n)
	}
}

// TestSemantics8_AHandedTasksCopyNamesTheClaimItCouldNotRemove: a handed
// task whose claim create landed unanswered and whose claim could not be
// removed (the bucket answered none of its reads) gives its Fallback that
// claim's token; the copy, published naming it (api.HeaderUnstartedClaim)
// as the runner publishes it, is delivered to another worker, which takes
// the claim over and runs the body once, reporting its output — not
// worker_lost, uncertain for a body that provably never started
// (docs/semantics.md §8; docs/adr/0039).
func TestSemantics8_AHandedTasksCopyNamesTheClaimItCouldNotRemove(t *testing.T) {
	t.Parallel()
	nc, realJS := startServer(t)
	kv := &lostCreateKV{failGets: 6}
	js := &lostCreateClaims{JetStream: realJS, kv: kv}
	always := worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil })
	var starts, otherStarts atomic.Int64
	w1, _, stop1 := handedWorker(t, nc, js, &starts, always)
	task := handedTask("1/kept")
	tokens := make(chan string, 2)
	deadline := time.Now().Add(20 * time.Second)
	for !w1.HandOff(task, nats.Header{}, func(_ context.Context, unstarted string) { tokens <- unstarted }) {
		if time.Now().After(deadline) {
			t.Fatal("the worker took no handed task within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var tok string
	select {
	case tok = <-tokens:
	case <-time.After(90 * time.Second):
		t.Fatal("the handed task called no Fallback within 90 s")
	}
	if tok == "" {
		t.Fatal("the Fallback was given no token of the claim the handed task could not remove")
	}
	// The copy goes to another worker: this one, which remembers the
	// token, is gone.
	stop1()
	_, rs2, _ := handedWorker(t, nc, realJS, &otherStarts, worker.WithID("w-2"), always)
	publishCopy(t, realJS, task, tok)
	if got := firstReport(t, rs2); got.Outcome != api.OutcomeOutput {
		t.Errorf("the copy's delivery in another worker reported %s (%s: %s), want output", got.Outcome, got.Cause, got.Evidence)
	}
	if n := starts.Load() + otherStarts.Load(); n != 1 {
		t.Errorf("the body started %d times, want 1", n)
	}
}

// TestSemantics8_AHandedTaskThatCannotRunNeedsNoCopyWhenItsAttemptIsOver:
// a handed task whose attempt is over before its start — its claim closed
// by a runner (docs/adr/0023-closing-attempts.md: the close records the
// attempt's end), or no longer current by the embedder's check — starts
// no body, reports nothing and publishes no copy: a delivery of one would
// only ack it (docs/semantics.md §5: no body under a closed claim;
// docs/adr/0039).
func TestSemantics8_AHandedTaskThatCannotRunNeedsNoCopyWhenItsAttemptIsOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		closed  bool
		current bool
	}{
		{"the claim is closed", true, true},
		{"the attempt is not current", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, js := startServer(t)
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			kv, err := js.CreateKeyValue(c, worker.ClaimsConfig())
			if err != nil {
				t.Fatal(err)
			}
			task := handedTask("1/over")
			if tc.closed {
				b, _ := json.Marshal(api.Claim{Schema: 1, Closed: &api.ClaimClose{By: "runner-1", Why: "cancelled", At: time.Now().UTC()}})
				if _, err := kv.Create(c, task.Claim, b); err != nil {
					t.Fatal(err)
				}
			}
			current := tc.current
			var starts, copies atomic.Int64
			w, rs, stop := handedWorker(t, nc, js, &starts, worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return current, nil }))
			handOffLazy(t, w, js, task, &copies)
			stop()
			if n := starts.Load(); n != 0 {
				t.Errorf("the body started %d times, want 0", n)
			}
			if len(rs.got) != 0 {
				t.Errorf("reports %+v, want none", rs.got)
			}
			if n := copies.Load(); n != 0 {
				t.Errorf("%d copies published for an attempt that is over, want 0", n)
			}
		})
	}
}

// TestSemantics8_AHandedTaskWhoseReportIsNotDeliveredPublishesItsCopy: a
// handed task's body ran — or its deadline passed after its claim and
// before the start, reported timed_out — but no runner answers its report
// (runner_busy, retryable) before its worker stops. The task saves the
// report with the attempt's claim and, once it ends, publishes the copy —
// one — whose delivery in another worker finds the claim and delivers the
// saved report: the body is not started again and the attempt's outcome is
// not lost (docs/semantics.md §7: at most one start; §8: never dropped).
func TestSemantics8_AHandedTaskWhoseReportIsNotDeliveredPublishesItsCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		late         bool
		outcome      string
		cause        string
		handedStarts int64
	}{
		{"the body ran", false, api.OutcomeOutput, "", 1},
		{"the deadline passed after the claim", true, api.OutcomeLost, "timed_out", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, js := startServer(t)
			c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			kv, err := js.CreateKeyValue(c, worker.ClaimsConfig())
			if err != nil {
				t.Fatal(err)
			}
			busy := func(context.Context, api.Report) error {
				return &weft.Error{Code: weft.CodeRunnerBusy, Message: "no runner answers"}
			}
			task := handedTask("1/unreported")
			var checks atomic.Int64
			check := func(context.Context, api.Task) (bool, error) {
				// The handed task's check after its claim (its second)
				// returns once the deadline passed.
				if tc.late && checks.Add(1) == 2 {
					for time.Now().Before(*task.Deadline) {
						time.Sleep(10 * time.Millisecond)
					}
				}
				return true, nil
			}
			if tc.late {
				d := time.Now().Add(2 * time.Second)
				task.Deadline = &d
			}
			var starts, otherStarts, copies atomic.Int64
			w1, _, stop1 := handedWorker(t, nc, js, &starts, worker.WithAttemptCheck(check), worker.WithReporter(busy))
			handOffLazy(t, w1, js, task, &copies)
			// The report is saved with the claim once its first try failed.
			wt, err := kv.Watch(c, task.Claim)
			if err != nil {
				t.Fatal(err)
			}
			for saved := false; !saved; {
				select {
				case e := <-wt.Updates():
					if e != nil && e.Operation() == jetstream.KeyValuePut {
						var cl api.Claim
						_ = json.Unmarshal(e.Value(), &cl)
						saved = cl.Report != nil
					}
				case <-c.Done():
					t.Fatal("the undelivered report was not saved with the claim within 60 s")
				}
			}
			_ = wt.Stop()
			stop1()
			if n := copies.Load(); n != 1 {
				t.Fatalf("%d copies published once the worker stopped, want 1", n)
			}
			_, rs2, _ := handedWorker(t, nc, js, &otherStarts, worker.WithID("w-2"), worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
			got := firstReport(t, rs2)
			if got.Outcome != tc.outcome || got.Cause != tc.cause {
				t.Errorf("the copy's delivery reported %s (%s: %s), want the saved %s %s", got.Outcome, got.Cause, got.Evidence, tc.outcome, tc.cause)
			}
			if n, m := starts.Load(), otherStarts.Load(); n != tc.handedStarts || m != 0 {
				t.Errorf("the body started %d times in the handed worker and %d from the copy, want %d and 0", n, m, tc.handedStarts)
			}
		})
	}
}
