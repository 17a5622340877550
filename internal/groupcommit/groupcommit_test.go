package groupcommit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/internal/groupcommit"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/provision"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// publishRound publishes msgs at once through p and returns each outcome.
func publishRound(t *testing.T, p *groupcommit.Publisher, msgs []*nats.Msg) ([]*jetstream.PubAck, []error) {
	t.Helper()
	ctx := ctxT(t)
	acks, errs := make([]*jetstream.PubAck, len(msgs)), make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, m := range msgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acks[i], errs[i] = p.Publish(ctx, m)
		}()
	}
	wg.Wait()
	return acks, errs
}

// claimCreate is the message jetstream.KeyValue.Create sends for key in
// bucket: create-only (expected last subject sequence 0), with a TTL.
func claimCreate(bucket, key, value string) *nats.Msg {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Data = []byte(value)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	m.Header.Set(jetstream.MsgTTLHeader, "1h")
	return m
}

// docs/semantics.md §5 ("A worker then takes the attempt's claim before it
// starts the body"), docs/adr/0010-attempt-claims.md,
// docs/adr/0032-fewer-writes-per-run.md: claim creates of many attempts
// sent as one atomic batch stay create-only — a key that exists is
// refused, its value kept — and that one refusal fails no other attempt's
// claim: the refused batch is sent again message by message, the others
// land. Each create's acknowledgement is its key's revision.
func TestSemantics5_GroupedClaimCreatesStayCreateOnly(t *testing.T) {
	const n = 20
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	ctx := ctxT(t)
	kvAsset := provision.KV(jetstream.KeyValueConfig{Bucket: "claims", History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: time.Minute}).WithAtomicPublish()
	if err := provision.EnsureOnly(ctx, s.JS, []provision.Asset{kvAsset}); err != nil {
		t.Fatal(err)
	}
	kv, err := s.JS.KeyValue(ctx, "claims")
	if err != nil {
		t.Fatal(err)
	}
	p := groupcommit.New(s.JS, nil)
	p.SetTest(n, 0)
	round := func(r int) []*nats.Msg {
		var msgs []*nats.Msg
		for i := range n {
			msgs = append(msgs, claimCreate("claims", fmt.Sprintf("run%d.a.%d.1", i, r), fmt.Sprintf("token-%d-%d", i, r)))
		}
		return msgs
	}

	// All new: one batch of n, each create its key's revision.
	st0 := groupcommit.Read()
	acks, errs := publishRound(t, p, round(1))
	st1 := groupcommit.Read()
	if st1.Batches-st0.Batches != 1 || st1.Batched-st0.Batched != n || st1.Retried != st0.Retried {
		t.Fatalf("commit stats %+v → %+v: want one batch of %d", st0, st1, n)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		key := fmt.Sprintf("run%d.a.1.1", i)
		e, err := kv.Get(ctx, key)
		if err != nil || e.Revision() != acks[i].Sequence || string(e.Value()) != fmt.Sprintf("token-%d-1", i) {
			t.Fatalf("key %s: %v, revision %v, acknowledged %d", key, err, e, acks[i].Sequence)
		}
	}

	// One key exists (another worker's claim): it is refused and keeps
	// its value; the other creates land.
	msgs := round(2)
	msgs[7] = claimCreate("claims", "run7.a.1.1", "another token")
	_, errs = publishRound(t, p, msgs)
	var apiErr *jetstream.APIError
	if !errors.As(errs[7], &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("the create of an existing key: %v, want wrong last sequence", errs[7])
	}
	if e, err := kv.Get(ctx, "run7.a.1.1"); err != nil || string(e.Value()) != "token-7-1" {
		t.Fatalf("the existing claim: %v %v, want its first value kept", e, err)
	}
	for i, err := range errs {
		if i == 7 {
			continue
		}
		if err != nil {
			t.Fatalf("create %d failed with another key's refusal: %v", i, err)
		}
		if _, err := kv.Get(ctx, fmt.Sprintf("run%d.a.2.1", i)); err != nil {
			t.Fatalf("create %d answered success but: %v", i, err)
		}
	}
	if st2 := groupcommit.Read(); st2.Retried-st1.Retried != n || st2.Batches != st1.Batches {
		t.Fatalf("commit stats %+v → %+v: want the refused batch's %d messages retried alone", st1, st2, n)
	}
}

// docs/adr/0032-fewer-writes-per-run.md: the stream copies of tasks, all
// on one queue's subject and without a subject check, leave as one batch
// (a subject check alone keeps two messages of one subject apart), each
// stored once under its message id.
func TestGroupedTaskCopiesOfOneSubjectShareABatch(t *testing.T) {
	const n = 16
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	ctx := ctxT(t)
	p := groupcommit.New(s.JS, nil)
	p.SetTest(n, 0)
	var msgs []*nats.Msg
	for i := range n {
		m := nats.NewMsg("weft.task.desk.v1.pay")
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("run%d/a/1/1", i))
		msgs = append(msgs, m)
	}
	st0 := groupcommit.Read()
	_, errs := publishRound(t, p, msgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("copy %d: %v", i, err)
		}
	}
	if st1 := groupcommit.Read(); st1.Batches-st0.Batches != 1 || st1.Batched-st0.Batched != n {
		t.Fatalf("commit stats %+v → %+v: want one batch of %d", st0, st1, n)
	}
	tasks, err := s.JS.Stream(ctx, provision.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := tasks.Info(ctx); err != nil || info.State.Msgs != n {
		t.Fatalf("WEFT_TASKS: %v %v, want %d copies", info, err, n)
	}
}

// docs/adr/0032-fewer-writes-per-run.md: a Publisher whose stream refused
// atomic publish (10174) publishes one by one for a cool-down, then tries
// a batch again, so that a process batches again once the stream allows
// atomic publish (provisioned, or provisioned again after an older
// release's provisioning turned it off). Every write lands either way.
func TestAPublisherBatchesAgainAfterTheCoolDownOnceTheStreamAllowsAtomicPublish(t *testing.T) {
	const n = 16
	s := natstest.Start(t, natstest.WithNodeOptions(natsnode.WithSyncAlways(true)))
	ctx := ctxT(t)
	kvCfg := jetstream.KeyValueConfig{Bucket: "claims", History: 1, Storage: jetstream.FileStorage, LimitMarkerTTL: time.Minute}
	if err := provision.EnsureOnly(ctx, s.JS, []provision.Asset{provision.KV(kvCfg)}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := groupcommit.New(s.JS, nil)
	p.SetTest(n, 0)
	p.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	round := func(r int, want string, batches, retried uint64) {
		t.Helper()
		var msgs []*nats.Msg
		for i := range n {
			msgs = append(msgs, claimCreate("claims", fmt.Sprintf("run%d.a.%d.1", i, r), "token"))
		}
		st0 := groupcommit.Read()
		_, errs := publishRound(t, p, msgs)
		st1 := groupcommit.Read()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, create %d: %v", r, i, err)
			}
		}
		if st1.Batches-st0.Batches != batches || st1.Retried-st0.Retried != retried {
			t.Fatalf("round %d (%s): commit stats %+v → %+v, want %d batches and %d retried", r, want, st0, st1, batches, retried)
		}
	}
	round(1, "the stream refuses the batch: sent again one by one", 0, n)
	round(2, "in the cool-down: one by one, no batch tried", 0, 0)
	if err := provision.EnsureOnly(ctx, s.JS, []provision.Asset{provision.KV(kvCfg).WithAtomicPublish()}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(groupcommit.CoolDown)
	mu.Unlock()
	round(3, "after the cool-down, on a stream that allows atomic publish: one batch", 1, 0)
}
