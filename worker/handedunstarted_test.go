package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// lostCreateClaims is a JetStream whose weft_claims bucket lands the first
// create and loses its answer, then fails the next five (takeClaim's tries:
// the claim's outcome stays unknown to its taker), and fails the first
// kv.failGets reads; every other call is answered.
type lostCreateClaims struct {
	jetstream.JetStream
	kv *lostCreateKV
}

func (l *lostCreateClaims) wrap(kv jetstream.KeyValue, err error, bucket string) (jetstream.KeyValue, error) {
	if err != nil || bucket != api.ClaimsBucket {
		return kv, err
	}
	l.kv.KeyValue = kv
	return l.kv, nil
}

func (l *lostCreateClaims) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := l.JetStream.KeyValue(ctx, bucket)
	return l.wrap(kv, err, bucket)
}

func (l *lostCreateClaims) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := l.JetStream.CreateKeyValue(ctx, cfg)
	return l.wrap(kv, err, cfg.Bucket)
}

type lostCreateKV struct {
	jetstream.KeyValue
	failGets      int32
	creates, gets atomic.Int32
}

func (k *lostCreateKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	switch n := k.creates.Add(1); {
	case n == 1:
		if _, err := k.KeyValue.Create(ctx, key, value, opts...); err != nil {
			return 0, err
		}
		return 0, errUnanswered
	case n <= 6:
		return 0, errUnanswered
	}
	return k.KeyValue.Create(ctx, key, value, opts...)
}

func (k *lostCreateKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.gets.Add(1) <= k.failGets {
		return nil, errUnanswered
	}
	return k.KeyValue.Get(ctx, key)
}

// TestSemantics8_AHandedTaskWhoseClaimOutcomeIsUnknownLeavesNoClaimForItsCopyToReportLost:
// a handed task whose claim create landed unanswered (claimUnknown) never
// starts the body; it removes the claim it may have taken (read, deleted
// at its revision when it holds its own token) — or, when the bucket does
// not answer the read either, its stream copy's delivery in this worker
// takes that claim over by its token, as a requeued task's does
// (api.HeaderUnstartedClaim). Either way the copy runs the body once, as a
// first delivery, and reports its output: the attempt is not reported
// worker_lost — uncertain, for a non-replayable tool — for a body that
// provably never started (docs/semantics.md §8; docs/adr/0027).
func TestSemantics8_AHandedTaskWhoseClaimOutcomeIsUnknownLeavesNoClaimForItsCopyToReportLost(t *testing.T) {
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
			var starts atomic.Int64
			w, rs, _ := handedWorker(t, nc, js, &starts, worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
			task := handedTask("1/unknown")
			handOff(t, w, task)
			// The copy is published once the handed task tried its claim:
			// it is the first to claim, as a runner's handed task is.
			deadline := time.Now().Add(20 * time.Second)
			for kv.creates.Load() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the handed task tried no claim within 20 s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			publish(t, realJS, task)
			got := firstReport(t, rs)
			if got.Outcome != api.OutcomeOutput {
				t.Errorf("reported %s (%s: %s), want output: the body never started before the copy's delivery", got.Outcome, got.Cause, got.Evidence)
			}
			if n := starts.Load(); n != 1 {
				t.Errorf("the body started %d times, want 1", n)
			}
		})
	}
}

// firstReport waits up to 30 s for rs's first report and returns it.
func firstReport(t *testing.T, rs *reports) api.Report {
	t.Helper()
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no report within 30 s")
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.got[0]
}

// TestSemantics8_AHandedTaskTakesOverTheClaimAnEarlierHandOffOfItsAttemptLeft:
// a handed task whose claim create landed unanswered and whose claim could
// not be removed (the bucket did not answer its reads) keeps the claim's
// token in the worker; a later hand-off of the same attempt in this worker
// — the attempt dispatched again — takes that claim over by its token, as
// a requeued delivery does (api.HeaderUnstartedClaim), and runs the body
// once, reporting its output: a claim no body started under does not keep
// the attempt from running (docs/semantics.md §8: pending work is retried,
// never dropped; docs/adr/0031-claim-with-the-fence.md).
func TestSemantics8_AHandedTaskTakesOverTheClaimAnEarlierHandOffOfItsAttemptLeft(t *testing.T) {
	t.Parallel()
	nc, realJS := startServer(t)
	kv := &lostCreateKV{failGets: 6}
	js := &lostCreateClaims{JetStream: realJS, kv: kv}
	var starts atomic.Int64
	w, rs, _ := handedWorker(t, nc, js, &starts)
	task := handedTask("1/orphan")
	handOff(t, w, task)
	deadline := time.Now().Add(30 * time.Second)
	for held, _ := w.Holds(task.Claim); held || kv.gets.Load() < 6; held, _ = w.Holds(task.Claim) {
		if time.Now().After(deadline) {
			t.Fatalf("the first hand-off still holds the attempt after 30 s (%d creates, %d reads)", kv.creates.Load(), kv.gets.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := starts.Load(); n != 0 {
		t.Fatalf("the body started %d times under a claim whose create was not answered", n)
	}
	// Dispatched again: handed off once the first task let the attempt go.
	handOff(t, w, task)
	got := firstReport(t, rs)
	if got.Outcome != api.OutcomeOutput {
		t.Errorf("reported %s (%s: %s), want output: the claim left was taken over by its token", got.Outcome, got.Cause, got.Evidence)
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("the body started %d times, want 1", n)
	}
}

// TestSemantics8_AHandedTaskIsHeldBeforeHandOffReturns (docs/semantics.md
// §8, docs/adr/0027: the runner refuses another worker's loss notice of an
// attempt its own worker holds): the attempt a task is handed off for is
// held as soon as HandOff returns, not once the task's goroutine runs.
// Before, a loss notice applied in that gap recorded the attempt lost while
// the handed task went on, took the claim over by an orphan token and
// started its body — for a replayable tool, beside the replay.
func TestSemantics8_AHandedTaskIsHeldBeforeHandOffReturns(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	// Bodies that do not end while the test looks: the hold can only be
	// the hand-off's own, never one already left.
	release := make(chan struct{})
	w := worker.New(nc, js, worker.WithID("w-1"), worker.WithReporter(func(context.Context, api.Report) error { return nil }))
	w.Handle(queue("hold"), func(ctx context.Context, _ api.Task, _ worker.Settler) worker.Result {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`{}`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { close(release); cancel(); <-done }()
	for i := range 20 {
		task := handedTask(fmt.Sprintf("1/held-%d", i))
		task.Tool = "hold"
		handOff(t, w, task)
		if held, _ := w.Holds(task.Claim); !held {
			t.Fatalf("task %d: the attempt is not held when HandOff returned", i)
		}
	}
}
