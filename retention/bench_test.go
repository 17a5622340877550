package retention

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkApply measures a purge of N finished runs (docs/adr/0030)
// against a baseline of the same run: appending those runs (four
// decisions each, as the fixtures' finished runs). It reports the
// purge's milliseconds per run and its ratio to the append's.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{100, 400} {
		b.Run(fmt.Sprintf("runs=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s := deployment(b)
				runs := make([]string, n)
				start := time.Now()
				for i := range runs {
					runs[i] = fmt.Sprintf("bench-%04d", i)
					appendAt(b, s, runs[i], t0, finished(runs[i])...)
				}
				appended := time.Since(start)
				waitViews(b, s, runs[n-1])
				b.StartTimer()
				start = time.Now()
				res, err := Apply(context.Background(), s.JS, Options{OlderThan: age, Now: now})
				purged := time.Since(start)
				b.StopTimer()
				if err != nil || len(res.Purged) != n {
					b.Fatalf("purged %d of %d: %v", len(res.Purged), n, err)
				}
				b.ReportMetric(float64(purged.Microseconds())/1000/float64(n), "purge-ms/run")
				b.ReportMetric(float64(purged)/float64(appended), "purge/append")
			}
		})
	}
}
