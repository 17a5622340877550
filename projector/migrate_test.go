package projector_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// TestIndexMigration_ViewsWithoutIndexAreListedAfterStart
// (docs/protocol/50-queries.md "Order indexes": the
// index marker): a store upgraded from before weft_index holds views,
// summaries and inbox items but no index and no index marker. While no
// projector has built the index the list answers unavailable (not an
// empty list); a projector started on that store builds the index from
// the stored views before it projects anything new, logging its
// progress, and writes the marker; then the list pages every run as the
// reference does, and the index is key for key the one a live projector
// had kept.
func TestIndexMigration_ViewsWithoutIndexAreListedAfterStart(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	stop := runProjector(t, p)
	rng := rand.New(rand.NewPCG(2, 17))
	var ids []string
	for i := range 300 {
		ids = append(ids, fmt.Sprintf("m%03d", i))
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	appendLog(t, s.Log, interleave(indexRuns(rng, ids, func(i int) time.Time { return t0.Add(time.Duration(i) * 3 * time.Millisecond) })))
	waitSeq(t, p, lastSeq(t, s.JS))
	stop()
	live := dump(t, s.JS)

	// The store as a version before weft_index left it.
	st, err := s.JS.Stream(ctx, "KV_"+projector.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	state, err := s.JS.KeyValue(ctx, projector.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	if err := state.Purge(ctx, projector.KeyIndex); err != nil {
		t.Fatal(err)
	}

	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	wantError(t, s.Conn, projector.EndpointList, `{}`, "unavailable")
	wantError(t, s.Conn, projector.EndpointApprovals, `{}`, "unavailable")

	var logs syncbuf.Buffer
	p2, err := projector.New(ctx, s.JS, s.Log, projector.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p2)
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(logs.String(), "index built") {
		if time.Now().After(deadline) {
			t.Fatalf("the projector never built the index:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "building the order indexes from the stored views") || !strings.Contains(logs.String(), "views=300") {
		t.Errorf("no progress logged:\n%s", logs.String())
	}
	all := summaries(storedViews(t, s.JS))
	q := projections.ListQuery{Limit: 70}
	for {
		want, _ := projections.Page(all, q)
		got := listPage(t, s.Conn, q)
		if !slices.Equal(names(got), names(want)) || got.Next != want.Next {
			t.Fatalf("after the migration:\n got %v\nwant %v", names(got), names(want))
		}
		if got.Next == "" {
			break
		}
		q.Cursor = got.Next
	}
	sameStores(t, live, dump(t, s.JS))
	if _, err := state.Get(ctx, projector.KeyIndex); err != nil {
		t.Fatalf("index marker: %v", err)
	}
}
