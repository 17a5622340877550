package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/runner"
)

// idle measures what runs suspended on an approval cost a runner since
// runs are partitioned (docs/adr/0019-partitions.md): an idle
// run has no weft_drivers entry and nothing in memory, and the owner of
// its partition reads it from the log (its snapshot and tail) only when a
// command, a report or a timer reaches it. A fresh runner taking over the
// partitions therefore owes the idle runs nothing, and the figures are:
//
//   - a fresh runner subprocess from its start to owning every partition,
//     with the idle runs in the log, against a fresh runner measured the
//     same way before they were created;
//   - that runner's resident memory after a GC, against the baseline
//     runner's;
//   - the first command (a cancel) of an idle run on that runner, which
//     loads the run and records the takeover with its decision, against a
//     raw sync publish.
//
// Each runner's predecessor stopped gracefully (SIGTERM: it released its
// partitions), so that the claim measures the claiming runner's own work
// and not the lease that judges a SIGKILLed runner gone (the recovery
// section measures that).
func (b *bencher) idle(ctx context.Context) error {
	b.stopRuntime()
	n := b.cfg.IdleRuns
	if n == 0 {
		n = pick(b, 300, 20000)
	}
	w, err := b.newWatcher()
	if err != nil {
		return err
	}
	defer w.close()
	parts := b.partitions(ctx)
	stamp := time.Now().UnixNano()

	b.progress("idle runs: baseline, a fresh runner subprocess claiming the %d partitions before the idle runs exist", parts)
	r0, base, err := b.freshRunner(ctx, fmt.Sprintf("bench-idle-0-%d", stamp), parts)
	if err != nil {
		return fmt.Errorf("baseline runner: %w", err)
	}
	r0.term(30 * time.Second)

	ida := fmt.Sprintf("bench-idle-a-%d", stamp)
	b.progress("idle runs: %d runs suspended on an approval under runner subprocess %s", n, ida)
	a, err := b.spawn(ctx, ida, false)
	if err != nil {
		return err
	}
	defer a.kill()
	seq0 := b.lastSeq(ctx)
	prefix := fmt.Sprintf("idle-%d", time.Now().Unix()%100000)
	clients := 64
	created := b.clients(ctx, w, clients, 10*time.Minute, (n+clients-1)/clients, agentApprove, "go", "approval_requested", prefix)
	if len(created.runs) == 0 {
		return fmt.Errorf("no run suspended: %v", created.lastErr)
	}
	msgs := b.lastSeq(ctx) - seq0
	b.progress("  %d runs suspended in %.1f s (%.0f runs/s), %d log messages", len(created.runs), created.elapsed.Seconds(), float64(len(created.runs))/created.elapsed.Seconds(), msgs)
	a.term(30 * time.Second)

	r1, got, err := b.freshRunner(ctx, fmt.Sprintf("bench-idle-b-%d", stamp), parts)
	if err != nil {
		return fmt.Errorf("runner with the idle runs in the log: %w", err)
	}
	defer r1.kill()
	idle := len(created.runs)
	b.add(Row{Section: SectionIdle, Name: fmt.Sprintf("fresh runner, start to all %d partitions owned, %d idle runs in the log", parts, idle),
		Value: msf(got.owned.Owned), Unit: "ms", Baseline: "the same before the idle runs existed", BaseValue: msf(base.owned.Owned), BaseUnit: "ms",
		Note: fmt.Sprintf("%d idle runs (%d log messages); serving at %s (baseline %s); then %d runs in memory, %d read from the log, %d takeovers recorded (runs with work in flight that earlier sections left: an idle run is read only when something reaches it); target: independent of the idle runs",
			idle, msgs, ms(got.owned.Serving), ms(base.owned.Serving), got.owned.Stats.Driven, got.owned.Stats.Loaded, got.owned.Stats.TakenOver)})
	perRun := float64(got.mem.RSS-base.mem.RSS) / float64(idle)
	growth := "no growth the RSS shows"
	if perRun > 0 {
		growth = fmt.Sprintf("%.0f bytes of RSS per idle run, %.1f MiB per 100,000", perRun, perRun*100000/(1<<20))
	}
	b.add(Row{Section: SectionIdle, Name: fmt.Sprintf("runner RSS, %d idle runs in the log", idle), Value: mib(got.mem.RSS), Unit: "MiB",
		Baseline: "a fresh runner before they existed", BaseValue: mib(base.mem.RSS), BaseUnit: "MiB",
		Note: fmt.Sprintf("after a GC, once every partition was owned; live heap %.1f against %.1f MiB; goroutines %d against %d; %s (target ≤ 10 MiB per 100,000)",
			mib(got.mem.Heap), mib(base.mem.Heap), got.mem.Goroutines, base.mem.Goroutines, growth)})

	// The first command of an idle run: the owner reads it back (its
	// snapshot and tail), records the takeover with the decision and
	// appends the cancellation, one run at a time.
	sample := sample(created.runs, pick(b, 20, 200))
	b.progress("idle runs: cancelling %d of them, one at a time, on %s", len(sample), r1.id)
	c := api.NewClient(w.nc)
	var lat []time.Duration
	retries := 0
	for _, run := range sample {
		for {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			t0 := time.Now()
			_, err := c.Cancel(cctx, api.CancelRequest{CommandID: "bench-cancel-" + run, Run: run, Reason: "weft bench: first command of an idle run"})
			d := time.Since(t0)
			cancel()
			if err == nil {
				lat = append(lat, d)
				break
			}
			if !weft.ErrorCode(err).Retryable() || ctx.Err() != nil || retries > 100 {
				return fmt.Errorf("cancel idle run %s: %w", run, err)
			}
			retries++
			time.Sleep(50 * time.Millisecond)
		}
	}
	after, err := r1.poll(ctx)
	if err != nil {
		return err
	}
	slices.Sort(lat)
	b.add(Row{Section: SectionIdle, Name: "first command of an idle run (cancel) p50", Value: msf(pct(lat, 50)), Unit: "ms",
		Baseline: "raw sync publish p50", BaseValue: msf(b.base.sync1P50), BaseUnit: "ms",
		Note: fmt.Sprintf("%d idle runs of the runner before, one at a time: read back from the log (snapshot and tail), takeover recorded with the decision; p99 %s, max %s; %d read from the log, %d takeovers recorded meanwhile; %d retries (unavailable or busy)",
			len(lat), ms(pct(lat, 99)), ms(pct(lat, 100)), after.Stats.Loaded-got.owned.Stats.Loaded, after.Stats.TakenOver-got.owned.Stats.TakenOver, retries)})
	return nil
}

