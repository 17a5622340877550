package eventlog_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/natsnode"
)

// BenchmarkGroupCommit measures group commit (docs/adr/0025-group-commit.md)
// against one publish per Append, both on the same server in the same run,
// under sync_interval: always and the default: w writers, each extending
// its own run decision after decision. It prints appends per second, the
// group-commit batches' average size and the ratio to one publish per
// Append; it asserts nothing about time.
//
//	go test -run '^$' -bench GroupCommit ./eventlog/
func BenchmarkGroupCommit(b *testing.B) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "sync\twriters\tone publish per Append (appends/s)\tgroup commit (appends/s)\tratio\tbatch size")
	for _, always := range []bool{true, false} {
		s := natstest.Start(b, natstest.WithNodeOptions(natsnode.WithSyncAlways(always)))
		plain, group := eventlog.New(s.JS), eventlog.New(s.JS, eventlog.WithGroupCommit())
		for _, w := range []int{1, 16, 64} {
			const per = 40
			run := func(l *eventlog.Log, tag string) float64 {
				var wg sync.WaitGroup
				start := time.Now()
				for i := range w {
					wg.Add(1)
					go func() {
						defer wg.Done()
						id := fmt.Sprintf("%s-%v-%d-%d", tag, always, w, i)
						var h eventlog.Head
						for j := 0; j < per*b.N; j++ {
							_, nh, err := l.Append(ctxT(b), id, h, t0, ev(int64(j)))
							if err != nil {
								b.Error(err)
								return
							}
							h = nh
						}
					}()
				}
				wg.Wait()
				return float64(w*per*b.N) / time.Since(start).Seconds()
			}
			p := run(plain, "p")
			st0 := eventlog.ReadCommitStats()
			g := run(group, "g")
			st1 := eventlog.ReadCommitStats()
			size := 0.0
			if n := st1.Batches - st0.Batches; n > 0 {
				size = float64(st1.Batched-st0.Batched) / float64(n)
			}
			mode := "default"
			if always {
				mode = "always"
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t×%.2f\t%.1f\n", mode, w, p, g, g/p, size)
		}
	}
	tw.Flush()
}
