package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/provision"
)

// baselines are the raw JetStream figures of the run.
type baselines struct {
	sync1, sync16 float64       // sync publishes per second, 1 and 16 writers
	sync1P50      time.Duration // latency of one sync publish, 1 writer
	sync1CPU      time.Duration // CPU per sync publish, 1 writer (whole process)
	async         float64       // async publishes per second
	read          float64       // ordered-consumer messages per second
}

// rawStream is the stream of the raw baselines: WEFT_EVENTS' configuration
// on other subjects.
const rawStream = "BENCH_RAW"

func rawConfig() jetstream.StreamConfig {
	c := provision.EventsConfig()
	c.Name, c.Subjects, c.Description = rawStream, []string{"bench.raw.>"}, "weft bench: raw baselines"
	return c
}

// rawBody is a log message body of one realistic event, as eventlog
// writes it.
func rawBody() []byte {
	env, _ := events.Encode(events.ModelRequested{Turn: 3, Incarnation: 1})
	env.ID, env.Run, env.Version, env.Recorded = "01JDQ2Z4V9Q6H8K3M5N7P9R1T3", "bench-0001", 7, time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	env.Prev = env.Hash()
	raw, _ := jsonMarshal(env)
	return append(append([]byte(`{"schema":1,"events":[`), raw...), "]}"...)
}

// rawPublish is one synchronous publish with the log's headers, chained on
// the subject's last sequence.
func (b *bencher) rawPublish(ctx context.Context, subject string, id int, prev uint64, body []byte) (uint64, error) {
	m := nats.NewMsg(subject + ".events")
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, subject+"-"+strconv.Itoa(id))
	m.Header.Set(jetstream.ExpectedStreamHeader, rawStream)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(prev, 10))
	m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, subject+".>")
	m.Header.Set(eventlog.HeaderRun, "bench-0001")
	m.Header.Set(eventlog.HeaderVersion, strconv.Itoa(id+1))
	m.Header.Set(eventlog.HeaderCount, "1")
	ack, err := b.srv.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// writers runs op from n goroutines for d (op gets the writer and its
// count so far) and returns the ops per second and the latencies.
func writers(ctx context.Context, n int, d time.Duration, op func(w, i int) error) (float64, []time.Duration, error) {
	var (
		total atomic.Int64
		mu    sync.Mutex
		lat   []time.Duration
		first error
		wg    sync.WaitGroup
	)
	stop := time.Now().Add(d)
	start := time.Now()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; time.Now().Before(stop) && ctx.Err() == nil; i++ {
				t0 := time.Now()
				if err := op(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t0))
				total.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	el := time.Since(start)
	slices.Sort(lat)
	return float64(total.Load()) / el.Seconds(), lat, first
}

func (b *bencher) baselines(ctx context.Context) error {
	b.progress("baselines: raw JetStream with the log's headers")
	if _, err := b.srv.js.CreateOrUpdateStream(ctx, rawConfig()); err != nil {
		return err
	}
	body := rawBody()
	d := pick(b, time.Second, 3*time.Second)
	run := func(n int, tag string) (float64, []time.Duration, time.Duration, error) {
		prev := make([]uint64, n)
		cpu0 := cpuTime()
		rate, lat, err := writers(ctx, n, d, func(w, i int) error {
			seq, err := b.rawPublish(ctx, fmt.Sprintf("bench.raw.%s%d", tag, w), i, prev[w], body)
			prev[w] = seq
			return err
		})
		var cpuPer time.Duration
		if len(lat) > 0 {
			cpuPer = (cpuTime() - cpu0) / time.Duration(len(lat))
		}
		return rate, lat, cpuPer, err
	}
	var err error
	var lat []time.Duration
	if b.base.sync1, lat, b.base.sync1CPU, err = run(1, "a"); err != nil {
		return err
	}
	b.base.sync1P50 = pct(lat, 50)
	b.add(Row{Section: SectionBaseline, Name: "raw sync publish, 1 writer", Value: b.base.sync1, Unit: "ops/s",
		Note: fmt.Sprintf("p50 %s, CPU %s per publish; a %d-byte log message with the log's headers and the expected-sequence check", ms(b.base.sync1P50), ms(b.base.sync1CPU), len(body))})
	if b.base.sync16, _, _, err = run(16, "b"); err != nil {
		return err
	}
	b.add(Row{Section: SectionBaseline, Name: "raw sync publish, 16 writers", Value: b.base.sync16, Unit: "ops/s"})

	// Async publish: no chain (the expected sequence is unknown until the
	// ack), the same body and message ids. Under sync_interval: always
	// every one is an fsync (a few hundred per second on a loaded disk), so
	// a quarter as many, and the acknowledgements are waited for longer:
	// a stall is the disk's pace, not a failure.
	n := pick(b, 20000, 100000)
	if b.srv.sync {
		n /= 4
	}
	start := time.Now()
	for i := range n {
		m := nats.NewMsg("bench.raw.async.events")
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, "async-"+strconv.Itoa(i))
		if _, err := b.srv.js.PublishMsgAsync(m, jetstream.WithStallWait(30*time.Second)); err != nil {
			return err
		}
	}
	select {
	case <-b.srv.js.PublishAsyncComplete():
	case <-time.After(2 * time.Minute):
		return errors.New("async publishes not acknowledged within 2 min")
	}
	b.base.async = float64(n) / time.Since(start).Seconds()
	b.add(Row{Section: SectionBaseline, Name: "raw async publish", Value: b.base.async, Unit: "ops/s"})

	rate, count, err := orderedRead(ctx, b.srv.js, rawStream)
	if err != nil {
		return err
	}
	b.base.read = rate
	b.add(Row{Section: SectionBaseline, Name: "raw ordered-consumer read", Value: rate, Unit: "msgs/s", Note: fmt.Sprintf("%d messages of %s", count, rawStream)})
	return nil
}

