package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/provision"
)

// phase is what the process and the log did while a set of clients ran.
type phase struct {
	res  clientResult
	cpu  time.Duration
	cost counts // the delta over the phase
}

// counts are what a phase cost, as counters read before and after it.
type counts struct {
	// msgs are the NATS messages in and out of the runner's and the
	// clients' connections (client-side nc.Stats), without the bench's
	// own watcher deliveries.
	msgs uint64
	// appends are the messages stored in WEFT_EVENTS.
	appends uint64
	// stored are the messages stored in every stream (the log, tasks, KV
	// buckets): each is one acknowledged write.
	stored uint64
	// api are the JetStream API requests of the account.
	api uint64
	// batches and batched are the group-commit batches and the messages
	// they held (eventlog.ReadCommitStats).
	batches, batched uint64
	// streams are the messages stored per stream (a KV bucket is its
	// KV_ stream): where the acknowledged writes of stored go.
	streams map[string]uint64
	// held are the messages each stream holds: a delta of stored less
	// one of held is what the stream removed (removals).
	held map[string]int64
}

func (c counts) minus(o counts) counts {
	d := counts{msgs: c.msgs - o.msgs, appends: c.appends - o.appends, stored: c.stored - o.stored, api: c.api - o.api,
		batches: c.batches - o.batches, batched: c.batched - o.batched, streams: map[string]uint64{}, held: map[string]int64{}}
	for name, n := range c.streams {
		if n > o.streams[name] {
			d.streams[name] = n - o.streams[name]
		}
	}
	for name, n := range c.held {
		d.held[name] = n - o.held[name]
	}
	return d
}

// removals are the messages the streams removed during the phase: a
// work-queue task acknowledged, a message deleted, a message or marker
// whose TTL or max age expired, a value replaced or purged. Stored less
// held, per stream, never below 0.
func (c counts) removals() uint64 {
	var n uint64
	for name := range c.held {
		n += removedFrom(c, name)
	}
	return n
}

// removedFrom is the messages stream removed during the phase c.
func removedFrom(c counts, stream string) uint64 {
	if r := int64(c.streams[stream]) - c.held[stream]; r > 0 {
		return uint64(r)
	}
	return 0
}

// snapshotCalls is the JetStream API requests one snapshot makes (account
// info, then one page of the stream list): a delta of two snapshots holds
// the later one's account info and the earlier one's list.
const snapshotCalls = 2

// snapshot reads the counters.
func (b *bencher) snapshot(ctx context.Context, w *watcher) counts {
	st, ws := b.rt.nc.Stats(), w.nc.Stats()
	seen, _ := w.sub.Delivered()
	c := counts{msgs: st.InMsgs + st.OutMsgs + ws.InMsgs + ws.OutMsgs - uint64(seen)}
	if ai, err := b.srv.js.AccountInfo(ctx); err == nil {
		c.api = ai.API.Total
	}
	c.streams, c.held = map[string]uint64{}, map[string]int64{}
	l := b.srv.js.ListStreams(ctx)
	for si := range l.Info() {
		c.stored += si.State.LastSeq
		c.streams[si.Config.Name] = si.State.LastSeq
		c.held[si.Config.Name] = int64(si.State.Msgs)
		if si.Config.Name == provision.EventsStream {
			c.appends = si.State.LastSeq
		}
	}
	gs := eventlog.ReadCommitStats()
	c.batches, c.batched = gs.Batches, gs.Batched
	return c
}

func (p phase) perRun(v uint64) float64 {
	if len(p.res.runs) == 0 {
		return 0
	}
	return float64(v) / float64(len(p.res.runs))
}

func (p phase) cpuPerRun() time.Duration {
	if len(p.res.runs) == 0 {
		return 0
	}
	return p.cpu / time.Duration(len(p.res.runs))
}

// roundTrips are the phase's JetStream round trips: API requests and
// acknowledged publishes (a group-commit batch is one). Direct gets and
// core request-replies (the runner's command API) are not counted.
func (p phase) roundTrips() uint64 {
	return p.cost.api - snapshotCalls + p.cost.stored - p.cost.batched + p.cost.batches
}

