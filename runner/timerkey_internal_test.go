package runner

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/weftrun/weft/aggregate"
)

// Timer keys are injective: two timers of one run
// never share a key, so arming the second never replaces the first (the
// durable schedule is rolled up by subject). "1/call.1" and "1/call_1"
// collided when every character outside a token was replaced by "_".
func TestTimerKeysAreInjective(t *testing.T) {
	t.Parallel()
	if a, b := timerKey(aggregate.Timer{Kind: aggregate.TimerToolTimeout, Action: "1/call.1", Attempt: 1}), timerKey(aggregate.Timer{Kind: aggregate.TimerToolTimeout, Action: "1/call_1", Attempt: 1}); a == b {
		t.Fatalf("1/call.1 and 1/call_1 share the timer key %s", a)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	alphabet := []rune("ab1_-./*> \t·é")
	seen := map[string]aggregate.Timer{}
	kinds := []aggregate.TimerKind{aggregate.TimerApprovalExpiry, aggregate.TimerSettleWindow, aggregate.TimerModelRetry, aggregate.TimerToolTimeout}
	for range 20000 {
		var b strings.Builder
		b.WriteString(fmt.Sprint(rng.IntN(3)+1, "/"))
		for range rng.IntN(6) {
			b.WriteRune(alphabet[rng.IntN(len(alphabet))])
		}
		tm := aggregate.Timer{Kind: kinds[rng.IntN(len(kinds))], Action: b.String(), Attempt: rng.IntN(3), Revision: rng.IntN(3), Turn: int64(rng.IntN(3))}
		k := timerKey(tm)
		if strings.ContainsAny(k, ". *>\t\r\n") || k == "" {
			t.Fatalf("key %q of %+v is not one subject token", k, tm)
		}
		if prev, ok := seen[k]; ok && prev != tm {
			t.Fatalf("%+v and %+v share the timer key %s", prev, tm, k)
		}
		seen[k] = tm
	}
}