// claim is what a fresh runner subprocess measured of itself: at the
// moment it owned every partition (polled without a GC), and after a GC
// right after.
type claim struct {
	owned memStats
	mem   memStats
}

// freshRunner starts a runner subprocess and waits until it owns all parts
// partitions.
func (b *bencher) freshRunner(ctx context.Context, id string, parts int) (*child, claim, error) {
	c, err := b.spawnWith(ctx, childConfig{ID: id, Partitions: parts})
	if err != nil {
		return nil, claim{}, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st, err := c.poll(ctx)
		if err == nil && st.Owned > 0 {
			m, err := c.mem(ctx)
			if err != nil {
				c.kill()
				return nil, claim{}, err
			}
			b.progress("  %s: serving at %s, all %d partitions owned at %s; RSS %.1f MiB after a GC", id, ms(st.Serving), parts, ms(st.Owned), mib(m.RSS))
			return c, claim{owned: st, mem: m}, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.kill()
			return nil, claim{}, fmt.Errorf("runner %s did not own all %d partitions within 2 minutes (it owns %d)", id, parts, len(st.Stats.Partitions))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// partitions is the deployment's number of partitions: the one recorded
// in weft_partitions, or runner.DefaultPartitions before a runner recorded
// one (the bench's runners take the default).
func (b *bencher) partitions(ctx context.Context) int {
	kv, err := b.srv.js.KeyValue(ctx, runner.PartitionsBucket)
	if err != nil {
		return runner.DefaultPartitions
	}
	e, err := kv.Get(ctx, "config")
	if err != nil {
		return runner.DefaultPartitions
	}
	var c struct {
		Partitions int `json:"partitions"`
	}
	if json.Unmarshal(e.Value(), &c) != nil || c.Partitions < 1 {
		return runner.DefaultPartitions
	}
	return c.Partitions
}
