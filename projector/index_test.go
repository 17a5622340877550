package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// indexRuns builds the histories of n runs (ids from ids, agents and
// statuses mixed by rng) whose last event is at last(i): working (a model
// call in flight), unattended (handed off), suspended (an approval pending,
// every fourth with an uncertain effect too) or finished. Earlier events of
// a run are a few milliseconds before its last one, so a run's index entry
// moves between windows as it is projected.
func indexRuns(rng *rand.Rand, ids []string, last func(i int) time.Time) [][]events.Recorded {
	agents := []string{"desk", "desk", "triage", "ops"}
	var out [][]events.Recorded
	for i, id := range ids {
		ag := events.AgentRef{Name: agents[rng.IntN(len(agents))], Version: "1"}
		var evs []events.Event
		evs = append(evs, events.RunStarted{Agent: ag, Input: "x", Runner: "r"})
		switch k := rng.IntN(10); {
		case k < 2:
			evs = append(evs, events.ModelRequested{Turn: 1})
		case k < 3:
			evs = append(evs, events.RunHandedOff{Runner: "r", Incarnation: 1})
		case k < 7:
			evs = append(evs, events.ModelRequested{Turn: 1},
				events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
					{ID: "a", Name: "pay", Arguments: json.RawMessage(`{"n":1}`)}, {ID: "b", Name: "wire", Arguments: json.RawMessage(`{}`)}}},
				events.ApprovalRequested{Action: "1/a", Revision: 1, Requirement: events.Requirement{Name: "finance", Version: 1}, Why: "policy"})
			if rng.IntN(4) == 0 {
				evs = append(evs, events.AttemptFenced{Action: "1/b", Tool: "wire", Attempt: 1},
					events.AttemptReported{Action: "1/b", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "timed out"})
			}
		default:
			evs = append(evs, events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted, Answer: json.RawMessage(`"ok"`)}})
		}
		at := last(i)
		var h []events.Recorded
		for j, e := range evs {
			back := time.Duration(len(evs)-1-j) * time.Duration(1+rng.IntN(4)) * time.Millisecond
			h = append(h, events.Recorded{Run: id, Version: uint64(j + 1), At: at.Add(-back), Event: e})
		}
		out = append(out, h)
	}
	return out
}

// interleave returns the events of hs in one log order: round robin over
// the runs, so that runs are projected concurrently.
func interleave(hs [][]events.Recorded) []events.Recorded {
	var out []events.Recorded
	for j := 0; ; j++ {
		n := len(out)
		for _, h := range hs {
			if j < len(h) {
				out = append(out, h[j])
			}
		}
		if len(out) == n {
			return out
		}
	}
}

