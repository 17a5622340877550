package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// unansweredClaims is a JetStream whose weft_claims bucket lands the first
// create and loses its answer, then answers no call at all: a bucket that
// stopped answering right after it took a claim. requeued is closed when
// the worker republishes a task (requeue).
type unansweredClaims struct {
	jetstream.JetStream
	requeued chan struct{}
	once     sync.Once
}

func (u *unansweredClaims) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := u.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != api.ClaimsBucket {
		return kv, err
	}
	return &unansweredKV{KeyValue: kv}, nil
}

func (u *unansweredClaims) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := u.JetStream.CreateKeyValue(ctx, cfg)
	if err != nil || cfg.Bucket != api.ClaimsBucket {
		return kv, err
	}
	return &unansweredKV{KeyValue: kv}, nil
}

func (u *unansweredClaims) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := u.JetStream.PublishMsg(ctx, m, opts...)
	if err == nil && strings.Contains(m.Header.Get(api.HeaderMsgID), "/requeued/") {
		u.once.Do(func() { close(u.requeued) })
	}
	return ack, err
}

type unansweredKV struct {
	jetstream.KeyValue
	creates atomic.Int32
}

var errUnanswered = errors.New("the claims bucket did not answer")

func (k *unansweredKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.creates.Add(1) == 1 {
		if _, err := k.KeyValue.Create(ctx, key, value, opts...); err != nil {
			return 0, err
		}
	}
	return 0, errUnanswered
}

func (k *unansweredKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) {
	return nil, errUnanswered
}

func (k *unansweredKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errUnanswered
}

func (k *unansweredKV) Delete(context.Context, string, ...jetstream.KVDeleteOpt) error {
	return errUnanswered
}

// TestSemantics5_AClaimTakenUnansweredByAWorkerThatNeverStartedTheBodyIsNotALoss
// (docs/semantics.md §5 and §8: an action is uncertain only when its attempt
// may have acted; docs/protocol/41-tasks.md rules 3 and 9): worker A's
// create of an attempt's claim lands but its answer is lost, and the bucket
// stops answering A, so A cannot tell that it holds the claim. A never
// starts the body and requeues the task. The claim it left is its own,
// unstarted: worker B, taking the requeued task, must run the body as a
// first delivery — not report the attempt worker_lost, which would replay
// or make uncertain an action whose body never started.
func TestSemantics5_AClaimTakenUnansweredByAWorkerThatNeverStartedTheBodyIsNotALoss(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	var starts atomic.Int32
	run := func(id string, js jetstream.JetStream, nc *nats.Conn) (stop func()) {
		w := worker.New(nc, js, worker.WithID(id), worker.WithReporter(rs.report),
			worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil }))
		w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
			starts.Add(1)
			return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			err := w.Run(ctx)
			if err != nil {
				t.Errorf("worker %s: %v", id, err)
			}
			done <- err
		}()
		var once sync.Once
		stop = func() { once.Do(func() { cancel(); <-done }) }
		t.Cleanup(stop)
		return stop
	}

	ncA := srv.Connect()
	jsA, err := jetstream.New(ncA)
	if err != nil {
		t.Fatal(err)
	}
	a := &unansweredClaims{JetStream: jsA, requeued: make(chan struct{})}
	stopA := run("a", a, ncA)
	(&crashHarness{t: t, srv: srv}).consumer()
	publish(t, srv.JS, echoTask("unanswered-1"))
	select {
	case <-a.requeued:
	case <-time.After(30 * time.Second):
		t.Fatal("worker A never requeued the task whose claim it could not confirm")
	}
	stopA()
	if n := starts.Load(); n != 0 {
		t.Fatalf("worker A started the body %d times without knowing it held the claim", n)
	}

	ncB := srv.Connect()
	jsB, err := jetstream.New(ncB)
	if err != nil {
		t.Fatal(err)
	}
	run("b", jsB, ncB)
	select {
	case <-rs.ch:
	case <-time.After(30 * time.Second):
		t.Fatal("worker B never reported the requeued task")
	}
	rs.mu.Lock()
	rep := rs.got[0]
	rs.mu.Unlock()
	if rep.Worker != "b" || rep.Outcome != api.OutcomeOutput {
		t.Fatalf("report %+v, want worker b's output: the body never started before, so it runs now", rep)
	}
	if n := starts.Load(); n != 1 {
		t.Fatalf("%d body starts, want 1", n)
	}
}

