package projector_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// TestAStopMidBatchIsRepairedFromTheCheckpoint
// (docs/adr/0028-projector-batches.md): a projector stopped in the middle
// of writing a batch — its views stored, the index entries they no longer
// have removed, their new entries, summaries and items not yet written and
// its checkpoint not moved — writes nothing more once Run returned (it
// gave its lease up: a standby may write now), and leaves read models that
// a projector started again from the checkpoint makes whole: every key
// then holds the bytes a rebuild from sequence 1 writes.
func TestAStopMidBatchIsRepairedFromTheCheckpoint(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	_, log := projtest.Histories(11, 120)
	appendLog(t, s.Log, log)
	last := lastSeq(t, s.JS)

	// The first projector stops at the first move of a batch that
	// changed views already stored (the first batch creates them).
	stopped := errors.New("stopped mid-batch")
	pctx, cancel := context.WithCancelCause(ctx)
	var once sync.Once
	var first *projector.Projector
	pauses := 0
	p1, err := projector.New(ctx, s.JS, s.Log, projector.WithIndexPause(func() {
		if pauses++; pauses >= 2 && first.Seq() > 0 {
			once.Do(func() { cancel(stopped) })
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	first = p1
	if err := p1.Run(pctx); err != nil {
		t.Fatalf("first projector: %v", err)
	}
	noWriteLands(t, s.JS, lastSeqs(t, s.JS))
	if context.Cause(pctx) != stopped {
		t.Fatalf("the first projector ended without being stopped mid-batch (at %d of %d)", p1.Seq(), last)
	}
	cp, err := p1.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq >= last {
		t.Fatalf("checkpoint %d after a stop mid-batch, want before %d", cp.Seq, last)
	}

	// The stop left the batch half-written: views stored whose summary
	// is not (yet) theirs, which only the repair makes whole.
	if n := staleSummaries(t, s.JS); n == 0 {
		t.Fatal("no stored view has a stale summary after the stop: the batch was not stopped between its views and what derives from them")
	}

	p2, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p2)
	waitSeq(t, p2, last)
	stop()
	live := dump(t, s.JS)
	purge(t, s.JS)
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))
}

// lastSeqs is the last stream sequence of each of the projector's buckets
// but the lease's.
func lastSeqs(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, b := range append(projector.Buckets(), projector.BucketState) {
		out[b] = projector.BucketLastSeq(t, js, b)
	}
	return out
}

// noWriteLands checks that no write lands in the buckets after at was
// read: it stores a fence key in each bucket through js, on the
// connection the projector wrote with (one server stores a connection's
// writes to a stream in the order sent, so a write the projector sent
// before would be stored before the fence), and wants the fence right
// after at. The fence is then purged, leaving no key.
func noWriteLands(t *testing.T, js jetstream.JetStream, at map[string]uint64) {
	t.Helper()
	ctx := context.Background()
	for b, seq := range at {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Put(ctx, "fence", nil)
		if err != nil {
			t.Fatal(err)
		}
		if rev != seq+1 {
			t.Errorf("%s: %d writes landed after the projector's Run returned", b, rev-seq-1)
		}
		st, err := js.Stream(ctx, "KV_"+b)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Purge(ctx, jetstream.WithPurgeSubject("$KV."+b+".fence")); err != nil {
			t.Fatal(err)
		}
	}
}

// staleSummaries counts the stored views whose stored summary is not
// their own (or missing).
func staleSummaries(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx := context.Background()
	views, err := js.KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := js.KeyValue(ctx, projector.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	l, err := views.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range l.Keys() {
		e, err := views.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		v, err := projections.DecodeView(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(projections.Summarize(v))
		if err != nil {
			t.Fatal(err)
		}
		got, err := runs.Get(ctx, k)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		if err != nil || string(got.Value()) != string(want) {
			n++
		}
	}
	return n
}

// TestAProjectorPublishesOnAJetStreamContextOfItsOwn
// (docs/adr/0028-projector-batches.md): the projector's pipelined writes
// go through a JetStream context of its own, never the one it was given
// (a host gives it the runner's): the acknowledgements it gives up on
// after a stop never stay pending among the caller's asynchronous
// publishes, whose number the context bounds.
func TestAProjectorPublishesOnAJetStreamContextOfItsOwn(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	_, log := projtest.Histories(3, 20)
	appendLog(t, s.Log, log)
	var acks atomic.Int64
	js, err := jetstream.New(s.Conn, jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) { acks.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	p, err := projector.New(ctx, js, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p)
	waitSeq(t, p, lastSeq(t, s.JS))
	stop()
	if n := acks.Load(); n != 0 {
		t.Errorf("%d of the projector's writes were acknowledged through the caller's JetStream context, want none", n)
	}
}