// fsyncs are the phase's syncs to disk under sync_interval: always,
// derived (the server does not count them): one per acknowledged write,
// two per group-commit batch (its staging store and the stream), and one
// per message a stream removed (removals: the server syncs the removal's
// record before it answers or acknowledges). Measured against the server's
// own fsyncs (strace, docs/adr/0036-driver-entry-removed-by-sequence.md):
// consumer state writes, not counted, were 0.1 per run. An upper bound: a
// value replaced (a KV put over history 1, a rollup) or expired by max age
// is removed "via limits", with no record synced of its own (filestore
// removeMsg), yet counted here.
func (p phase) fsyncs() uint64 {
	return p.cost.stored - p.cost.batched + 2*p.cost.batches + p.cost.removals()
}

// measure runs clients of agentSteps and what they cost.
func (b *bencher) measure(ctx context.Context, w *watcher, n int, d time.Duration, max int, prefix string) phase {
	c0, cpu0 := b.snapshot(ctx, w), cpuTime()
	res := b.clients(ctx, w, n, d, max, agentSteps, "go", "run_finished", prefix)
	cpu := cpuTime() - cpu0
	return phase{res: res, cpu: cpu, cost: b.snapshot(ctx, w).minus(c0)}
}

// floorAppends is the fewest durable writes a run of agentSteps can make:
// one per step (3), its start and its answer.
const floorAppends = 5

// costRows adds a run's costs per run beside the floor.
func (b *bencher) costRows(p phase, clients string) {
	floor := "floor: one durable write per step, start and answer"
	b.add(Row{Section: SectionRun, Name: "appends per run, " + clients, Value: p.perRun(p.cost.appends), Unit: "appends",
		Baseline: floor, BaseValue: floorAppends, BaseUnit: "appends", Note: "messages stored in WEFT_EVENTS per run"})
	b.add(Row{Section: SectionRun, Name: "NATS messages per run, " + clients, Value: p.perRun(p.cost.msgs), Unit: "msgs",
		Baseline: floor + " (publish and ack)", BaseValue: 2 * floorAppends, BaseUnit: "msgs",
		Note: "in and out of the runner's and the clients' connections (client-side stats), without the bench's watcher"})
	b.add(Row{Section: SectionRun, Name: "JetStream round trips per run, " + clients, Value: p.perRun(p.roundTrips()), Unit: "round trips",
		Baseline: floor, BaseValue: floorAppends, BaseUnit: "round trips",
		Note: "the account's JetStream API requests and acknowledged publishes (a group-commit batch counts once); direct gets and the command API's request-replies are not counted"})
	note := fmt.Sprintf("derived, not counted by the server: one per acknowledged write to any stream, two per group-commit batch, one per message a stream removed (%.2f per run: task acknowledgements, deletes, expiries), an upper bound: a KV value replaced by a put or expired by max age is counted, though the server does not sync its removal on its own; consumer state writes not counted (~0.1 per run measured)", p.perRun(p.cost.removals()))
	if !b.srv.sync {
		note += "; this server syncs on its interval, so these are the fsyncs the run would cost under sync_interval: always"
	}
	name := "fsyncs per run, " + clients
	b.add(Row{Section: SectionRun, Name: name, Value: p.perRun(p.fsyncs()), Unit: "fsyncs",
		Baseline: floor, BaseValue: floorAppends, BaseUnit: "fsyncs", Note: note})
	b.writeRows(p, clients)
}

