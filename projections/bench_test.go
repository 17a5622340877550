package projections

import (
	"testing"

	"github.com/weftrun/weft/projections/projtest"
)

// BenchmarkRebuildFold is the fold of projector.Rebuild: every event of 200
// generated runs (a fixed seed) applied to its run's view in log order.
// docs/adr/0017 compares it before and after the views took their rules
// from the aggregate.
func BenchmarkRebuildFold(b *testing.B) {
	_, log := projtest.Histories(17, 200)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		views := map[string]RunView{}
		for _, r := range log {
			views[r.Run] = Apply(views[r.Run], r)
		}
	}
	b.ReportMetric(float64(len(log)), "events/op")
}

// BenchmarkIncrementalApply is the projector's live path for one event:
// decode the stored view, apply the event, encode the view again, over
// every event of 200 generated runs.
func BenchmarkIncrementalApply(b *testing.B) {
	_, log := projtest.Histories(17, 200)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		stored := map[string][]byte{}
		for _, r := range log {
			var v RunView
			if enc, ok := stored[r.Run]; ok {
				var err error
				if v, err = DecodeView(enc); err != nil {
					b.Fatal(err)
				}
			}
			enc, err := Apply(v, r).Encode()
			if err != nil {
				b.Fatal(err)
			}
			stored[r.Run] = enc
		}
	}
	b.ReportMetric(float64(len(log)), "events/op")
}
