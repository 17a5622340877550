package projector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projections/projtest"
	"github.com/weftrun/weft/projector"
)

// loadRuns appends n runs (indexRuns' mix, fixed seed, 20 runs a
// millisecond ending at t0, each run one decision) to the log with
// AppendBatch.
func loadRuns(tb testing.TB, log *eventlog.Log, n int) {
	tb.Helper()
	rng := rand.New(rand.NewPCG(20, uint64(n)))
	perm := rng.Perm(n)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%07d", perm[i])
	}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	hs := indexRuns(rng, ids, func(i int) time.Time { return t0.Add(-time.Duration(n-i) * 50 * time.Microsecond) })
	ctx := context.Background()
	for lo := 0; lo < len(hs); lo += 2048 {
		var ds []eventlog.Decision
		for _, h := range hs[lo:min(lo+2048, len(hs))] {
			d := eventlog.Decision{Run: h[0].Run, At: h[len(h)-1].At}
			for _, r := range h {
				d.Events = append(d.Events, r.Event)
			}
			ds = append(ds, d)
		}
		for i, o := range log.AppendBatch(ctx, ds) {
			if o.Err != nil {
				tb.Fatalf("append %s: %v", ds[i].Run, o.Err)
			}
		}
	}
}

type pageFigure struct {
	runs   int
	query  string
	ms     float64
	reads  float64
	gets   float64
	onPage int
}

// BenchmarkListPages measures the list query's first page and its 20th
// page (by cursor) of 50 runs, unfiltered and filtered, with 1,000 and
// with 100,000 runs projected (by Rebuild), and prints the table of
// docs/adr/0020 with the ratios. Run it with
//
//	go test -run '^$' -bench BenchmarkListPages -benchtime 20x ./projector/
//
// WEFT_BENCH_RUNS (comma separated) replaces the run counts.
func BenchmarkListPages(b *testing.B) {
	counts := []int{1000, 100_000}
	if v := os.Getenv("WEFT_BENCH_RUNS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			var n int
			fmt.Sscan(f, &n)
			counts = append(counts, n)
		}
	}
	queries := []struct {
		name  string
		q     projections.ListQuery
		pageN int
	}{
		{"first page", projections.ListQuery{}, 1},
		{"page 20 (cursor)", projections.ListQuery{}, 20},
		{"suspended, first page", projections.ListQuery{Status: projections.StatusSuspended}, 1},
		{"triage+working, first page", projections.ListQuery{Agent: "triage", Status: projections.StatusWorking}, 1},
		{"triage+working, page 20", projections.ListQuery{Agent: "triage", Status: projections.StatusWorking}, 20},
	}
	var figs []pageFigure
	for _, n := range counts {
		s := natstest.Start(b, natstest.WithAssets(projector.Assets()...))
		ctx := context.Background()
		began := time.Now()
		loadRuns(b, s.Log, n)
		loaded := time.Since(began)
		began = time.Now()
		if _, err := projector.Rebuild(ctx, s.JS, s.Log, nil); err != nil {
			b.Fatal(err)
		}
		b.Logf("%d runs: appended in %v, rebuilt in %v", n, loaded, time.Since(began))
		svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
		if err != nil {
			b.Fatal(err)
		}
		for _, qc := range queries {
			b.Run(fmt.Sprintf("runs=%d/%s", n, qc.name), func(b *testing.B) {
				// The cursor of page pageN, found once.
				q := qc.q
				q.Limit = 50
				for range qc.pageN - 1 {
					p := listPage(b, s.Conn, q)
					q.Cursor = p.Next
				}
				var took []time.Duration
				var reads, gets uint64
				var on int
				for b.Loop() {
					r0, g0 := svc.Reads(), svc.ReadRequests()
					t := time.Now()
					p := listPage(b, s.Conn, q)
					took = append(took, time.Since(t))
					reads += svc.Reads() - r0
					gets += svc.ReadRequests() - g0
					on = len(p.Runs)
				}
				slices.Sort(took)
				ms := float64(took[len(took)/2].Microseconds()) / 1000
				b.ReportMetric(float64(reads)/float64(b.N), "reads/op")
				b.ReportMetric(float64(gets)/float64(b.N), "gets/op")
				figs = append(figs, pageFigure{runs: n, query: qc.name, ms: ms, reads: float64(reads) / float64(b.N), gets: float64(gets) / float64(b.N), onPage: on})
			})
		}
		svc.Stop()
	}
	// The table: each query at every count, with the ratio to the
	// smallest count.
	sort.SliceStable(figs, func(i, j int) bool { return figs[i].query < figs[j].query })
	var out strings.Builder
	fmt.Fprintf(&out, "\n| query (limit 50) | runs | median ms | KV requests | entries read | ratio ms | ratio read |\n|---|---|---|---|---|---|---|\n")
	base := map[string]pageFigure{}
	for _, f := range figs {
		bf, ok := base[f.query]
		if !ok || f.runs < bf.runs {
			base[f.query], bf = f, f
		}
		fmt.Fprintf(&out, "| %s | %d | %.2f | %.0f | %.0f | x%.2f | x%.2f |\n", f.query, f.runs, f.ms, f.gets, f.reads, f.ms/bf.ms, f.reads/bf.reads)
	}
	fmt.Print(out.String())
}

