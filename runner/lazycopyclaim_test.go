package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// unremovableClaimJS is the runner's real JetStream, except that once
// armed, the next claim create in weft_claims lands and loses its answer,
// the five creates after it fail (takeClaim's tries: the outcome stays
// unknown to its taker), and the six reads after that fail (the handed
// task cannot remove the claim: dropUnstarted keeps its token).
type unremovableClaimJS struct {
	jetstream.JetStream
	armed   atomic.Bool
	creates atomic.Int32 // creates since armed
	gets    atomic.Int32 // reads since armed
}

func (u *unremovableClaimJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := u.JetStream.KeyValue(ctx, bucket)
	if err != nil || bucket != api.ClaimsBucket {
		return kv, err
	}
	return &unremovableClaimKV{KeyValue: kv, u: u}, nil
}

func (u *unremovableClaimJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := u.JetStream.CreateKeyValue(ctx, cfg)
	if err != nil || cfg.Bucket != api.ClaimsBucket {
		return kv, err
	}
	return &unremovableClaimKV{KeyValue: kv, u: u}, nil
}

type unremovableClaimKV struct {
	jetstream.KeyValue
	u *unremovableClaimJS
}

var errClaimUnanswered = errors.Join(errors.New("the claims bucket did not answer"), nats.ErrTimeout)

func (k *unremovableClaimKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if !k.u.armed.Load() {
		return k.KeyValue.Create(ctx, key, value, opts...)
	}
	switch n := k.u.creates.Add(1); {
	case n == 1:
		if _, err := k.KeyValue.Create(ctx, key, value, opts...); err != nil {
			return 0, err
		}
		return 0, errClaimUnanswered
	case n <= 6:
		return 0, errClaimUnanswered
	}
	return k.KeyValue.Create(ctx, key, value, opts...)
}

func (k *unremovableClaimKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.u.armed.Load() && k.u.creates.Load() > 0 && k.u.gets.Add(1) <= 6 {
		return nil, errClaimUnanswered
	}
	return k.KeyValue.Get(ctx, key)
}

// TestSemantics8_ARunnersFallbackCopyNamesTheClaimItsHandedTaskCouldNotRemove: the
// runner's handed task's claim create landed unanswered and the claim
// could not be removed; the copy the runner publishes for it
// (copyFallback) names the claim's token in Weft-Unstarted-Claim, as a
// requeue does, so that its delivery in any worker — not only this one,
// which remembers the token — takes the claim over and runs the body
// once; the run completes at its first attempt (docs/semantics.md §8:
// not reported lost for a body that never started;
// docs/adr/0039-the-stream-copy-only-when-needed.md).
func TestSemantics8_ARunnersFallbackCopyNamesTheClaimItsHandedTaskCouldNotRemove(t *testing.T) {
	t.Parallel()
	const run = "unremovable"
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	js := &unremovableClaimJS{JetStream: h.srv.JS}
	nc := h.srv.Connect()
	r := h.runOn(nc, js, []*agent.Agent{a}, runner.WithLease(2*time.Second), runner.WithWorkerOptions(worker.WithAttemptCheck(func(context.Context, api.Task) (bool, error) { return true, nil })))
	warmHandOff(t, h, r)
	warm := b.starts.Load()
	copies := make(chan *nats.Msg, 16)
	sub, err := h.srv.Connect().ChanSubscribe(api.TaskSubjectPrefix+">", copies)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	js.armed.Store(true)
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h.startServed(c, api.StartRequest{Run: run, Agent: "desk", Input: "x"})
	for named := false; !named; {
		select {
		case msg := <-copies:
			var task api.Task
			if err := json.Unmarshal(msg.Data, &task); err != nil || task.Run != run {
				continue
			}
			if len(msg.Header.Values(api.HeaderUnstartedClaim)) == 0 {
				t.Fatalf("the copy of the handed task whose claim stayed names no unstarted claim: headers %v", msg.Header)
			}
			named = true
		case <-c.Done():
			t.Fatal("no copy of the handed task whose claim stayed within 60 s")
		}
	}
	h.waitStatus(run, aggregate.StatusFinished)
	completedAtFirstAttempts(t, h, run)
	if n := b.starts.Load() - warm; n != 1 {
		t.Errorf("%d body starts, want 1", n)
	}
}
