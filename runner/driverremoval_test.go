package runner_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// docs/semantics.md §8 (a run with work in flight has a driver entry) and
// docs/adr/0036-driver-entry-removed-by-sequence.md: a removal at a stale
// revision after the bucket was deleted and made again — its sequences
// start at 1 again, so the revision may now be another run's entry — is
// refused and leaves that entry. A delete by sequence checks no subject:
// without the read of the message's subject it removed the other run's
// live entry and answered nil.
func TestSemantics8_AStaleRevisionInARecreatedBucketLeavesAnotherRunsEntry(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r, _ := h.startRunner([]*agent.Agent{build(t, model.NewScripted("s", model.Answer("ok")), nil, policy.Func(allow))})
	c := ctx(t)
	kv, err := h.srv.JS.KeyValue(c, runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	old, err := kv.Put(c, runner.DriverKey("dr4", runner.DefaultPartitions), []byte("runner-a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.JS.DeleteKeyValue(c, runner.DriversBucket); err != nil {
		t.Fatal(err)
	}
	if err := runner.Provision(c, h.srv.JS, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	other := runner.DriverKey("dr5", runner.DefaultPartitions)
	var rev uint64
	for rev < old {
		if rev, err = kv.Put(c, other, []byte("runner-b")); err != nil {
			t.Fatal(err)
		}
	}
	if rev != old {
		t.Fatalf("the other run's entry is at %d, want the stale revision %d", rev, old)
	}
	if err := runner.RemoveDriverKey(c, r, "dr4", old); !errors.Is(err, runner.ErrDriverKeyChanged) {
		t.Fatalf("removal of dr4 at its stale revision %d: %v, want ErrDriverKeyChanged", old, err)
	}
	if e, err := kv.Get(c, other); err != nil || e.Revision() != rev || string(e.Value()) != "runner-b" {
		t.Fatalf("the other run's entry after the stale removal: %v %v, want runner-b at %d", e, err, rev)
	}
}

// docs/semantics.md §8 and docs/adr/0036-driver-entry-removed-by-sequence.md
// (decision 5): a finished run's driver entry is removed at the revision its
// runner put, with no read of the key first: one read, of the message at
// that revision (its subject checked: a bucket made again reuses
// sequences), and one delete. Before, the removal read the key (a direct
// get by subject) and then the message at the revision it found.
func TestSemantics8_AFinishedRunsDriverEntryIsRemovedWithoutReadingItsKey(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{b.tool()}, policy.Func(allow))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{a})
	c := ctx(t)
	st, err := h.srv.JS.Stream(c, "KV_"+runner.DriversBucket)
	if err != nil {
		t.Fatal(err)
	}
	byKey := countRequests(t, h, "$JS.API.DIRECT.GET.KV_"+runner.DriversBucket+".>")
	bySeq := countRequests(t, h, "$JS.API.DIRECT.GET.KV_"+runner.DriversBucket, "$JS.API.STREAM.MSG.GET.KV_"+runner.DriversBucket)
	deletes := countRequests(t, h, "$JS.API.STREAM.MSG.DELETE.KV_"+runner.DriversBucket)
	if _, err := h.client.Start(c, api.StartRequest{Run: "dr8", Agent: "desk", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "dr8"); out.Kind != events.OutcomeCompleted {
		t.Fatalf("outcome %s", out.Kind)
	}
	for {
		info, err := st.Info(c)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.LastSeq >= 1 && info.State.Msgs == 0 {
			break // written once and removed
		}
		select {
		case <-c.Done():
			t.Fatalf("the drivers bucket still holds %d messages after the run finished", info.State.Msgs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if k, s, d := byKey(), bySeq(), deletes(); k != 0 || s != 1 || d != 1 {
		t.Fatalf("the removal read the key %d times and the message by sequence %d times, and sent %d deletes; want 0, 1 and 1", k, s, d)
	}
}

// countRequests counts the messages published on subjects (the JetStream
// API requests of every connection of h's server) from now on; the
// function it returns gives the count of those the server sent before it
// was called (a channel subscription receives them in the connection's
// read loop, before the flush's answer).
func countRequests(t *testing.T, h *harness, subjects ...string) func() int {
	t.Helper()
	ch := make(chan *nats.Msg, 1024)
	for _, subj := range subjects {
		sub, err := h.srv.Conn.ChanSubscribe(subj, ch)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := h.srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	return func() int {
		if err := h.srv.Conn.Flush(); err != nil {
			t.Fatal(err)
		}
		for len(ch) > 0 {
			<-ch
			n++
		}
		return n
	}
}

// docs/adr/0036-driver-entry-removed-by-sequence.md: on a weft_drivers
// bucket that already denied deletes when the runner started (as an
// earlier release made it), the runner purges its entries directly —
// decided once, at start — and sends no message delete, which the server
// would refuse, at a revision or without one.
func TestSemantics8_ARunnerOnABucketThatDeniesDeletesPurgesDirectly(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	c := ctx(t)
	if err := h.srv.JS.DeleteKeyValue(c, runner.DriversBucket); err != nil {
		t.Fatal(err)
	}
	kv, err := h.srv.JS.CreateOrUpdateKeyValue(c, jetstream.KeyValueConfig{Bucket: runner.DriversBucket, Storage: jetstream.FileStorage, LimitMarkerTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := h.startRunner([]*agent.Agent{build(t, model.NewScripted("s", model.Answer("ok")), nil, policy.Func(allow))})
	// The runner's requests, in the order its one connection sent them.
	sent := make(chan *nats.Msg, 64)
	for _, subj := range []string{"$JS.API.STREAM.MSG.DELETE.KV_" + runner.DriversBucket, "$KV." + runner.DriversBucket + ".>"} {
		sub, err := h.srv.Conn.ChanSubscribe(subj, sent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := h.srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	a, b := runner.DriverKey("dr6", runner.DefaultPartitions), runner.DriverKey("dr7", runner.DefaultPartitions)
	rev, err := kv.Put(c, a, []byte("runner-a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(c, b, []byte("runner-a")); err != nil {
		t.Fatal(err)
	}
	if err := runner.RemoveDriverKey(c, r, "dr6", rev); err != nil {
		t.Fatalf("removal at the revision: %v", err)
	}
	if err := runner.RemoveDriverKey(c, r, "dr7", 0); err != nil {
		t.Fatalf("removal without a revision: %v", err)
	}
	// Both purges were sent after any delete request the removals made.
	deletes, purged := 0, map[string]bool{}
	for len(purged) < 2 {
		select {
		case m := <-sent:
			switch {
			case strings.HasPrefix(m.Subject, "$JS.API."):
				deletes++
			case m.Header.Get("KV-Operation") == "PURGE":
				purged[m.Subject] = true
			}
		case <-c.Done():
			t.Fatalf("saw purges of %v only", purged)
		}
	}
	if deletes != 0 {
		t.Fatalf("the removals sent %d message deletes to a bucket that denies them, want 0", deletes)
	}
	for _, k := range []string{a, b} {
		if _, err := kv.Get(c, k); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("%s after its removal: %v, want none", k, err)
		}
	}
}