// BenchmarkProjectorIndexCost measures the live projector's cost per
// event with the order indexes and without (the projector before them):
// sparse (projtest's histories, events seconds apart: each event in a
// window of its own) and dense (indexRuns, 20 runs a millisecond). Run it
// with
//
//	go test -run '^$' -bench BenchmarkProjectorIndexCost -benchtime 1x ./projector/
func BenchmarkProjectorIndexCost(b *testing.B) {
	sparse := func() []events.Recorded { _, log := projtest.Histories(7, 300); return log }
	dense := func() []events.Recorded {
		rng := rand.New(rand.NewPCG(3, 4))
		ids := make([]string, 1500)
		for i := range ids {
			ids[i] = fmt.Sprintf("d-%05d", i)
		}
		t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
		return interleave(indexRuns(rng, ids, func(i int) time.Time { return t0.Add(time.Duration(i) * 50 * time.Microsecond) }))
	}
	type fig struct {
		work, mode string
		perEvent   time.Duration
		ops        float64
	}
	var figs []fig
	for _, w := range []struct {
		name string
		log  func() []events.Recorded
	}{{"sparse", sparse}, {"dense", dense}} {
		for _, mode := range []string{"without index", "with index"} {
			b.Run(w.name+"/"+mode, func(b *testing.B) {
				for b.Loop() {
					s := natstest.Start(b, natstest.WithAssets(projector.Assets()...))
					recs := w.log()
					appendLog(b, s.Log, recs)
					ctx := context.Background()
					var opts []projector.Option
					if mode == "without index" {
						opts = append(opts, projector.WithoutIndex())
					}
					p, err := projector.New(ctx, s.JS, s.Log, opts...)
					if err != nil {
						b.Fatal(err)
					}
					last := lastSeq(b, s.JS)
					began := time.Now()
					runProjector(b, p)
					waitSeq(b, p, last)
					d := time.Since(began)
					var ops float64
					if mode == "with index" {
						ops = float64(p.IndexWrites()) / float64(len(recs))
					}
					figs = append(figs, fig{w.name, mode, d / time.Duration(len(recs)), ops})
					b.ReportMetric(float64(d.Microseconds())/float64(len(recs)), "µs/event")
				}
			})
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n| workload | projector | µs/event | index ops/event | ratio |\n|---|---|---|---|---|\n")
	for _, f := range figs {
		i := slices.IndexFunc(figs, func(g fig) bool { return g.work == f.work && g.mode == "without index" })
		fmt.Fprintf(&out, "| %s | %s | %.0f | %.1f | x%.2f |\n", f.work, f.mode, float64(f.perEvent.Microseconds()), f.ops, float64(f.perEvent)/float64(figs[i].perEvent))
	}
	fmt.Print(out.String())
}

// durableFigure is one catch-up of BenchmarkProjectorDurable.
type durableFigure struct {
	mode       string
	runs       int
	events     int
	took       time.Duration
	writes     uint64 // messages stored in the read-model buckets
	apiCalls   uint64 // JetStream API requests (purges, stream info…)
	checkpoint uint64 // checkpoint writes
}

// BenchmarkProjectorDurable measures how fast a projector catches up with
// a log of runs (indexRuns' mix, fixed seed, one event per decision, the
// runs' events interleaved as concurrent runs write them) with the
// server's fsync before every acknowledgement (sync_interval always, the
// default) and, as the same run's baseline, with sync_interval 2m; and how
// many acknowledged writes a run costs (messages stored in the read-model
// buckets, counted by the server) and how many JetStream API requests
// (purges of index keys among them). Run it with
//
//	go test -run '^$' -bench BenchmarkProjectorDurable -benchtime 1x ./projector/
//
// WEFT_BENCH_RUNS sets the number of runs (default 300).
func BenchmarkProjectorDurable(b *testing.B) {
	n := 300
	if v := os.Getenv("WEFT_BENCH_RUNS"); v != "" {
		fmt.Sscan(v, &n)
	}
	var figs []durableFigure
	for _, m := range durableModes() {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				s := natstest.Start(b, natstest.WithAssets(projector.Assets()...), natstest.WithNodeOptions(m.node...))
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(17, uint64(n)))
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("d-%05d", i)
				}
				t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
				hs := indexRuns(rng, ids, func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) })
				evs := appendRounds(b, s.Log, hs)
				p, err := projector.New(ctx, s.JS, s.Log, m.opts...)
				if err != nil {
					b.Fatal(err)
				}
				w0, a0 := storedWrites(b, s), apiRequests(b, s)
				c0 := checkpointWrites(b, s)
				last := lastSeq(b, s.JS)
				began := time.Now()
				runProjector(b, p)
				waitSeq(b, p, last)
				took := time.Since(began)
				f := durableFigure{mode: m.name, runs: n, events: evs, took: took,
					writes: storedWrites(b, s) - w0, apiCalls: apiRequests(b, s) - a0, checkpoint: checkpointWrites(b, s) - c0}
				figs = append(figs, f)
				b.ReportMetric(float64(n)/took.Seconds(), "runs/s")
				b.ReportMetric(float64(f.writes)/float64(n), "writes/run")
			}
		})
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n| server, projector | runs | events | runs/s | ratio | stored writes/run | checkpoint writes/run | API requests/run |\n|---|---|---|---|---|---|---|---|\n")
	for _, f := range figs {
		rate := float64(f.runs) / f.took.Seconds()
		base := float64(figs[0].runs) / figs[0].took.Seconds()
		fmt.Fprintf(&out, "| %s | %d | %d | %.1f | x%.2f | %.1f | %.1f | %.1f |\n", f.mode, f.runs, f.events, rate, rate/base,
			float64(f.writes)/float64(f.runs), float64(f.checkpoint)/float64(f.runs), float64(f.apiCalls)/float64(f.runs))
	}
	fmt.Print(out.String())
}

