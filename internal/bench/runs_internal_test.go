package bench

import "testing"

// docs/adr/0036-driver-entry-removed-by-sequence.md: under sync_interval:
// always a stream's removal of a message is synced like a write (strace of
// the server: a work-queue task's acknowledgement, a driver entry's delete,
// a marker's expiry each one fsync), so the derived fsyncs of a phase count
// every message a stream removed, from the deltas of the messages it
// stored and held. Before, a run of the bench's workload counted 3 task
// copies and not their 3 acknowledgements.
func TestFsyncsCountRemovals(t *testing.T) {
	before := counts{streams: map[string]uint64{"WEFT_TASKS": 10, "KV_weft_drivers": 4, "WEFT_EVENTS": 100},
		held: map[string]int64{"WEFT_TASKS": 2, "KV_weft_drivers": 1, "WEFT_EVENTS": 100}}
	after := counts{stored: 15, streams: map[string]uint64{"WEFT_TASKS": 13, "KV_weft_drivers": 5, "WEFT_EVENTS": 109},
		held: map[string]int64{"WEFT_TASKS": 1, "KV_weft_drivers": 0, "WEFT_EVENTS": 109}}
	// 13 of the deltas' writes; the 3 copies stored and 4 removed (one
	// queued before), the entry stored and removed, 9 appends kept.
	d := after.minus(before)
	d.stored = 13
	if got := d.removals(); got != 6 {
		t.Fatalf("removals %d, want 6 (4 task acknowledgements, 2 driver entries)", got)
	}
	if got := (phase{cost: d}).fsyncs(); got != 13+6 {
		t.Fatalf("fsyncs %d, want 19: 13 writes and 6 removals", got)
	}
}
