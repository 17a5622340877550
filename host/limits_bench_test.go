package host_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
)

// BenchmarkCommandFieldSize measures what one command's largest field
// costs the log (docs/adr/0016-input-limits.md): a run_started whose input
// is of the given size is appended to WEFT_EVENTS on a real nats-server
// (file storage), loaded back and folded by the decision core — what every
// runner taking the run over and every refold (audit, projector rebuild)
// pays again. The sizes are a typical input, the MaxText limit, the
// MaxInput limit and the 1.5 MiB input docs/adr/0016-input-limits.md found
// accepted.
func BenchmarkCommandFieldSize(b *testing.B) {
	for _, size := range []int{1 << 10, api.MaxText, api.MaxInput, 3 << 19} {
		b.Run(fmt.Sprintf("input=%dKiB", size>>10), func(b *testing.B) {
			s := natstest.Start(b)
			ctx := context.Background()
			input := strings.Repeat("x", size)
			t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
			i := 0
			b.SetBytes(int64(size))
			for b.Loop() {
				i++
				run := fmt.Sprintf("size-%d", i)
				head, err := s.Log.Head(ctx, run)
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := s.Log.Append(ctx, run, head, t0, events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: input, Runner: "r",
					Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}}); err != nil {
					b.Fatal(err)
				}
				envs, _, err := s.Log.Load(ctx, run)
				if err != nil {
					b.Fatal(err)
				}
				var rec []events.Recorded
				for _, env := range envs {
					ev, err := env.Event()
					if err != nil {
						b.Fatal(err)
					}
					rec = append(rec, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
				}
				_ = aggregate.Fold(rec)
			}
		})
	}
}
