package projector_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/projector"
)

// waitLog waits until logs holds want.
func waitLog(t *testing.T, logs *syncbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("never logged %q:\n%s", want, logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestIndexEqualsViews_SecondProjectorStandsBy (docs/adr/0020 "one projector at
// a time"): two projectors on one store
// would interleave the index writes of a run and could leave ghost
// entries, so one writes and the other stands by: while the first holds
// the projector lease the second receives no event; when the first
// stops it gives the lease up and the second takes over and projects
// from the checkpoint; and the index is then key for key the one a
// rebuild from sequence 1 writes.
func TestIndexEqualsViews_SecondProjectorStandsBy(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	var logs1, logs2 syncbuf.Buffer
	p1, err := projector.New(ctx, s.JS, s.Log, projector.WithLogger(slog.New(slog.NewTextHandler(&logs1, nil))))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := projector.New(ctx, s.JS, s.Log, projector.WithLogger(slog.New(slog.NewTextHandler(&logs2, nil))))
	if err != nil {
		t.Fatal(err)
	}
	stop1 := runProjector(t, p1)
	waitLog(t, &logs1, "projector starting")
	runProjector(t, p2)
	waitLog(t, &logs2, "projector standing by")

	rng := rand.New(rand.NewPCG(3, 3))
	var ids []string
	for i := range 120 {
		ids = append(ids, "two-"+string(rune('a'+i%26))+strings.Repeat("z", i/26))
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	hs := indexRuns(rng, ids, func(i int) time.Time { return t0.Add(time.Duration(i) * 7 * time.Millisecond) })
	appendLog(t, s.Log, interleave(hs[:60]))
	waitSeq(t, p1, lastSeq(t, s.JS))
	if n := p2.Delivered(); n != 0 {
		t.Fatalf("the standby projector received %d events while the other held the lease", n)
	}

	stop1()
	waitLog(t, &logs2, "projector starting")
	appendLog(t, s.Log, interleave(hs[60:]))
	waitSeq(t, p2, lastSeq(t, s.JS))
	if p2.Delivered() == 0 {
		t.Fatal("the projector that took over projected nothing")
	}
	live := dump(t, s.JS)
	purge(t, s.JS)
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))
}
