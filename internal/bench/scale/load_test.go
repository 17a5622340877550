package scale_test

import (
	"context"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/bench/scale"
	"github.com/weftrun/weft/internal/natstest"
)

func fold(t *testing.T, s *natstest.Server, run string) aggregate.State {
	t.Helper()
	envs, _, err := s.Log.Load(context.Background(), run)
	if err != nil {
		t.Fatalf("load %s: %v", run, err)
	}
	var recs []events.Recorded
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	st, err := aggregate.FoldChecked(recs)
	if err != nil {
		t.Fatalf("fold %s: %v", run, err)
	}
	return st
}

// TestLoaderWritesTheMixAndIsIdempotentByRunID proves the scale test's
// loader writes runs that fold to the statuses the mix
// says — suspended on an approval, completed, working with a model call in
// flight — all recorded as driven by the gone loader runner, and that a
// second load with the same prefix writes nothing new and continues a run
// it finds half written.
func TestLoaderWritesTheMixAndIsIdempotentByRunID(t *testing.T) {
	s := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A finished-kind run of which only the start is in the log, as an
	// interrupted load leaves it.
	ag, err := scale.Agent()
	if err != nil {
		t.Fatal(err)
	}
	half := scale.RunID("t", 1)
	evs, err := aggregate.Decide(aggregate.State{}, aggregate.Start{Run: half, Agent: ag.Ref(), Input: "x", Limits: ag.Limits(), Runner: "scale-loader"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Log.Append(ctx, half, eventlog.Head{}, time.Now(), evs...); err != nil {
		t.Fatal(err)
	}
	var indexed []string
	res, err := scale.Load(ctx, s.JS, scale.LoadConfig{Runs: 250, Prefix: "t", Window: 64,
		Index: func(_ context.Context, run string) error { indexed = append(indexed, run); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Suspended != 160 || res.Finished != 87 || res.Active != 3 || res.Existing != 1 {
		t.Fatalf("result %+v", res)
	}
	if want := 160*3 + 87*6 + 3 - 1; res.Messages != want {
		t.Fatalf("%d messages, want %d", res.Messages, want)
	}
	if len(indexed) != 3 {
		t.Fatalf("indexed %v", indexed)
	}
	for i := range 250 {
		run := scale.RunID("t", i)
		st := fold(t, s, run)
		got := aggregate.Status(st).Kind
		want := map[scale.Kind]aggregate.StatusKind{scale.Suspended: aggregate.StatusSuspended, scale.Finished: aggregate.StatusFinished, scale.Active: aggregate.StatusWorking}[scale.KindOf(i)]
		if got != want || st.Runner() != "scale-loader" {
			t.Fatalf("run %s (%s): status %s, runner %q", run, scale.KindOf(i), got, st.Runner())
		}
		if out, fin := st.Finished(); fin && out.Kind != events.OutcomeCompleted {
			t.Fatalf("run %s: outcome %s", run, events.DescribeOutcome(out))
		}
	}
	again, err := scale.Load(ctx, s.JS, scale.LoadConfig{Runs: 250, Prefix: "t", Window: 100})
	if err != nil {
		t.Fatal(err)
	}
	if again.Messages != 0 || again.Existing != 250 {
		t.Fatalf("second load: %+v", again)
	}
}
