package runner_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/syncbuf"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/runner"
	"github.com/weftrun/weft/timer"
	"github.com/weftrun/weft/tools"
)

// TestSemantics8_ARunnerWhoseTimerConsumerFailedAtStartStillFiresTimers
// (docs/semantics.md §8: pending work is retried, never dropped; scenario
// 20, an approval's expiry): a runner whose durable timer consumer could
// not be bound when it started — here the consumer does not exist, as
// while a cluster elects its leaders after a fault — binds it again after a
// pause. Before, the runner ignored Consume's error and consumed no firing
// for the rest of its life: an idle run suspended on an approval that
// nobody answered was never expired.
func TestSemantics8_ARunnerWhoseTimerConsumerFailedAtStartStillFiresTimers(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove), agent.WithApprovalExpiry(tools.After(4*time.Second)))
	h := newHarness(t)
	_, stopFirst := h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "rt", Agent: a.Name(), Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("rt", aggregate.StatusSuspended)
	// The run is handed off idle: only the durable schedule expires it.
	stopFirst()
	c := ctx(t)
	if err := h.srv.JS.DeleteConsumer(c, timer.Stream, timer.Consumer); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	h.startRunner([]*agent.Agent{a}, runner.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))))
	// Let the second runner find no consumer (it logs so) before the
	// consumer is made again; without the fix nothing is logged, and the
	// bound below only keeps the test from waiting for ever.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "timer consumer stopped") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if err := timer.Ensure(c, h.srv.JS); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("rt", "the approval's expiry", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && len(acts[0].Answers) == 1
	})
	if ans := s.Actions()[0].Answers[0].Answer; ans != events.AnswerExpired {
		t.Fatalf("answer %s, want %s", ans, events.AnswerExpired)
	}
}
