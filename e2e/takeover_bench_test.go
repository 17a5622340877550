package e2e_test

import (
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTakeover measures how long a SIGKILLed runner's run waits
// before another runner restarts its replayable body (lease 500 ms in these
// tests; the default is 1 s): time from the kill to the second body start
// in the ledger, over 20 kills. It prints p50, p99 and max.
//
//	go test ./e2e -run '^$' -bench Takeover -benchtime 1x
//	WEFT_E2E_LEASE=1s go test ./e2e -run '^$' -bench Takeover -benchtime 1x
func BenchmarkTakeover(b *testing.B) {
	const n = 40
	for b.Loop() {
		e := newEnv(b)
		e.spawn("rb")
		var lat []time.Duration
		for i := range n {
			a := e.spawn(fmt.Sprint("ra-", i))
			run := fmt.Sprint("tk-", i)
			// Either runner may take the start; measure only the runs
			// that ra drives.
			e.start(run, input{Calls: []call{{Tool: "read", Args: workIn{MS: 60000, Block: true}}}})
			e.waitStarts(run, "1/call_1_1", 1)
			if e.state(run).Runner() != fmt.Sprint("ra-", i) {
				a.kill(b, syscall.SIGKILL)
				continue
			}
			t0 := time.Now()
			a.kill(b, syscall.SIGKILL)
			e.waitStarts(run, "1/call_1_1", 2)
			lat = append(lat, time.Since(t0))
		}
		slices.Sort(lat)
		if len(lat) == 0 {
			b.Fatal("no measurement")
		}
		fmt.Fprintf(os.Stdout, "\ntakeover after SIGKILL (lease %v), %d kills: p50 %v  p99 %v  max %v\n", lease, len(lat),
			lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	}
}
