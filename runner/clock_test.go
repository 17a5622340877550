package runner_test

import (
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/tools"
)

// A run's recorded times never go back: a runner
// whose clock is an hour behind the run's last event records its decisions
// at the run's last recorded time at the earliest (max(now, last recorded
// time)), so a takeover by it does not stamp events before the ones they
// follow.
func TestRecordedTimeNeverGoesBack_RunnerClockBehind(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	m := model.NewRules("s", model.Rule{Name: "done", Match: func(model.Request) bool { return true }, Step: model.Answer("done")})
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))
	var s aggregate.State
	appendDecided(t, h, "ck", &s, aggregate.Start{Run: "ck", Agent: a.Ref(), Input: "x", Limits: a.Limits(), Runner: "ghost"})
	h.release("ghost")
	h.startRunner([]*agent.Agent{a}, runner.WithoutScan(), runner.WithClock(func() time.Time { return time.Now().Add(-time.Hour) })) // the cancel takes the run over
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "ck"}); err != nil {
		t.Fatal(err)
	}
	if _, out := finished(t, h, "ck"); out.Kind != events.OutcomeCancelled {
		t.Fatalf("outcome %s", events.DescribeOutcome(out))
	}
	envs, _, err := h.srv.Log.Load(ctx(t), "ck")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(envs); i++ {
		if envs[i].Recorded.Before(envs[i-1].Recorded) {
			t.Fatalf("event %d (%s) recorded at %s, before event %d (%s) at %s", envs[i].Version, envs[i].Type, envs[i].Recorded, envs[i-1].Version, envs[i-1].Type, envs[i-1].Recorded)
		}
	}
}
