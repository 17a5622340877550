package projector_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// indexKeys returns the keys of a dump that are in weft_index.
func indexKeys(d map[string][]byte) []string {
	var out []string
	for k := range d {
		if strings.HasPrefix(k, projector.BucketIndex+"/") {
			out = append(out, k)
		}
	}
	return out
}

// TestRebuildRestoresALostOrIncompleteIndex: the views are kept and only
// weft_index is lost (deleted and created again) or left incomplete (some
// entries and directory nodes purged): a rebuild puts every index entry
// and node the views imply, so that it equals the live projection's
// (docs/protocol/50-queries.md "Order indexes": a rebuild with the
// projectors stopped makes the index exact).
func TestRebuildRestoresALostOrIncompleteIndex(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p)
	_, log := projtest.Histories(7, 30)
	appendLog(t, s.Log, log)
	waitSeq(t, p, lastSeq(t, s.JS))
	stop()
	live := dump(t, s.JS)
	if len(indexKeys(live)) == 0 {
		t.Fatal("the live projection wrote no index key")
	}

	// Lost: the bucket deleted and created empty.
	if err := s.JS.DeleteKeyValue(ctx, projector.BucketIndex); err != nil {
		t.Fatal(err)
	}
	if _, err := s.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: projector.BucketIndex, History: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))

	// Incomplete: every third index key purged.
	st, err := s.JS.Stream(ctx, "KV_"+projector.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range indexKeys(live) {
		if i%3 == 0 {
			subject := "$KV." + projector.BucketIndex + "." + strings.TrimPrefix(k, projector.BucketIndex+"/")
			if err := st.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))
}

// TestVoidOfARunsOnlyMessageIsIdempotent: a run whose only message no
// reader can fold is quarantined (view, summary, list entry); a repair
// voids that message, and the projector stopped after deleting the view
// and before the rest (the view is gone, the summary and the index entry
// are not). Projecting the void record again removes the summary and
// every index key of the run: no ghost stays listed (docs/adr/0011).
func TestVoidOfARunsOnlyMessageIsIdempotent(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p)
	ack, err := s.JS.Publish(ctx, "weft.ev.ghost-1.events", []byte(`{"schema":1,"events":[{"run":"x"`))
	if err != nil {
		t.Fatal(err)
	}
	waitSeq(t, p, lastSeq(t, s.JS))
	stop()
	d := dump(t, s.JS)
	if d[projector.BucketRuns+"/ghost-1"] == nil || len(indexKeys(d)) == 0 {
		t.Fatalf("the quarantined run is not listed: %d index keys", len(indexKeys(d)))
	}
	// The crash: the view deleted, nothing else.
	views, err := s.JS.KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	if err := views.Delete(ctx, "ghost-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log.Void(ctx, "ghost-1", ack.Sequence, "test junk", "tester", time.Now()); err != nil {
		t.Fatal(err)
	}
	p, err = projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop = runProjector(t, p)
	waitSeq(t, p, lastSeq(t, s.JS))
	stop()
	d = dump(t, s.JS)
	if d[projector.BucketRuns+"/ghost-1"] != nil {
		t.Fatal("weft_runs still holds the voided run's summary")
	}
	if k := indexKeys(d); len(k) != 0 {
		t.Fatalf("weft_index still holds %v", k)
	}
}