// appendRounds appends the histories hs one event per decision, the
// first event of every run, then the second, … (AppendBatch per round),
// and returns the number of events.
func appendRounds(tb testing.TB, log *eventlog.Log, hs [][]events.Recorded) int {
	tb.Helper()
	ctx := context.Background()
	heads := make([]eventlog.Head, len(hs))
	n := 0
	for j := 0; ; j++ {
		var ds []eventlog.Decision
		var at []int
		for i, h := range hs {
			if j < len(h) {
				ds = append(ds, eventlog.Decision{Run: h[j].Run, Head: heads[i], At: h[j].At, Events: []events.Event{h[j].Event}})
				at = append(at, i)
			}
		}
		if len(ds) == 0 {
			return n
		}
		for k, o := range log.AppendBatch(ctx, ds) {
			if o.Err != nil {
				tb.Fatalf("append %s: %v", ds[k].Run, o.Err)
			}
			heads[at[k]] = o.Head
		}
		n += len(ds)
	}
}

// storedWrites is the number of messages ever stored in the read-model
// buckets and the projector's state bucket.
func storedWrites(tb testing.TB, s *natstest.Server) uint64 {
	tb.Helper()
	var n uint64
	for _, b := range append(projector.Buckets(), projector.BucketState) {
		n += projector.BucketLastSeq(tb, s.JS, b)
	}
	return n
}

func checkpointWrites(tb testing.TB, s *natstest.Server) uint64 {
	return projector.BucketLastSeq(tb, s.JS, projector.BucketState)
}

// apiRequests is the account's JetStream API request count.
func apiRequests(tb testing.TB, s *natstest.Server) uint64 {
	tb.Helper()
	ai, err := s.JS.AccountInfo(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return ai.API.Total
}

// durableMode is one column of BenchmarkProjectorDurable.
type durableMode struct {
	name string
	node []natsnode.Option
	opts []projector.Option
}

func durableModes() []durableMode {
	return []durableMode{
		{name: "sync always", node: nil},
		{name: "sync 2m", node: []natsnode.Option{natsnode.WithSyncInterval("2m")}},
	}
}