// storedViews reads the stored views of runs (all of them when runs is
// empty).
func storedViews(t *testing.T, js jetstream.JetStream, runs ...string) []projections.RunView {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, projector.BucketViews)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		l, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range l.Keys() {
			runs = append(runs, k)
		}
	}
	var out []projections.RunView
	for _, run := range runs {
		e, err := kv.Get(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		v, err := projections.DecodeView(e.Value())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func summaries(vs []projections.RunView) []projections.Summary {
	out := make([]projections.Summary, len(vs))
	for i, v := range vs {
		out[i] = projections.Summarize(v)
	}
	return out
}

func listPage(t testing.TB, nc *nats.Conn, q projections.ListQuery) projections.ListPage {
	t.Helper()
	body, _ := json.Marshal(projector.ListRequest{ListQuery: q})
	p, m := request[projections.ListPage](t, nc, projector.EndpointList, string(body))
	if m.Header.Get("Nats-Service-Error") != "" {
		t.Fatalf("list %s: %s", body, m.Data)
	}
	return p
}

func names(p projections.ListPage) []string {
	var out []string
	for _, s := range p.Runs {
		out = append(out, s.Run)
	}
	return out
}

// TestListPagesFromTheIndexMatchBruteForce (docs/adr/0020-query-indexes.md: the
// query service lists and pages from KV-backed indexes without holding every
// run in memory) projects 3,000 runs (fixed seed: mixed statuses and agents,
// many sharing a millisecond or an exact time) and checks that every page
// of every filter combination (status, agent, updated_since; limits 50,
// 137, 1000) equals projections.Page over the stored views — the
// documented order (last change newest first, then run id) and cursor,
// no run missed or repeated — and the inboxes' pages the brute-force
// inboxes; that a page reads about as many index entries with 3,000 runs
// as with 500 (the 2,500 added runs changed before the first 500); and,
// while runs change between pages, that each page equals the reference
// page over the views as they are then (what the cursor promises: a run
// that changes moves to the front, the others keep their order); and
// that a rebuild from sequence 1 writes the same index (every key of
// weft_index, byte for byte) as the live projector kept.
func TestListPagesFromTheIndexMatchBruteForce(t *testing.T) {
	s := startInterval(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log, projector.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	rng := rand.New(rand.NewPCG(17, 2))
	const newer, older = 500, 2500
	perm := rng.Perm(newer + older)
	id := func(i int) string { return fmt.Sprintf("r%05d", perm[i]) }
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	// The newest 500: three runs a millisecond, one of each three at
	// exactly the same time as another (run id breaks the tie).
	var ids []string
	for i := range newer {
		ids = append(ids, id(i))
	}
	recent := indexRuns(rng, ids, func(i int) time.Time {
		at := t0.Add(time.Duration(i/3) * time.Millisecond)
		if i%3 == 2 {
			at = at.Add(time.Duration(rng.IntN(900)) * time.Microsecond)
		}
		return at
	})
	began := time.Now()
	appendLog(t, s.Log, interleave(recent))
	waitSeq(t, p, lastSeq(t, s.JS))
	t.Logf("500 runs projected in %v", time.Since(began))
	first := func(q projections.ListQuery) (projections.ListPage, uint64) {
		before := svc.Reads()
		pg := listPage(t, s.Conn, q)
		return pg, svc.Reads() - before
	}
	cost := func() (uint64, uint64) {
		pg, a := first(projections.ListQuery{})
		for range 2 {
			pg, _ = first(projections.ListQuery{Cursor: pg.Next})
		}
		_, b := first(projections.ListQuery{Cursor: pg.Next})
		return a, b
	}
	small1, small4 := cost()

	// 2,500 more runs, all changed a day earlier, over ten seconds.
	ids = nil
	for i := newer; i < newer+older; i++ {
		ids = append(ids, id(i))
	}
	old := indexRuns(rng, ids, func(int) time.Time {
		return t0.Add(-24*time.Hour + time.Duration(rng.IntN(10_000_000))*time.Microsecond)
	})
	began = time.Now()
	appendLog(t, s.Log, interleave(old))
	waitSeq(t, p, lastSeq(t, s.JS))
	t.Logf("2,500 runs projected in %v (%d index operations in all)", time.Since(began), p.IndexWrites())
	big1, big4 := cost()
	t.Logf("index entries read: first page %d (500 runs) vs %d (3,000 runs); fourth page %d vs %d", small1, big1, small4, big4)
	if big1 > small1+16 || big4 > small4+16 {
		t.Fatalf("a page reads more with more runs: first page %d -> %d, fourth %d -> %d", small1, big1, small4, big4)
	}

	views := storedViews(t, s.JS)
	all := summaries(views)
	if len(all) != newer+older {
		t.Fatalf("%d views, want %d", len(all), newer+older)
	}
	began = time.Now()
	statuses := append([]string{""}, append(projections.Statuses(), projections.StatusQuarantined)...)
	agents := []string{"", "desk", "triage", "nobody"}
	sinces := []string{"", t0.Add(-time.Hour).Format(time.RFC3339Nano), t0.Add(50 * time.Millisecond).Format(time.RFC3339Nano)}
	limits := []int{50, 137, 1000}
	combos, pages := 0, 0
	for _, st := range statuses {
		for _, ag := range agents {
			for _, since := range sinces {
				q := projections.ListQuery{Status: st, Agent: ag, UpdatedSince: since, Limit: limits[combos%len(limits)]}
				combos++
				seen := map[string]bool{}
				for {
					want, err := projections.Page(all, q)
					if err != nil {
						t.Fatal(err)
					}
					got := listPage(t, s.Conn, q)
					pages++
					if !slices.Equal(names(got), names(want)) || got.Next != want.Next {
						t.Fatalf("%+v: page\n got %v next %q\nwant %v next %q", q, names(got), got.Next, names(want), want.Next)
					}
					for _, r := range names(got) {
						if seen[r] {
							t.Fatalf("%+v: run %s twice", q, r)
						}
						seen[r] = true
					}
					if got.Next == "" {
						break
					}
					q.Cursor = got.Next
				}
			}
		}
	}
	t.Logf("%d filter combinations, %d pages equal to the reference (%v)", combos, pages, time.Since(began))

	// The inboxes, paged by 17 (and by run and agent), against the items
	// of the stored views.
	var appr []projections.ApprovalItem
	var unc []projections.UncertainItem
	for _, v := range views {
		appr = append(appr, projections.ApprovalItems(v)...)
		unc = append(unc, projections.UncertainItems(v)...)
	}
	projections.SortApprovals(appr)
	unc = projections.Aged(unc, now)
	for _, f := range []projector.InboxRequest{{}, {Agent: "triage"}, {Agent: "nobody"}, {Run: appr[len(appr)/2].Run}} {
		var want []string
		for _, it := range appr {
			if (f.Run == "" || it.Run == f.Run) && (f.Agent == "" || it.Agent.Name == f.Agent) {
				want = append(want, projections.ItemKey(it.Run, it.Action))
			}
		}
		var got []string
		q := f
		q.Limit = 17
		for {
			body, _ := json.Marshal(q)
			r, m := request[projector.ApprovalsReply](t, s.Conn, projector.EndpointApprovals, string(body))
			if m.Header.Get("Nats-Service-Error") != "" {
				t.Fatalf("approvals %s: %s", body, m.Data)
			}
			for _, it := range r.Items {
				got = append(got, projections.ItemKey(it.Run, it.Action))
			}
			if r.Next == "" {
				break
			}
			q.Cursor = r.Next
		}
		if !slices.Equal(got, want) {
			t.Fatalf("approvals %+v:\n got %v\nwant %v", f, got, want)
		}
	}
	var want, got []string
	for _, it := range unc {
		want = append(want, projections.ItemKey(it.Run, it.Action))
	}
	q := projector.InboxRequest{Limit: 23}
	for {
		body, _ := json.Marshal(q)
		r, _ := request[projector.UncertainReply](t, s.Conn, projector.EndpointUncertain, string(body))
		for _, it := range r.Items {
			got = append(got, projections.ItemKey(it.Run, it.Action))
		}
		if r.Next == "" {
			break
		}
		q.Cursor = r.Next
	}
	if !slices.Equal(got, want) || len(want) == 0 {
		t.Fatalf("uncertain:\n got %v\nwant %v", got, want)
	}
	wantError(t, s.Conn, projector.EndpointApprovals, `{"cursor":"garbage!"}`, "bad_cursor")
	wantError(t, s.Conn, projector.EndpointQuestions, `{"limit":1001}`, "bad_filter")

	// Runs change while a client pages: after each page, three runs not
	// finished yet finish (a change later than any), and the next page
	// equals the reference page over the views as they are then.
	heads := map[string]uint64{}
	index := map[string]int{}
	for i, v := range views {
		heads[v.Run] = v.Version
		index[v.Run] = i
	}
	open := func() []string {
		var out []string
		for _, sm := range all {
			if sm.Status != projections.StatusFinished {
				out = append(out, sm.Run)
			}
		}
		slices.Sort(out)
		return out
	}()
	later := t0.Add(time.Hour)
	lq := projections.ListQuery{Limit: 40}
	for step := 0; ; step++ {
		got := listPage(t, s.Conn, lq)
		want, err := projections.Page(all, lq)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names(got), names(want)) || got.Next != want.Next {
			t.Fatalf("page %d while runs change:\n got %v\nwant %v", step, names(got), names(want))
		}
		if got.Next == "" {
			break
		}
		lq.Cursor = got.Next
		var recs []events.Recorded
		var changed []string
		for range 3 {
			if len(open) == 0 {
				break
			}
			k := rng.IntN(len(open))
			run := open[k]
			open = slices.Delete(open, k, k+1)
			changed = append(changed, run)
			later = later.Add(time.Millisecond)
			heads[run]++
			recs = append(recs, events.Recorded{Run: run, Version: heads[run], At: later,
				Event: events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCancelled}}})
		}
		appendTail(t, s.Log, recs)
		waitSeq(t, p, lastSeq(t, s.JS))
		for _, v := range storedViews(t, s.JS, changed...) {
			all[index[v.Run]] = projections.Summarize(v)
		}
	}

	// Runs change while clients page, concurrently (no waiting for the
	// projector between pages): every page obeys the paging contract
	// (checkPagingContract: no run twice on a page or in a paging, every
	// run after the cursor, every run that did not change listed exactly
	// once as the reference holds it), and once the changes are
	// projected the list equals the reference again.
	pageConcurrently(t, s, p, all, open, later)

	// Rebuilt equals incremental: the index a rebuild from sequence 1
	// writes is key for key and byte for byte the one kept live.
	live := dump(t, s.JS)
	purge(t, s.JS)
	if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
		t.Fatal(err)
	}
	sameStores(t, live, dump(t, s.JS))
}

