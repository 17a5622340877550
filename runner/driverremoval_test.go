package runner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §8 and docs/adr/0036-driver-entry-removed-by-sequence.md:
// a run driven with work in flight has a weft_drivers entry before any
// effect, and its end removes it, leaving nothing in the bucket's stream —
// no marker, which under sync_interval: always cost one fsync to write and
// one more to expire. A finished run of three tool turns wrote the bucket
// once (its entry) and holds no message there. Before, its removal was a
// purge whose marker stayed for a lease: two writes, one message left.
func TestSemantics8_AFinishedRunsDriverEntryLeavesNoMarker(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s",
		model.CallTools(payCall(1, "ok")), model.CallTools(payCall(2, "ok")), model.CallTools(payCall(3, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	st, err := h.srv.JS.Stream(c, "KV_"+runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Start(c, api.StartRequest{Run: "dr1", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "dr1"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", out.Kind)
	}
	// The entry is removed after the run's last append: wait until the
	// bucket holds no message (a purge's marker stayed for a lease, then
	// expired), then count what the bucket stored.
	var info *jetstream.StreamInfo
	for {
		if info, err = st.Info(c); err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		select {
		case <-c.Done():
			m, _ := st.GetLastMsgForSubject(context.Background(), "$KV.weft_drivers.>")
			if m != nil {
				t.Logf("last: seq %d %s %q %v", m.Sequence, m.Subject, m.Data, m.Header)
			}
			t.Fatalf("the drivers bucket still holds %d messages after the run finished (stored %d)", info.State.Msgs, info.State.LastSeq)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if info.State.LastSeq != 1 {
		t.Fatalf("a finished run wrote the drivers bucket %d times, want 1 (its entry; its removal is a delete, no marker)", info.State.LastSeq)
	}
}

// docs/semantics.md §8 (per-run optimistic concurrency): a removal at a
// revision removes the entry only while it is at that revision — an entry
// replaced since (a takeover's, a correction's) stays — and a removal
// without one removes whatever entry the key has, or none.
func TestSemantics8_ADriverEntryIsRemovedOnlyAtItsRevision(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{build(t, model.NewScripted("s", model.Answer("ok")), nil, policy.Func(allow))})
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := runner.DriverKey("dr2", runner.DefaultPartitions)
	old, err := kv.Put(c, key, []byte("runner-a"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := kv.Put(c, key, []byte("runner-b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.RemoveDriverKey(c, r, "dr2", old); !errors.Is(err, runner.ErrDriverKeyChanged) {
		t.Fatalf("removal at the replaced revision %d: %v, want ErrDriverKeyChanged", old, err)
	}
	if e, err := kv.Get(c, key); err != nil || e.Revision() != cur || string(e.Value()) != "runner-b" {
		t.Fatalf("the entry after a refused removal: %v %v, want runner-b at %d", e, err, cur)
	}
	if err := runner.RemoveDriverKey(c, r, "dr2", cur); err != nil {
		t.Fatalf("removal at the current revision: %v", err)
	}
	if _, err := kv.Get(c, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the entry after its removal: %v, want none", err)
	}
	if err := runner.RemoveDriverKey(c, r, "dr2", cur); !errors.Is(err, runner.ErrDriverKeyChanged) {
		t.Fatalf("a second removal at the same revision: %v, want ErrDriverKeyChanged", err)
	}
	// Created again after its removal (no marker in the way), then removed
	// without a revision; once more: there is none.
	if _, err := kv.Create(c, key, []byte("runner-c")); err != nil {
		t.Fatalf("create after the removal: %v", err)
	}
	for i := range 2 {
		if err := runner.RemoveDriverKey(c, r, "dr2", 0); err != nil {
			t.Fatalf("removal %d without a revision: %v", i+1, err)
		}
	}
	if _, err := kv.Get(c, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the entry after its removal without a revision: %v, want none", err)
	}
}

// docs/adr/0036-driver-entry-removed-by-sequence.md: on a weft_drivers
// bucket whose stream denies message deletes (as an earlier release, or
// nats.go's CreateOrUpdateKeyValue, made it; no update can allow them) a
// removal at a revision still removes the entry — by a purge at that
// revision — and is still refused for a replaced entry.
func TestSemantics8_ADriverEntryIsRemovedOnABucketThatDeniesDeletes(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{build(t, model.NewScripted("s", model.Answer("ok")), nil, policy.Func(allow))})
	c := ctx(t)
	if err := h.srv.JS.DeleteKeyValue(c, runner.DriversBucket); err != nil {
		t.Fatal(err)
	}
	kv, err := h.srv.JS.CreateOrUpdateKeyValue(c, jetstream.KeyValueConfig{Bucket: runner.DriversBucket, Storage: jetstream.FileStorage, LimitMarkerTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	key := runner.DriverKey("dr3", runner.DefaultPartitions)
	old, err := kv.Put(c, key, []byte("runner-a"))
	if err != nil {
		t.Fatal(err)
	}
	cur, err := kv.Put(c, key, []byte("runner-b"))
	if err != nil {
		t.Fatal(err)
	}
	if err := runner.RemoveDriverKey(c, r, "dr3", old); !errors.Is(err, runner.ErrDriverKeyChanged) {
		t.Fatalf("removal at the replaced revision %d: %v, want ErrDriverKeyChanged", old, err)
	}
	if err := runner.RemoveDriverKey(c, r, "dr3", cur); err != nil {
		t.Fatalf("removal at the current revision: %v", err)
	}
	if _, err := kv.Get(c, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the entry after its removal: %v, want none", err)
	}
}
