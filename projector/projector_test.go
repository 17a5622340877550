package projector_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

func start(t *testing.T) *natstest.Server {
	return natstest.Start(t, natstest.WithAssets(projector.Assets()...))
}

// startInterval is start with the server syncing every 2 minutes instead
// of every write: for the two tests that project thousands of runs whose
// events are seconds apart to test paging and rebuilds, not durability.
// Each of their events moves its run's list entry to a window of its own
// (about 13 index operations an event, most of them purges, each an
// fsync under sync always): even with the projector's batches
// (docs/adr/0028-projector-batches.md) they take 107 to 167 s each under
// sync always on a loaded 2-core machine against 22 to 23 s here, and the
// package came within two minutes of its 10-minute timeout.
func startInterval(t *testing.T) *natstest.Server {
	return natstest.Start(t, natstest.WithAssets(projector.Assets()...), natstest.WithNodeOptions(natsnode.WithSyncInterval("2m")))
}

// appendLog appends recs one event per decision, in log order: in
// stretches of events of distinct runs, each stretch one AppendBatch (its
// messages are stored in the order sent), so that a test of a thousand
// runs does not wait for an fsync per event before the next.
func appendLog(t testing.TB, log *eventlog.Log, recs []events.Recorded) {
	t.Helper()
	ctx := context.Background()
	heads := map[string]eventlog.Head{}
	for len(recs) > 0 {
		var ds []eventlog.Decision
		in := map[string]bool{}
		for _, r := range recs {
			if in[r.Run] {
				break
			}
			in[r.Run] = true
			ds = append(ds, eventlog.Decision{Run: r.Run, Head: heads[r.Run], At: r.At, Events: []events.Event{r.Event}})
		}
		for i, o := range log.AppendBatch(ctx, ds) {
			if o.Err != nil {
				t.Fatalf("append %s v%d: %v", recs[i].Run, recs[i].Version, o.Err)
			}
			heads[recs[i].Run] = o.Head
		}
		recs = recs[len(ds):]
	}
}

// runProjector runs p until the test ends; the returned func stops it and
// waits.
func runProjector(t testing.TB, p *projector.Projector) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("projector: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return stop
}