// appendTail appends recs to runs that already have events.
func appendTail(t *testing.T, log *eventlog.Log, recs []events.Recorded) {
	t.Helper()
	ctx := context.Background()
	for _, r := range recs {
		h, err := log.Head(ctx, r.Run)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := log.Append(ctx, r.Run, h, r.At, r.Event); err != nil {
			t.Fatalf("append %s: %v", r.Run, err)
		}
	}
}

// TestQueryServiceHoldsNoRunState: the query service's
// state is its connection, buckets and counters: no field holds a
// collection (the WatchAll mirrors of weft_runs and the inboxes are gone),
// so what it holds does not grow with the runs; what a page reads does
// not either (TestListPagesFromTheIndexMatchBruteForce).
func TestQueryServiceHoldsNoRunState(t *testing.T) {
	var walk func(t reflect.Type, path string, depth int)
	walk = func(typ reflect.Type, path string, depth int) {
		if depth > 2 {
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			ft := f.Type
			switch ft.Kind() {
			case reflect.Map, reflect.Slice, reflect.Array, reflect.Chan:
				t.Errorf("%s.%s is a %s: the query service holds a collection", path, f.Name, ft.Kind())
			case reflect.Pointer:
				if ft.Elem().Kind() == reflect.Struct && ft.Elem().PkgPath() == typ.PkgPath() {
					walk(ft.Elem(), path+"."+f.Name, depth+1)
				}
			}
		}
	}
	walk(reflect.TypeOf(projector.Service{}), "Service", 0)
}