// writeRows breaks a phase's acknowledged writes down by stream, the
// largest first: the messages each stream (a KV bucket is its KV_ stream)
// stored per run. The events stream's appends, the claims and the task
// copies are synced in batches when group commit batched them
// (CommitStats); the others' writes are one fsync each.
func (b *bencher) writeRows(p phase, clients string) {
	names := make([]string, 0, len(p.cost.streams))
	for name, n := range p.cost.streams {
		if n > 0 {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(x, y string) int {
		if c := cmp.Compare(p.cost.streams[y], p.cost.streams[x]); c != 0 {
			return c
		}
		return cmp.Compare(x, y)
	})
	for _, name := range names {
		b.add(Row{Section: SectionRun, Name: "writes per run, " + clients + ", " + name, Value: p.perRun(p.cost.streams[name]), Unit: "writes",
			Note: fmt.Sprintf("messages the stream stored per run (its last sequence's delta: a KV delete or purge marker is one); it removed %.2f per run (acknowledged, deleted, expired, replaced), each an fsync at most: a KV value replaced by a put or expired by max age is counted, though not synced on its own", p.perRun(removedFrom(p.cost, name)))})
	}
}

// runs measures run latency, durable steps and throughput.
func (b *bencher) runs(ctx context.Context) error {
	if err := b.startRuntime(ctx); err != nil {
		return err
	}
	w, err := b.newWatcher()
	if err != nil {
		return err
	}
	defer w.close()
	tag := fmt.Sprintf("r%d", time.Now().Unix()%100000)

	// Warm up (connections, consumers, the code paths).
	b.clients(ctx, w, 4, 5*time.Second, 5, agentSteps, "go", "run_finished", tag+"-warm")

	b.progress("run latency: 1 client, sequential runs of %s (3 tool turns, then the answer)", agentSteps)
	lat := b.measure(ctx, w, 1, pick(b, 3*time.Second, 20*time.Second), pick(b, 100, 1000), tag+"-lat")
	if len(lat.res.runs) == 0 {
		return fmt.Errorf("%w: %d failed, last: %v", errNoRuns, lat.res.failed, lat.res.lastErr)
	}
	appendsPerRun := lat.perRun(lat.cost.appends)
	base := b.base.sync1P50
	b.add(Row{Section: SectionRun, Name: "run latency p50, 1 client", Value: msf(pct(lat.res.lat, 50)), Unit: "ms",
		Baseline: "raw sync publish p50", BaseValue: msf(base), BaseUnit: "ms",
		Note: fmt.Sprintf("p99 %s, max %s over %d runs; %.1f appends and %.1f NATS messages (runner's connection, in+out) per run; the ratio is how many raw appends' time a run takes",
			ms(pct(lat.res.lat, 99)), ms(pct(lat.res.lat, 100)), len(lat.res.runs), appendsPerRun, lat.perRun(lat.cost.msgs))})
	b.costRows(lat, "1 client")

	steps, err := b.stepTimes(ctx, lat.res.runs)
	if err != nil {
		return err
	}
	if len(steps) > 0 {
		for _, p := range []int{50, 99, 100} {
			name := fmt.Sprintf("durable step p%d, 1 client", p)
			if p == 100 {
				name = "durable step max, 1 client"
			}
			r := Row{Section: SectionStep, Name: name, Value: msf(pct(steps, p)), Unit: "ms", Baseline: "raw sync publish p50", BaseValue: msf(base), BaseUnit: "ms"}
			if p == 50 {
				r.Note = fmt.Sprintf("from attempt_fenced to attempt_reported, by their recorded times, over %d steps", len(steps))
			}
			b.add(r)
		}
	}

	for _, n := range []int{1, 16, 64} {
		b.progress("throughput: %d client%s", n, plural(n))
		p := b.measure(ctx, w, n, pick(b, 3*time.Second, 20*time.Second), 0, fmt.Sprintf("%s-c%d", tag, n))
		if len(p.res.runs) == 0 {
			return fmt.Errorf("%w at %d clients: %d failed, last: %v", errNoRuns, n, p.res.failed, p.res.lastErr)
		}
		rate := float64(len(p.res.runs)) / p.res.elapsed.Seconds()
		perRun := max(p.perRun(p.cost.appends), 1)
		logRate, logName := b.base.sync1, "log-bound runs/s, 1 writer"
		if n > 1 {
			logRate, logName = b.base.sync16, "log-bound runs/s, 16 writers"
		}
		note := fmt.Sprintf("p50 %s, p99 %s; Start's reply p50 %s, p99 %s; log-bound = raw sync publishes/s ÷ %.1f appends per run", ms(pct(p.res.lat, 50)), ms(pct(p.res.lat, 99)), ms(pct(p.res.startLat, 50)), ms(pct(p.res.startLat, 99)), perRun)
		if p.res.failed > 0 {
			note += fmt.Sprintf("; %d runs failed (last: %v)", p.res.failed, p.res.lastErr)
		}
		b.add(Row{Section: SectionRun, Name: fmt.Sprintf("runs/s, %d client%s", n, plural(n)), Value: rate, Unit: "runs/s",
			Baseline: logName, BaseValue: logRate / perRun, BaseUnit: "runs/s", Note: note})
		b.add(Row{Section: SectionRun, Name: fmt.Sprintf("CPU per run, %d client%s", n, plural(n)), Value: msf(p.cpuPerRun()), Unit: "ms",
			Baseline: "CPU of as many raw publishes", BaseValue: msf(b.base.sync1CPU) * perRun, BaseUnit: "ms",
			Note: fmt.Sprintf("the whole process: runner, worker, clients%s; %.1f NATS messages per run", b.serverInCPU(), p.perRun(p.cost.msgs))})
		if n == 64 {
			b.costRows(p, "64 clients")
			if p.res.elapsed > 0 {
				b.add(Row{Section: SectionRun, Name: "fsyncs per second, 64 clients", Value: float64(p.fsyncs()) / p.res.elapsed.Seconds(), Unit: "fsyncs/s",
					Baseline: "raw sync publishes/s, 16 writers (one fsync each under sync always)", BaseValue: b.base.sync16, BaseUnit: "fsyncs/s",
					Note: fmt.Sprintf("derived as for fsyncs per run; %d group-commit batches of %.1f messages on average", p.cost.batches, avg(p.cost.batched, p.cost.batches))})
			}
		}
		if n > 1 {
			steps, err := b.stepTimes(ctx, sample(p.res.runs, 200))
			if err == nil && len(steps) > 0 {
				b.add(Row{Section: SectionStep, Name: fmt.Sprintf("durable step p50, %d clients", n), Value: msf(pct(steps, 50)), Unit: "ms",
					Baseline: "raw sync publish p50", BaseValue: msf(base), BaseUnit: "ms",
					Note: fmt.Sprintf("p99 %s, max %s", ms(pct(steps, 99)), ms(pct(steps, 100)))})
			}
		}
	}
	return nil
}

func avg(total, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return float64(total) / float64(n)
}

func (b *bencher) serverInCPU() string {
	if b.srv.srv != nil {
		return " and the embedded server"
	}
	return " (not the external server)"
}

func sample(runs []string, n int) []string {
	if len(runs) <= n {
		return runs
	}
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, runs[i*len(runs)/n])
	}
	return out
}

