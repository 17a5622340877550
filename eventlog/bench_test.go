package eventlog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/provision"
)

// BenchmarkAppendStrategies measures the two ways to append one decision of
// k events atomically (docs/adr/0001): one message holding the k envelopes
// (what eventlog does) and an atomic batch of k messages (AllowAtomicPublish,
// orbit.go jetstreamext.PublishMsgBatch), each with the per-run
// expected-sequence check. The baseline, measured in the same run on the
// same server, is a plain synchronous publish of one envelope with the same
// check. It prints µs per decision and the ratio to the baseline; it asserts
// nothing about time.
//
//	go tool -modfile=devtools/go.mod task bench-log
func BenchmarkAppendStrategies(b *testing.B) {
	s := natstest.Start(b, natstest.WithAssets(provision.Stream(jetstream.StreamConfig{
		Name: "BENCH_BATCH", Subjects: []string{"bench.batch.>"}, Storage: jetstream.FileStorage,
		AllowAtomicPublish: true, Duplicates: time.Minute,
	}), provision.Stream(jetstream.StreamConfig{
		Name: "BENCH_ONE", Subjects: []string{"bench.one.>"}, Storage: jetstream.FileStorage, Duplicates: time.Minute,
	})))
	ctx := context.Background()
	const decisions = 200 // per strategy and size, per b.N iteration
	sizes := []int{1, 3, 8}
	env := benchEnvelope(b)

	type row struct {
		name string
		k    int
		d    time.Duration
	}
	var rows []row
	measure := func(name string, k int, f func(run string, i int, prevSeq uint64) uint64) {
		var total time.Duration
		for n := 0; n < b.N; n++ {
			run := fmt.Sprintf("%s-%d-%d", metricName(name), k, n)
			var seq uint64
			start := time.Now()
			for i := 0; i < decisions; i++ {
				seq = f(run, i, seq)
			}
			total += time.Since(start)
		}
		rows = append(rows, row{name, k, total / time.Duration(b.N*decisions)})
	}

	b.ResetTimer()
	// Baseline: one envelope, one message, sync publish with the check.
	measure("baseline single event", 1, func(run string, i int, prev uint64) uint64 {
		m := nats.NewMsg("bench.one." + run + ".events")
		m.Data = env
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
		m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "bench.one."+run+".>")
		ack, err := s.JS.PublishMsg(ctx, m)
		if err != nil {
			b.Fatal(err)
		}
		return ack.Sequence
	})
	for _, k := range sizes {
		// One message holding k envelopes, raw (same work as the batch).
		body := benchBody(env, k)
		measure("one message (raw)", k, func(run string, i int, prev uint64) uint64 {
			m := nats.NewMsg("bench.one." + run + ".events")
			m.Data = body
			m.Header.Set(jetstream.MsgIDHeader, run+"-"+strconv.Itoa(i))
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "bench.one."+run+".>")
			ack, err := s.JS.PublishMsg(ctx, m)
			if err != nil {
				b.Fatal(err)
			}
			return ack.Sequence
		})
		// Atomic batch of k messages, expected sequence on the first.
		measure("atomic batch (raw)", k, func(run string, i int, prev uint64) uint64 {
			msgs := make([]*nats.Msg, k)
			for j := range msgs {
				m := nats.NewMsg("bench.batch." + run + ".events")
				m.Data = env
				m.Header.Set(jetstream.MsgIDHeader, run+"-"+strconv.Itoa(i)+"-"+strconv.Itoa(j))
				if j == 0 {
					m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
					m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "bench.batch."+run+".>")
				}
				msgs[j] = m
			}
			ack, err := jetstreamext.PublishMsgBatch(ctx, s.JS, msgs)
			if err != nil {
				b.Fatal(err)
			}
			return ack.Sequence
		})
		// The real eventlog.Append: ULIDs, hash chain, encoding, one message.
		evs := make([]events.Event, k)
		for j := range evs {
			evs[j] = events.ModelRequested{Turn: int64(j), Incarnation: 1}
		}
		var head eventlog.Head
		measure("eventlog.Append", k, func(run string, i int, _ uint64) uint64 {
			if i == 0 {
				head = eventlog.Head{}
			}
			_, h, err := s.Log.Append(ctx, run, head, t0, evs...)
			if err != nil {
				b.Fatal(err)
			}
			head = h
			return h.Seq
		})
	}
	b.StopTimer()

	base := rows[0].d
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "strategy\tevents/decision\tµs/decision\tx baseline\t\n")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%.1f\t%.2f\t\n", r.name, r.k, float64(r.d)/float64(time.Microsecond), float64(r.d)/float64(base))
		if r.k == 3 {
			b.ReportMetric(float64(r.d)/float64(base), "x-base/"+metricName(r.name))
		}
	}
	w.Flush()
}

func metricName(s string) string {
	out := []byte{}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == ' ' || c == '(' || c == ')' || c == '.' {
			continue
		} else {
			out = append(out, c)
		}
	}
	return string(out)
}

// benchEnvelope is a realistic encoded envelope (~300 bytes).
func benchEnvelope(b *testing.B) []byte {
	env, err := events.Encode(events.ModelRequested{Turn: 3, Incarnation: 1})
	if err != nil {
		b.Fatal(err)
	}
	env.ID, env.Run, env.Version, env.Recorded = "01JDQ2Z4V9Q6H8K3M5N7P9R1T3", "run-0001", 7, t0
	env.Prev = env.Hash()
	raw, err := json.Marshal(env)
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func benchBody(env []byte, k int) []byte {
	out := []byte(`{"schema":1,"events":[`)
	for j := 0; j < k; j++ {
		if j > 0 {
			out = append(out, ',')
		}
		out = append(out, env...)
	}
	return append(out, "]}"...)
}

// BenchmarkAppend is one eventlog.Append of a one-event decision, chained
// on the run's head, on the in-process test server.
func BenchmarkAppend(b *testing.B) {
	s := natstest.Start(b)
	ctx := context.Background()
	var head eventlog.Head
	ev := events.ModelRequested{Turn: 3, Incarnation: 1}
	for b.Loop() {
		_, h, err := s.Log.Append(ctx, "bench", head, t0, ev)
		if err != nil {
			b.Fatal(err)
		}
		head = h
	}
}

// BenchmarkLoadTail reads the last message of a 300-message run with
// LoadAfter (what a runner does after a conflict or an unknown outcome).
func BenchmarkLoadTail(b *testing.B) {
	s := natstest.Start(b)
	ctx := context.Background()
	var head, prev eventlog.Head
	ev := events.ModelRequested{Turn: 3, Incarnation: 1}
	for range 300 {
		_, h, err := s.Log.Append(ctx, "bench", head, t0, ev)
		if err != nil {
			b.Fatal(err)
		}
		prev, head = head, h
	}
	for b.Loop() {
		envs, _, err := s.Log.LoadAfter(ctx, "bench", prev)
		if err != nil || len(envs) != 1 {
			b.Fatal(len(envs), err)
		}
	}
}