// TestListPagesOfOneCrowdedMillisecond: 1,100 runs
// whose last change is the same instant (the scale test's loader stamps a
// window of 2,048 runs with one time) fill one index window with more
// entries than one direct get answers (1,024); the list and the approvals
// inbox still page exactly as the reference does, run id breaking the
// tie.
func TestListPagesOfOneCrowdedMillisecond(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	rng := rand.New(rand.NewPCG(11, 1))
	perm := rng.Perm(1100)
	ids := make([]string, len(perm))
	for i := range ids {
		ids[i] = fmt.Sprintf("c%04d", perm[i])
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var recs []events.Recorded
	req := events.Requirement{Name: "finance", Version: 1}
	for _, id := range ids {
		recs = append(recs,
			events.Recorded{Run: id, Version: 1, At: at, Event: events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "x", Runner: "r"}},
			events.Recorded{Run: id, Version: 2, At: at, Event: events.ModelRequested{Turn: 1}},
			events.Recorded{Run: id, Version: 3, At: at, Event: events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{{ID: "a", Name: "pay", Arguments: json.RawMessage(`{}`)}}}},
			events.Recorded{Run: id, Version: 4, At: at, Event: events.ApprovalRequested{Action: "1/a", Revision: 1, Requirement: req, Why: "policy"}})
	}
	appendLog(t, s.Log, interleave([][]events.Recorded{recs}))
	waitSeq(t, p, lastSeq(t, s.JS))
	all := summaries(storedViews(t, s.JS))
	for _, q := range []projections.ListQuery{{Limit: 200}, {Status: projections.StatusSuspended, Agent: "desk", Limit: 1000}} {
		for {
			want, _ := projections.Page(all, q)
			got := listPage(t, s.Conn, q)
			if !slices.Equal(names(got), names(want)) || got.Next != want.Next {
				t.Fatalf("%+v:\n got %v\nwant %v", q, names(got), names(want))
			}
			if got.Next == "" {
				break
			}
			q.Cursor = got.Next
		}
	}
	var got []string
	q := projector.InboxRequest{Limit: 400}
	for {
		body, _ := json.Marshal(q)
		r, _ := request[projector.ApprovalsReply](t, s.Conn, projector.EndpointApprovals, string(body))
		for _, it := range r.Items {
			got = append(got, it.Run)
		}
		if r.Next == "" {
			break
		}
		q.Cursor = r.Next
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("approvals: %d items, want %d in run order", len(got), len(want))
	}
}