// stepTimes reads runs and returns, sorted, the time from each attempt's
// fence to its report, by the recorded times.
func (b *bencher) stepTimes(ctx context.Context, runs []string) ([]time.Duration, error) {
	l := eventlog.New(b.srv.js)
	var out []time.Duration
	for _, id := range runs {
		envs, _, err := l.Load(ctx, id)
		if err != nil {
			return nil, err
		}
		fenced := map[string]time.Time{}
		for _, env := range envs {
			var a struct {
				Action  string `json:"action"`
				Attempt int    `json:"attempt"`
			}
			switch env.Type {
			case events.NameAttemptFenced, events.NameAttemptReported:
				if err := json.Unmarshal(env.Payload, &a); err != nil {
					return nil, err
				}
			default:
				continue
			}
			key := fmt.Sprintf("%s#%d", a.Action, a.Attempt)
			if env.Type == events.NameAttemptFenced {
				fenced[key] = env.Recorded
			} else if t, ok := fenced[key]; ok {
				out = append(out, env.Recorded.Sub(t))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

func (b *bencher) lastSeq(ctx context.Context) uint64 {
	s, err := b.srv.js.Stream(ctx, provision.EventsStream)
	if err != nil {
		return 0
	}
	return s.CachedInfo().State.LastSeq
}
