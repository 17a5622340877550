package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// prepare prepares task in w once its Run set up (PrepareHandOff takes no
// task before: it answers nil).
func prepare(t *testing.T, w *worker.Worker, task api.Task) *worker.Prepared {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p := w.PrepareHandOff(task); p != nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker prepared no handed task within 20 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// storedClaim waits until key's claim is stored in claims.
func storedClaim(t *testing.T, claims jetstream.KeyValue, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wt, err := claims.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = wt.Stop() }()
	for {
		select {
		case e := <-wt.Updates():
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				return
			}
		case <-ctx.Done():
			t.Fatalf("claim %s not stored within 20 s", key)
		}
	}
}

// TestSemantics7_APreparedHandedTaskClaimsAtOnceAndStartsItsBodyOnlyAtGo:
// a task prepared while its runner appends its fence
// (worker.PrepareHandOff, docs/adr/0031-claim-with-the-fence.md) creates
// its claim at once, and its body starts only once the runner gives it
// its go — the fence is in the log (docs/semantics.md §7) — with the task
// as dispatched: one body start, its output reported.
func TestSemantics7_APreparedHandedTaskClaimsAtOnceAndStartsItsBodyOnlyAtGo(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	ctx := context.Background()
	claims, err := js.CreateKeyValue(ctx, worker.ClaimsConfig())
	if err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int64
	w, rs, stop := handedWorker(t, nc, js, &starts)
	task := handedTask("1/prepared")
	p := prepare(t, w, api.Task{Schema: task.Schema, Run: task.Run, Action: task.Action, Agent: task.Agent, Version: task.Version, Tool: task.Tool,
		Attempt: task.Attempt, Incarnation: task.Incarnation, Claim: task.Claim, TimeoutMS: task.TimeoutMS})
	storedClaim(t, claims, task.Claim)
	if n := starts.Load(); n != 0 {
		t.Fatalf("the body started %d times before its go (the fence not recorded yet)", n)
	}
	if held, claimed := w.Holds(task.Claim); !held {
		t.Errorf("the prepared attempt is not held (held %v, claimed %v): another worker's notice would be recorded", held, claimed)
	}
	task.FenceVersion = 7
	if !p.Go(task, nats.Header{}, nil) {
		t.Fatal("the prepared task refused its go")
	}
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no report after 30 s")
	}
	stop()
	if starts.Load() != 1 || len(rs.got) != 1 || rs.got[0].Outcome != api.OutcomeOutput || string(rs.got[0].Content) != `"hi"` {
		t.Fatalf("starts %d, reports %+v: want one start and its output (the arguments given at go)", starts.Load(), rs.got)
	}
	if w.HandedOff() != 1 {
		t.Errorf("handed off %d tasks, want 1", w.HandedOff())
	}
}

// TestSemantics8_AFenceNotRecordedLeavesNoClaimForItsAttemptToTripOver:
// a prepared task whose fence was not recorded (its append conflicted or
// was refused) is aborted: it never starts its body and removes the claim
// it took, so that nothing finds the attempt claimed — not a close, which
// would count a body that never started as one that may have
// (docs/adr/0023-closing-attempts.md), nor the same attempt fenced again
// under the same key (a pass after a conflict, the reply recorded again),
// whose hand-off then runs the body once.
func TestSemantics8_AFenceNotRecordedLeavesNoClaimForItsAttemptToTripOver(t *testing.T) {
	t.Parallel()
	nc, js := startServer(t)
	ctx := context.Background()
	claims, err := js.CreateKeyValue(ctx, worker.ClaimsConfig())
	if err != nil {
		t.Fatal(err)
	}
	var starts atomic.Int64
	w, rs, stop := handedWorker(t, nc, js, &starts)
	task := handedTask("1/aborted")
	p := prepare(t, w, task)
	storedClaim(t, claims, task.Claim)
	select {
	case <-p.Abort():
	case <-time.After(30 * time.Second):
		t.Fatal("the aborted task did not end within 30 s")
	}
	if _, err := claims.Get(ctx, task.Claim); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the claim of an attempt whose fence was not recorded: %v, want it removed", err)
	}
	if p.Go(task, nats.Header{}, nil) {
		t.Error("an aborted task took its go")
	}
	if held, _ := w.Holds(task.Claim); held {
		t.Error("the aborted attempt is still held")
	}
	// The same attempt fenced again later, under the same key.
	handOff(t, w, task)
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no report after 30 s")
	}
	stop()
	if starts.Load() != 1 || len(rs.got) != 1 || rs.got[0].Outcome != api.OutcomeOutput {
		t.Fatalf("starts %d, reports %+v: want the later hand-off to start the body once and report its output", starts.Load(), rs.got)
	}
}

// heldCreateClaims is a JetStream whose weft_claims bucket holds every
// claim create until release is closed, telling entered as each begins.
type heldCreateClaims struct {
	jetstream.JetStream
	entered, release chan struct{}
}

func (c *heldCreateClaims) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := c.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != api.ClaimsBucket {
		return kv, err
	}
	return &heldCreateKV{KeyValue: kv, c: c}, nil
}

type heldCreateKV struct {
	jetstream.KeyValue
	c *heldCreateClaims
}

func (k *heldCreateKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	k.c.entered <- struct{}{}
	<-k.c.release
	return k.KeyValue.Create(ctx, key, value, opts...)
}

// TestSemantics8_APreparedTaskOfAWorkerThatStopsRefusesItsGo: a prepared
// task whose worker began stopping before its go — its claim create still
// in flight — refuses the go, as HandOff refuses a task then
// (docs/adr/0031-claim-with-the-fence.md): the runner publishes its copy
// without naming this worker, no body starts, and the claim the task took
// is removed, so that the copy's delivery elsewhere runs the attempt as a
// first delivery (docs/semantics.md §8), not worker_lost.
func TestSemantics8_APreparedTaskOfAWorkerThatStopsRefusesItsGo(t *testing.T) {
	t.Parallel()
	nc, realJS := startServer(t)
	ctx := context.Background()
	claims, err := realJS.CreateKeyValue(ctx, worker.ClaimsConfig())
	if err != nil {
		t.Fatal(err)
	}
	js := &heldCreateClaims{JetStream: realJS, entered: make(chan struct{}, 8), release: make(chan struct{})}
	var starts atomic.Int64
	w, _, stop := handedWorker(t, nc, js, &starts)
	task := handedTask("1/stopping")
	p := prepare(t, w, task)
	select {
	case <-js.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the prepared task sent no claim create within 30 s")
	}
	w.Abandon() // the embedding process's drain window ended
	went := p.Go(task, nats.Header{}, nil)
	close(js.release)
	select {
	case <-p.Abort():
	case <-time.After(30 * time.Second):
		t.Fatal("the prepared task did not end within 30 s")
	}
	stop()
	if went {
		t.Error("a prepared task took its go after its worker began stopping")
	}
	if n, h := starts.Load(), w.HandedOff(); n != 0 || h != 0 {
		t.Errorf("%d body starts, %d tasks counted handed off; want 0 and 0", n, h)
	}
	if _, err := claims.Get(ctx, task.Claim); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the claim of the refused task: %v, want it removed", err)
	}
}