func lastSeq(t testing.TB, js jetstream.JetStream) uint64 {
	s, err := js.Stream(context.Background(), eventlog.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// stallLimit is how long waitSeq lets a projector go without finishing a
// message before it fails the test.
const stallLimit = 30 * time.Second

// waitSeq waits until p finished the message at seq (Projector.Seq: the
// last message whose view, summary, inbox items and index entries are
// written). It fails only when p finishes no message for stallLimit: how
// long a projection takes follows its work and the machine's load — the
// live projection of TestRebuildEqualsLiveProjection makes about 18 index
// operations per event, each a KV round trip, 210,000 in all, and took
// 25 s to 43 s on a loaded 2-core machine — so a total budget is only a
// margin over one machine's speed, while a projector that stopped
// advancing is stuck on any machine. The test binary's -timeout bounds
// the rest.
func waitSeq(t testing.TB, p *projector.Projector, seq uint64) {
	t.Helper()
	last, moved := p.Seq(), time.Now()
	for {
		cur := p.Seq()
		if cur >= seq {
			return
		}
		if cur != last {
			last, moved = cur, time.Now()
		} else if time.Since(moved) > stallLimit {
			t.Fatalf("projector at %d, want %d: it finished no message for %s", cur, seq, stallLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dump reads every key of the read-model buckets.
func dump(t *testing.T, js jetstream.JetStream) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	out := map[string][]byte{}
	for _, b := range projector.Buckets() {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		l, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range l.Keys() {
			e, err := kv.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			out[b+"/"+k] = e.Value()
		}
	}
	return out
}

func purge(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	for _, b := range append(projector.Buckets(), projector.BucketState) {
		if err := js.DeleteKeyValue(ctx, b); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

func sameStores(t *testing.T, a, b map[string][]byte) {
	t.Helper()
	var ka, kb []string
	for k := range a {
		ka = append(ka, k)
	}
	for k := range b {
		kb = append(kb, k)
	}
	slices.Sort(ka)
	slices.Sort(kb)
	if !slices.Equal(ka, kb) {
		t.Fatalf("key sets differ: %d vs %d keys", len(ka), len(kb))
	}
	for _, k := range ka {
		if !bytes.Equal(a[k], b[k]) {
			t.Fatalf("%s differs:\n%s\n%s", k, a[k], b[k])
		}
	}
}

// TestRebuildEqualsLiveProjection appends a randomized history of 1,000 runs
// to a real log while a projector follows it live, then wipes the buckets and
// rebuilds from sequence 1: every key holds the same bytes, and both equal
// the pure fold of each run. It compares once the live projector finished
// the stream's last message (waitSeq: as long as it keeps advancing).
func TestRebuildEqualsLiveProjection(t *testing.T) {
	s := startInterval(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	perRun, log := projtest.Histories(7, 1000)
	began := time.Now()
	appendLog(t, s.Log, log)
	appended := time.Since(began)
	waitSeq(t, p, lastSeq(t, s.JS))
	t.Logf("appended %d events in %v; projected live by %v; %d index operations", len(log), appended, time.Since(began), p.IndexWrites())
	live := dump(t, s.JS)

	// The live views equal the pure fold of each run.
	for _, h := range perRun {
		want, _ := projections.Fold(h).Encode()
		if got := live[projector.BucketViews+"/"+h[0].Run]; !bytes.Equal(got, want) {
			t.Fatalf("view %s:\n got %s\nwant %s", h[0].Run, got, want)
		}
	}

	purge(t, s.JS)
	began = time.Now()
	var phases []string
	cp, err := projector.Rebuild(ctx, s.JS, s.Log, func(phase string, done, total uint64) {
		if done == total {
			phases = append(phases, phase)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuilt %d events of %d runs in %v", len(log), len(perRun), time.Since(began))
	if cp.Seq != lastSeq(t, s.JS) || !slices.Equal(phases, []string{"fold", "fold", "write"}) && !slices.Equal(phases, []string{"fold", "write"}) {
		t.Fatalf("checkpoint %d, phases %v", cp.Seq, phases)
	}
	sameStores(t, live, dump(t, s.JS))
}

// TestRestartResumesFromCheckpoint: a projector stopped and started again
// reprocesses only the events after its checkpoint.
func TestRestartResumesFromCheckpoint(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	_, log := projtest.Histories(11, 40)
	half := len(log) / 2

	p1, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p1)
	appendLog(t, s.Log, log[:half])
	waitSeq(t, p1, lastSeq(t, s.JS))
	stop()
	cp, err := p1.Checkpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq != uint64(half) || p1.Delivered() != uint64(half) {
		t.Fatalf("checkpoint %d, delivered %d, want %d", cp.Seq, p1.Delivered(), half)
	}

	// More events while nobody projects; then a new projector (a restart).
	heads := map[string]eventlog.Head{}
	for _, r := range log[:half] {
		h, _ := s.Log.Head(ctx, r.Run)
		heads[r.Run] = h
	}
	for _, r := range log[half:] {
		_, h, err := s.Log.Append(ctx, r.Run, heads[r.Run], r.At, r.Event)
		if err != nil {
			t.Fatal(err)
		}
		heads[r.Run] = h
	}
	p2, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p2)
	waitSeq(t, p2, lastSeq(t, s.JS))
	if got, want := p2.Delivered(), uint64(len(log)-half); got != want {
		t.Fatalf("restart reprocessed %d events, want only the %d after the checkpoint", got, want)
	}
	if p2.Applied() != p2.Delivered() {
		t.Fatalf("applied %d of %d", p2.Applied(), p2.Delivered())
	}
}

// TestProjectorRefoldsMissingEvents: a view deleted behind the projector's
// back is rebuilt from the log at the run's next event.
func TestProjectorRefoldsMissingEvents(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	perRun, _ := projtest.Histories(5, 1)
	h := perRun[0]
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	appendLog(t, s.Log, h[:len(h)-1])
	waitSeq(t, p, lastSeq(t, s.JS))
	kv, _ := s.JS.KeyValue(ctx, projector.BucketViews)
	if err := kv.Delete(ctx, h[0].Run); err != nil {
		t.Fatal(err)
	}
	head, _ := s.Log.Head(ctx, h[0].Run)
	last := h[len(h)-1]
	if _, _, err := s.Log.Append(ctx, last.Run, head, last.At, last.Event); err != nil {
		t.Fatal(err)
	}
	waitSeq(t, p, lastSeq(t, s.JS))
	e, err := kv.Get(ctx, h[0].Run)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := projections.Fold(h).Encode()
	if !bytes.Equal(e.Value(), want) {
		t.Fatalf("refolded view\n got %s\nwant %s", e.Value(), want)
	}
	// The run's list entry moved from the one weft_runs named: one entry.
	idx, _ := s.JS.KeyValue(ctx, projector.BucketIndex)
	l, err := idx.ListKeysFiltered(ctx, "runs.e.*.*.*."+h[0].Run)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	if len(keys) != 1 {
		t.Fatalf("the refolded run has %d list entries: %v", len(keys), keys)
	}
}

func TestCheckpointDecodes(t *testing.T) {
	s := start(t)
	kv, _ := s.JS.KeyValue(context.Background(), projector.BucketState)
	if _, err := kv.Put(context.Background(), projector.KeyCheckpoint, []byte(`{"schema":1,"seq":42}`)); err != nil {
		t.Fatal(err)
	}
	p, _ := projector.New(context.Background(), s.JS, s.Log)
	cp, err := p.Checkpoint(context.Background())
	if err != nil || cp.Seq != 42 {
		t.Fatalf("checkpoint %+v %v", cp, err)
	}
	var c projector.Checkpoint
	if err := json.Unmarshal([]byte(`{"schema":1,"seq":7}`), &c); err != nil || c.Seq != 7 {
		t.Fatal(errors.New("checkpoint json"))
	}
}

// TestRedeliveryRepairsDerivedModels: a projector that stopped after writing
// a view but before its summary and inbox items (the checkpoint not yet
// moved) writes them again when the event is delivered again.
func TestRedeliveryRepairsDerivedModels(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	perRun, _ := projtest.Histories(3, 30)
	var h []events.Recorded
	for _, c := range perRun {
		if v := projections.Fold(c); len(v.Uncertain) > 0 || len(v.Approvals) > 0 {
			h = c
			break
		}
	}
	if h == nil {
		t.Fatal("no run with an inbox item")
	}
	p1, _ := projector.New(ctx, s.JS, s.Log)
	stop := runProjector(t, p1)
	appendLog(t, s.Log, h)
	last := lastSeq(t, s.JS)
	waitSeq(t, p1, last)
	stop()
	want := dump(t, s.JS)

	// The crash window: summary lost, a stale inbox item left, checkpoint
	// one message back.
	run := h[0].Run
	runs, _ := s.JS.KeyValue(ctx, projector.BucketRuns)
	runs.Delete(ctx, run)
	unc, _ := s.JS.KeyValue(ctx, projector.BucketUncertain)
	unc.Put(ctx, run+".9=2Fghost", []byte(`{"schema":1}`))
	state, _ := s.JS.KeyValue(ctx, projector.BucketState)
	state.Put(ctx, projector.KeyCheckpoint, []byte(fmt.Sprintf(`{"schema":1,"seq":%d}`, last-1)))

	p2, _ := projector.New(ctx, s.JS, s.Log)
	runProjector(t, p2)
	waitSeq(t, p2, last)
	if p2.Delivered() != 1 || p2.Applied() != 0 {
		t.Fatalf("delivered %d applied %d, want 1 and 0", p2.Delivered(), p2.Applied())
	}
	sameStores(t, want, dump(t, s.JS))
}
