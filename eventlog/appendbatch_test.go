package eventlog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
)

// TestAppendBatchIsAppendWithoutTheRoundTrips proves AppendBatch (the loader of
// internal/bench/scale) writes what Append writes, under the same per-run
// optimistic concurrency: decisions of many runs published asynchronously
// load back chained, Append continues from the heads it returned, a stale
// head is a *ConflictError that wrote nothing, and a second decision of one
// run in a batch is refused invalid_request.
func TestAppendBatchIsAppendWithoutTheRoundTrips(t *testing.T) {
	s := natstest.Start(t)
	ctx := ctxT(t)
	old := mustAppend(t, s.Log, "taken", eventlog.Head{}, ev(1))

	var ds []eventlog.Decision
	for i := range 50 {
		ds = append(ds, eventlog.Decision{Run: fmt.Sprintf("b%d", i), At: t0, Events: []events.Event{ev(1), ev(2)}})
	}
	ds = append(ds,
		eventlog.Decision{Run: "b0", At: t0, Events: []events.Event{ev(9)}},     // twice in one batch
		eventlog.Decision{Run: "taken", At: t0, Events: []events.Event{ev(9)}},  // stale head: the run exists
		eventlog.Decision{Run: "bad.id", At: t0, Events: []events.Event{ev(1)}}, // invalid name
		eventlog.Decision{Run: "empty", At: t0})                                 // no events
	out := s.Log.AppendBatch(ctx, ds)
	if len(out) != len(ds) {
		t.Fatalf("%d outcomes for %d decisions", len(out), len(ds))
	}
	for i := range 50 {
		if out[i].Err != nil || out[i].Head.Version != 2 || len(out[i].Envelopes) != 2 {
			t.Fatalf("decision %d: %+v", i, out[i])
		}
	}
	if weft.ErrorCode(out[50].Err) != weft.CodeInvalidRequest {
		t.Fatalf("second decision of b0: %v", out[50].Err)
	}
	var ce *eventlog.ConflictError
	if !errors.As(out[51].Err, &ce) || ce.Current != old {
		t.Fatalf("stale head: %v", out[51].Err)
	}
	if weft.ErrorCode(out[52].Err) != weft.CodeInvalidName || !errors.Is(out[53].Err, eventlog.ErrEmpty) {
		t.Fatalf("bad id %v, empty %v", out[52].Err, out[53].Err)
	}

	// The next batch extends every run from the heads returned.
	var next []eventlog.Decision
	for i := range 50 {
		next = append(next, eventlog.Decision{Run: ds[i].Run, Head: out[i].Head, At: t0, Events: []events.Event{ev(3)}})
	}
	out2 := s.Log.AppendBatch(ctx, next)
	for i := range 50 {
		run := ds[i].Run
		if out2[i].Err != nil {
			t.Fatalf("%s: %v", run, out2[i].Err)
		}
		h := mustAppend(t, s.Log, run, out2[i].Head, ev(4))
		envs, head, err := s.Log.Load(ctx, run)
		if err != nil {
			t.Fatalf("load %s: %v", run, err)
		}
		if head != h || len(envs) != 4 || turnOf(t, envs[2]) != 3 || turnOf(t, envs[3]) != 4 {
			t.Fatalf("%s: head %+v (want %+v), %d events", run, head, h, len(envs))
		}
	}
	if envs, _, _ := s.Log.Load(ctx, "taken"); len(envs) != 1 {
		t.Fatalf("the conflicting decision wrote %d events", len(envs)-1)
	}
}