// TestSemantics5_ATakenOverClaimNamesItsNewHolder (docs/semantics.md §3: an
// attempt's body starts at most once): a delivery that takes over a claim
// named unstarted by its task writes its own token before the body starts,
// so that a redelivery of the same copy (its worker vanished mid-body) finds
// a token the copy does not name and reports the attempt lost instead of
// starting the body again; and a claim holding a token the task does not
// name is never taken over.
func TestSemantics5_ATakenOverClaimNamesItsNewHolder(t *testing.T) {
	t.Parallel()
	h := newCrashHarness(t)
	ctx := context.Background()
	kv := claimsKV(t, h)
	publishWith := func(task api.Task, unstarted string) {
		task.Schema, task.Agent, task.Version = 1, "a", "1"
		b, _ := json.Marshal(task)
		m := nats.NewMsg(queue("echo").Subject())
		m.Data = b
		m.Header.Set(api.HeaderUnstartedClaim, unstarted)
		if _, err := h.srv.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(run, token string) string {
		task := echoTask(run)
		key := api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation)
		b, _ := json.Marshal(api.Claim{Schema: 1, Worker: "gone", Token: token})
		if _, err := kv.Create(ctx, key, b); err != nil {
			t.Fatal(err)
		}
		return key
	}

	// A claim some body may have started under: the copy does not name it.
	claim("started-1", "body-ran-under-this")
	h.worker("b")
	h.consumer()
	publishWith(echoTask("started-1"), "some-other-unstarted-token")
	select {
	case <-h.rs.ch:
	case <-h.started:
		t.Fatal("the body started under a claim the task does not name as unstarted")
	case <-time.After(30 * time.Second):
		t.Fatal("no report")
	}
	h.rs.mu.Lock()
	if rep := h.rs.got[0]; rep.Outcome != api.OutcomeLost || rep.Cause != "worker_lost" {
		t.Errorf("report %+v, want lost worker_lost", rep)
	}
	h.rs.mu.Unlock()

	// A claim the copy names unstarted: taken over, under a new token.
	key := claim("unstarted-1", "never-started")
	publishWith(echoTask("unstarted-1"), "never-started")
	select {
	case <-h.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the body of a claim named unstarted never started")
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var c api.Claim
	if err := json.Unmarshal(e.Value(), &c); err != nil {
		t.Fatal(err)
	}
	if c.Token == "never-started" || c.Token == "" || c.Worker != "b" {
		t.Fatalf("claim %+v while the body runs: want worker b's own token, not the one the copy names", c)
	}
	close(h.release)
}

// TestSemantics8_ADeliveryWhoseClaimWasClosedNeitherStartsNorReports
// (docs/semantics.md §8, closing an attempt): the runtime closed the attempt's
// claim before any worker claimed it; a delivery of its task finds the
// closed claim, never starts the body and reports nothing (the close is
// the attempt's end, recorded by whoever closed it), and the task is acked.
func TestSemantics8_ADeliveryWhoseClaimWasClosedNeitherStartsNorReports(t *testing.T) {
	t.Parallel()
	h := newCrashHarness(t)
	ctx := context.Background()
	kv := claimsKV(t, h)
	task := echoTask("closed-1")
	b, _ := json.Marshal(api.Claim{Schema: 1, Closed: &api.ClaimClose{By: "runner-1", Why: "cancelled", At: time.Now().UTC()}})
	if _, err := kv.Create(ctx, api.ClaimKey(task.Run, task.Action, task.Attempt, task.Incarnation), b); err != nil {
		t.Fatal(err)
	}
	h.worker("b")
	h.consumer()
	publish(t, h.srv.JS, task)
	h.waitEmpty()
	select {
	case <-h.started:
		t.Fatal("the body of an attempt whose claim was closed started")
	case <-h.rs.ch:
		h.rs.mu.Lock()
		defer h.rs.mu.Unlock()
		t.Fatalf("a closed attempt was reported: %+v", h.rs.got[0])
	default:
	}
}

// claimsKV returns h's weft_claims bucket, created as the worker creates
// it when nobody provisioned it.
func claimsKV(t *testing.T, h *crashHarness) jetstream.KeyValue {
	t.Helper()
	ctx := context.Background()
	kv, err := h.srv.JS.KeyValue(ctx, api.ClaimsBucket)
	if err != nil {
		kv, err = h.srv.JS.CreateKeyValue(ctx, worker.ClaimsConfig())
	}
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
