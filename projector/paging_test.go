package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// rawList asks for one list page without a testing.T (for goroutines
// other than the test's).
func rawList(nc *nats.Conn, q projections.ListQuery) (projections.ListPage, error) {
	body, _ := json.Marshal(projector.ListRequest{ListQuery: q})
	m, err := nc.Request(projector.QueryPrefix+"."+projector.EndpointList, body, 5*time.Second)
	if err != nil {
		return projections.ListPage{}, err
	}
	if code := m.Header.Get("Nats-Service-Error"); code != "" {
		return projections.ListPage{}, fmt.Errorf("list %s: %s %s", body, code, m.Data)
	}
	var pg projections.ListPage
	return pg, json.Unmarshal(m.Data, &pg)
}

// pageAll pages the list with q from its first page to its last.
func pageAll(nc *nats.Conn, q projections.ListQuery) ([]projections.ListPage, error) {
	var out []projections.ListPage
	for {
		pg, err := rawList(nc, q)
		if err != nil {
			return out, err
		}
		out = append(out, pg)
		if pg.Next == "" {
			return out, nil
		}
		q.Cursor = pg.Next
	}
}

// checkPagingContract checks pages (one paging, first page to last)
// against the paging contract of docs/protocol/50-queries.md: no page
// holds a run twice; every run of a page comes after the cursor it was
// asked with, in list order; no run is listed on two pages of the paging
// (change times only move forward here); and every run of stable — runs
// that did not change during the paging — is listed exactly once, as
// stable holds it.
func checkPagingContract(t *testing.T, what string, pages []projections.ListPage, stable map[string]projections.Summary) {
	t.Helper()
	seen := map[string]int{}
	var cursor string
	for i, pg := range pages {
		onPage := map[string]bool{}
		for j, sm := range pg.Runs {
			if onPage[sm.Run] {
				t.Errorf("%s: page %d holds run %s twice: %v", what, i, sm.Run, names(pg))
				continue
			}
			onPage[sm.Run] = true
			if j > 0 && projections.CompareSummaries(pg.Runs[j-1], sm) >= 0 {
				t.Errorf("%s: page %d out of list order at %s: %v", what, i, sm.Run, names(pg))
			}
			if cursor != "" {
				spec, err := projections.ListQuery{Cursor: cursor}.Spec()
				if err != nil {
					t.Fatal(err)
				}
				if !spec.Keep(sm) {
					t.Errorf("%s: page %d lists %s, which is not after its cursor", what, i, sm.Run)
				}
			}
			if seen[sm.Run]++; seen[sm.Run] == 2 {
				t.Errorf("%s: run %s listed on two pages of one paging", what, sm.Run)
			}
			if want, ok := stable[sm.Run]; ok && !jsonEqual(want, sm) {
				t.Errorf("%s: run %s listed as\n%+v\nwant (it did not change)\n%+v", what, sm.Run, sm, want)
			}
		}
		cursor = pg.Next
	}
	for run := range stable {
		if seen[run] == 0 {
			t.Errorf("%s: run %s (unchanged during the paging) not listed", what, run)
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// TestPagingContract_OnePageNeverHoldsARunTwice (docs/protocol/50-queries.md,
// "Paging contract"): while the projector moves a run's list entry (its
// change time or status changed), a page — whole list in one page, or
// paged three at a time — never holds that run twice (its old and new
// entries are never both in the index), every other run is listed exactly
// once, and the moving run at most once. The pages are taken in the
// middle of the move: the projector is paused between its two halves.
func TestPagingContract_OnePageNeverHoldsARunTwice(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	type snapshot struct {
		whole []projections.ListPage
		paged []projections.ListPage
		err   error
	}
	var armed atomic.Bool
	paused := make(chan snapshot, 1)
	p, err := projector.New(ctx, s.JS, s.Log, projector.WithIndexPause(func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		var sn snapshot
		sn.whole, sn.err = pageAll(s.Conn, projections.ListQuery{Limit: 1000})
		if sn.err == nil {
			sn.paged, sn.err = pageAll(s.Conn, projections.ListQuery{Limit: 3})
		}
		paused <- sn
	}))
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })

	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ag := events.AgentRef{Name: "desk", Version: "1"}
	var recs []events.Recorded
	var runs []string
	for i := range 12 {
		run := fmt.Sprintf("p%02d", i)
		runs = append(runs, run)
		recs = append(recs, events.Recorded{Run: run, Version: 1, At: t0.Add(time.Duration(i) * 10 * time.Millisecond), Event: events.RunStarted{Agent: ag, Input: "x", Runner: "r"}})
	}
	appendLog(t, s.Log, recs)
	waitSeq(t, p, lastSeq(t, s.JS))

	for _, ch := range []struct {
		run string
		at  time.Time
		ev  events.Event
	}{
		{"p03", t0.Add(time.Hour), events.ModelRequested{Turn: 1}},                                                 // moves to the front
		{"p07", t0.Add(70*time.Millisecond + time.Microsecond), events.RunHandedOff{Runner: "r", Incarnation: 1}},  // same window, new status
		{"p00", t0.Add(2 * time.Hour), events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCancelled}}}, // time and status
	} {
		stable := map[string]projections.Summary{}
		for _, sm := range summaries(storedViews(t, s.JS, runs...)) {
			if sm.Run != ch.run {
				stable[sm.Run] = sm
			}
		}
		armed.Store(true)
		appendTail(t, s.Log, []events.Recorded{{Run: ch.run, At: ch.at, Event: ch.ev}})
		var sn snapshot
		select {
		case sn = <-paused:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: the projector never moved the run's entry", ch.run)
		}
		if sn.err != nil {
			t.Fatal(sn.err)
		}
		checkPagingContract(t, ch.run+" moving, one page", sn.whole, stable)
		checkPagingContract(t, ch.run+" moving, pages of 3", sn.paged, stable)
		waitSeq(t, p, lastSeq(t, s.JS))
		want, _ := projections.Page(summaries(storedViews(t, s.JS, runs...)), projections.ListQuery{Limit: 1000})
		if got := listPage(t, s.Conn, projections.ListQuery{Limit: 1000}); !slices.Equal(names(got), names(want)) {
			t.Fatalf("after %s moved:\n got %v\nwant %v", ch.run, names(got), names(want))
		}
	}

	// A stale entry beside the current one (what a rebuild beside a live
	// projector may leave: p03's first summary, written after its
	// current one, in p02's window): the page still lists p03 once, at
	// its current version.
	kv, err := s.JS.KeyValue(ctx, projector.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeysFiltered(ctx, "runs.e.*.*.*.p02")
	if err != nil {
		t.Fatal(err)
	}
	var ghost string
	for k := range keys.Keys() {
		ghost = strings.TrimSuffix(k, "p02") + "p03"
	}
	old := projections.Summarize(projections.Apply(projections.RunView{}, recs[3]))
	b, _ := json.Marshal(old)
	if _, err := kv.Put(ctx, ghost, b); err != nil {
		t.Fatal(err)
	}
	pages, err := pageAll(s.Conn, projections.ListQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	checkPagingContract(t, "stale entry", pages, nil)
	for _, sm := range pages[0].Runs {
		if sm.Run == "p03" && sm.Version != 2 {
			t.Errorf("p03 listed at version %d, want its current 2", sm.Version)
		}
	}
}
