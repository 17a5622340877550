package timer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/timer"
)

// BenchmarkTimerMechanisms measures the two candidate durable timer
// mechanisms of ADR 0002 in one run and prints a table of ratios against a
// baseline (a plain JetStream publish of the same body):
//
//   - schedule: a JetStream scheduled message per timer (the chosen one);
//   - kvsweep: a KV entry per timer and a sweeper that scans the bucket
//     every 100 ms and fires what is due.
//
// For each it reports the arm rate and the firing lateness (p50, p99) of
// n timers all due one second after arming started.
//
//	go test ./timer -run '^$' -bench TimerMechanisms -benchtime 1x
func BenchmarkTimerMechanisms(b *testing.B) {
	const n = 2000
	type row struct {
		name          string
		armPerSec     float64
		p50, p99, max time.Duration
	}
	var rows []row
	for b.Loop() {
		rows = rows[:0]
		ctx := context.Background()

		// Baseline: plain publish, no timer semantics.
		{
			_, js := startServer(b, b.TempDir())
			if err := timer.Ensure(ctx, js); err != nil {
				b.Fatal(err)
			}
			body, _ := json.Marshal(timer.Fired{Schema: 1, Run: "r", Key: "k", At: time.Now()})
			start := time.Now()
			for i := range n {
				if _, err := js.Publish(ctx, timer.SubjectDue+".r"+strconv.Itoa(i), body); err != nil {
					b.Fatal(err)
				}
			}
			rows = append(rows, row{name: "baseline publish", armPerSec: n / time.Since(start).Seconds()})
		}

		// Schedules.
		{
			_, js := startServer(b, b.TempDir())
			if err := timer.Ensure(ctx, js); err != nil {
				b.Fatal(err)
			}
			tm := timer.New(js)
			start := time.Now()
			due := start.Add(time.Second)
			for i := range n {
				if err := tm.Arm(ctx, "r"+strconv.Itoa(i), "k", due); err != nil {
					b.Fatal(err)
				}
			}
			arm := n / time.Since(start).Seconds()
			late := collect(b, n, func(ctx context.Context, fire func(string)) {
				_ = tm.Consume(ctx, func(_ context.Context, f timer.Fired) error { fire(f.Run); return nil })
			}, due)
			rows = append(rows, row{"schedule (@at)", arm, late[n/2], late[n*99/100], late[n-1]})
		}

		// KV + sweeper.
		{
			_, js := startServer(b, b.TempDir())
			kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_timers", Storage: jetstream.FileStorage})
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			due := start.Add(time.Second)
			for i := range n {
				if _, err := kv.Put(ctx, "r"+strconv.Itoa(i)+".k", []byte(due.Format(time.RFC3339Nano))); err != nil {
					b.Fatal(err)
				}
			}
			arm := n / time.Since(start).Seconds()
			late := collect(b, n, func(ctx context.Context, fire func(string)) {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-tick.C:
					}
					lister, err := kv.ListKeys(ctx)
					if err != nil {
						continue
					}
					for k := range lister.Keys() {
						e, err := kv.Get(ctx, k)
						if err != nil {
							continue
						}
						at, _ := time.Parse(time.RFC3339Nano, string(e.Value()))
						if !time.Now().Before(at) {
							if err := kv.Delete(ctx, k, jetstream.LastRevision(e.Revision())); err == nil {
								fire(k)
							}
						}
					}
				}
			}, due)
			rows = append(rows, row{"kv + 100ms sweeper", arm, late[n/2], late[n*99/100], late[n-1]})
		}
	}
	base := rows[0].armPerSec
	fmt.Fprintf(os.Stdout, "\n%-20s %12s %8s %10s %10s %10s\n", "mechanism (n=2000)", "arm/s", "ratio", "late p50", "late p99", "late max")
	for _, r := range rows {
		fmt.Fprintf(os.Stdout, "%-20s %12.0f %8.2f %10v %10v %10v\n", r.name, r.armPerSec, r.armPerSec/base,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.max.Round(time.Millisecond))
	}
}

// collect runs consume until n distinct firings arrived and returns their
// lateness against due, sorted.
func collect(b *testing.B, n int, consume func(context.Context, func(string)), due time.Time) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]bool{}
	var late []time.Duration
	done := make(chan struct{})
	go consume(ctx, func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if seen[id] {
			return
		}
		seen[id] = true
		late = append(late, time.Since(due))
		if len(late) == n {
			close(done)
		}
	})
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("only %d of %d timers fired", len(late), n)
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(late)
	return late
}