// orderedRead reads stream from its first message to its last through an
// ordered consumer and returns messages per second and their count.
func orderedRead(ctx context.Context, js jetstream.JetStream, stream string) (float64, uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, 0, err
	}
	last := s.CachedInfo().State.LastSeq
	if last == 0 {
		return 0, 0, errors.New("empty stream")
	}
	start := time.Now()
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return 0, 0, err
	}
	it, err := c.Messages()
	if err != nil {
		return 0, 0, err
	}
	defer it.Stop()
	var count uint64
	for {
		m, err := it.Next()
		if err != nil {
			return 0, 0, err
		}
		count++
		md, err := m.Metadata()
		if err != nil {
			return 0, 0, err
		}
		if md.Sequence.Stream >= last {
			break
		}
	}
	return float64(count) / time.Since(start).Seconds(), count, nil
}

// appends measures eventlog.Append against the raw sync publish.
func (b *bencher) appends(ctx context.Context) error {
	b.progress("log append: eventlog.Append of one decision (one event)")
	l := eventlog.New(b.srv.js)
	d := pick(b, time.Second, 3*time.Second)
	at := time.Now()
	ev := events.ModelRequested{Turn: 3, Incarnation: 1}
	for _, n := range []int{1, 16} {
		heads := make([]eventlog.Head, n)
		prefix := fmt.Sprintf("benchlog%d-%d-", n, time.Now().UnixNano())
		cpu0 := cpuTime()
		rate, lat, err := writers(ctx, n, d, func(w, _ int) error {
			_, h, err := l.Append(ctx, prefix+strconv.Itoa(w), heads[w], at, ev)
			heads[w] = h
			return err
		})
		// The log must hold only runs: these are not.
		for w := range n {
			_ = b.srv.purge(ctx, provision.EventsStream, eventlog.RunFilter(prefix+strconv.Itoa(w)))
		}
		if err != nil {
			return err
		}
		base, name := b.base.sync1, "raw sync publish, 1 writer"
		note := fmt.Sprintf("p50 %s, CPU %s per append (raw publish: p50 %s, CPU %s)", ms(pct(lat, 50)), ms((cpuTime()-cpu0)/time.Duration(max(len(lat), 1))), ms(b.base.sync1P50), ms(b.base.sync1CPU))
		if n == 16 {
			base, name, note = b.base.sync16, "raw sync publish, 16 writers", ""
		}
		b.add(Row{Section: SectionAppend, Name: fmt.Sprintf("eventlog.Append, %d writer%s", n, plural(n)), Value: rate, Unit: "ops/s",
			Baseline: name, BaseValue: base, BaseUnit: "ops/s", Note: note})
	}
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// pct is the p-th percentile of sorted.
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[min(max(i-1, 0), len(sorted)-1)]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64) + " ms"
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
