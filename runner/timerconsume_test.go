package runner_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
// not be bound when it started — here a push consumer holds its name, as
// an unanswered request fails it while a cluster elects its leaders after
// a fault — binds it again after a
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
	// A consumer Consume cannot bind (a push consumer under its name):
	// a missing one Consume makes itself (timer.Consume), so this is what
	// makes its start fail, as an unanswered request does while a cluster
	// has no leader.
	if _, err := h.srv.JS.CreatePushConsumer(c, timer.Stream, jetstream.ConsumerConfig{Durable: timer.Consumer, DeliverSubject: "weft.test.nowhere", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	h.startRunner([]*agent.Agent{a}, runner.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))))
	// The second runner cannot bind the consumer (it logs so) before the
	// consumer is made as provisioning makes it.
	waitLogged(t, &logs, "timer consumer stopped")
	if err := h.srv.JS.DeleteConsumer(c, timer.Stream, timer.Consumer); err != nil {
		t.Fatal(err)
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

// waitLogged waits (up to 10 s) until logs holds want.
func waitLogged(t *testing.T, logs *syncbuf.Buffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), want); {
		if time.Now().After(deadline) {
			t.Fatalf("never logged %q; the log:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSemantics8_ARunnerWhoseTimerConsumerIsDeletedWhileItRunsBindsItAgain
// (docs/semantics.md §8: pending work is retried, never dropped; scenario
// 20): the durable timer consumer is deleted while a runner consumes it
// (an operator, a stream made again after a fault) and made again. The
// runner's pull consume ends on the deletion; the runner binds the
// consumer again, and an idle run's approval expires. Before, Consume
// waited for its context only and the runner fired no timer again.
func TestSemantics8_ARunnerWhoseTimerConsumerIsDeletedWhileItRunsBindsItAgain(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	a := build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove), agent.WithApprovalExpiry(tools.After(6*time.Second)))
	h := newHarness(t)
	_, stopFirst := h.startRunner([]*agent.Agent{a})
	if _, err := h.client.Start(ctx(t), api.StartRequest{Run: "rd", Agent: a.Name(), Input: "x"}); err != nil {
		t.Fatal(err)
	}
	h.waitStatus("rd", aggregate.StatusSuspended)
	stopFirst() // the run is idle: only the durable schedule expires it
	var logs syncbuf.Buffer
	h.startRunner([]*agent.Agent{a}, runner.WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))))
	c := ctx(t)
	// The second runner's pull requests wait on the consumer: it is bound.
	for {
		ci, err := h.srv.JS.Consumer(c, timer.Stream, timer.Consumer)
		if err != nil {
			t.Fatal(err)
		}
		if info := ci.CachedInfo(); info.NumWaiting > 0 {
			break
		}
		if c.Err() != nil {
			t.Fatal("the runner never pulled from the timer consumer")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := h.srv.JS.DeleteConsumer(c, timer.Stream, timer.Consumer); err != nil {
		t.Fatal(err)
	}
	waitLogged(t, &logs, "timer consumer stopped")
	if err := timer.Ensure(c, h.srv.JS); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("rd", "the approval's expiry", func(s aggregate.State) bool {
		acts := s.Actions()
		return len(acts) == 1 && len(acts[0].Answers) == 1
	})
	if ans := s.Actions()[0].Answers[0].Answer; ans != events.AnswerExpired {
		t.Fatalf("answer %s, want %s", ans, events.AnswerExpired)
	}
}