// pageConcurrently pages the list (unfiltered, and suspended runs only)
// while a writer hands off runs of open (at times after later, one
// millisecond apart), and checks each paging against the paging contract
// with the runs the writer did not touch as the stable reference; then,
// the writer stopped and its changes projected, the list against
// projections.Page over the stored views.
func pageConcurrently(t *testing.T, s *natstest.Server, p *projector.Projector, all []projections.Summary, open []string, later time.Time) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	changed := map[string]bool{}
	stop, first, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(5, 20))
		for n := 0; ; n++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			run := open[rng.IntN(len(open))]
			mu.Lock()
			changed[run] = true
			mu.Unlock()
			later = later.Add(time.Millisecond)
			h, err := s.Log.Head(ctx, run)
			if err == nil {
				_, _, err = s.Log.Append(ctx, run, h, later, events.RunHandedOff{Runner: "r", Incarnation: n + 2})
			}
			if err != nil {
				done <- fmt.Errorf("append %s: %w", run, err)
				return
			}
			if n == 0 {
				close(first)
			}
		}
	}()
	select {
	case <-first:
	case err := <-done: // the writer failed before its first change
		t.Fatalf("the concurrent writer ended before its first change: %v", err)
	case <-time.After(30 * time.Second): // a bound on a hang, not a timing assertion
		close(stop)
		t.Fatal("the concurrent writer made no change within 30 s")
	}
	var pagings [][]projections.ListPage
	queries := []projections.ListQuery{{Limit: 60}, {Status: projections.StatusSuspended, Limit: 45}, {Limit: 200}}
	for _, q := range queries {
		pages, err := pageAll(s.Conn, q)
		if err != nil {
			t.Fatal(err)
		}
		pagings = append(pagings, pages)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs changed while %d pagings were taken", len(changed), len(pagings))
	for i, q := range queries {
		spec, _ := q.Spec()
		stable := map[string]projections.Summary{}
		for _, sm := range all {
			if !changed[sm.Run] && spec.Keep(sm) {
				stable[sm.Run] = sm
			}
		}
		checkPagingContract(t, fmt.Sprintf("concurrent paging %+v", q), pagings[i], stable)
	}
	waitSeq(t, p, lastSeq(t, s.JS))
	now := summaries(storedViews(t, s.JS))
	for _, q := range queries {
		for {
			want, _ := projections.Page(now, q)
			got := listPage(t, s.Conn, q)
			if !slices.Equal(names(got), names(want)) || got.Next != want.Next {
				t.Fatalf("%+v after the changes:\n got %v\nwant %v", q, names(got), names(want))
			}
			if got.Next == "" {
				break
			}
			q.Cursor = got.Next
		}
	}
}
