package projector_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// docs/adr/0011: malformed messages among seven runs'
// histories — junk on one run, junk on a run that is then repaired, junk
// on a subject that names no run — stop nothing: the live projector
// projects every other run (each view equals the pure fold of its run),
// stores the poisoned one quarantined at the message's sequence (the view
// otherwise the fold of the events before it), the repaired one as if the
// junk had never been there, moves its checkpoint to the end of the log;
// and a rebuild from sequence 1 writes the same bytes.
func TestQuarantineAndRepairRebuildEqualsLive(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	perRun, log := projtest.Histories(7, 40)
	half := len(log) / 2
	appendLog(t, s.Log, log[:half])
	poisoned, repaired := perRun[1][0].Run, perRun[2][0].Run
	junk := func(subject string) uint64 {
		ack, err := s.JS.Publish(ctx, subject, []byte(`{"schema":1,"events":[{"run":"x"`))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	bad := junk("weft.ev." + poisoned + ".events")
	fixed := junk("weft.ev." + repaired + ".events")
	junk("weft.ev.nobody")
	// Only the other runs go on (a runner would refuse the poisoned ones).
	heads := map[string]int{}
	for _, r := range log[:half] {
		heads[r.Run]++
	}
	cur := map[string]eventlog.Head{}
	for _, r := range filterRuns(log[half:], poisoned, repaired) {
		h, ok := cur[r.Run]
		if !ok {
			if h, err = s.Log.Head(ctx, r.Run); err != nil {
				t.Fatal(err)
			}
		}
		if _, h, err = s.Log.Append(ctx, r.Run, h, r.At, r.Event); err != nil {
			t.Fatal(err)
		}
		cur[r.Run] = h
	}
	if _, err := s.Log.Void(ctx, repaired, fixed, "test junk", "tester", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitSeq(t, p, lastSeq(t, s.JS))
	live := dump(t, s.JS)

	for _, h := range perRun {
		run := h[0].Run
		n := len(h)
		if run == poisoned || run == repaired {
			n = heads[run]
		}
		want := projections.Fold(h[:n])
		if run == poisoned {
			want = projections.Quarantined(want, run, bad, "").View
			got, err := projections.DecodeView(live[projector.BucketViews+"/"+run])
			if err != nil || got.Quarantine == nil || got.Quarantine.Seq != bad || got.Quarantine.Reason == "" {
				t.Fatalf("poisoned view: %v %+v", err, got.Quarantine)
			}
			want.Quarantine.Reason = got.Quarantine.Reason
		}
		b, _ := want.Encode()
		if got := live[projector.BucketViews+"/"+run]; !bytes.Equal(got, b) {
			t.Fatalf("view %s:\n got %s\nwant %s", run, got, b)
		}
	}

	purge(t, s.JS)
	cp, err := projector.Rebuild(ctx, s.JS, s.Log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cp.Seq != lastSeq(t, s.JS) {
		t.Fatalf("rebuild checkpoint %d, log ends at %d", cp.Seq, lastSeq(t, s.JS))
	}
	sameStores(t, live, dump(t, s.JS))
}

// filterRuns returns log without the events of the runs named.
func filterRuns(log []events.Recorded, runs ...string) []events.Recorded {
	var out []events.Recorded
	for _, r := range log {
		keep := true
		for _, run := range runs {
			keep = keep && r.Run != run
		}
		if keep {
			out = append(out, r)
		}
	}
	return out
}
