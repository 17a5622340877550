package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/worker"
)

// TestLogCheckReadsTheLastMessageWhenItHoldsTheFence: a task that names its
// fence's version is current when the run's last message holds that very
// fence; once anything was recorded after it the run is folded and the
// answer is the aggregate's (here: the attempt was reported, so it is no
// longer current); a version that names another event, or another attempt,
// never makes a task current by itself; a fence version beyond the run's
// head is "not visible yet" (read again), never current (41-tasks rule 2,
// docs/adr/0014).
func TestLogCheckReadsTheLastMessageWhenItHoldsTheFence(t *testing.T) {
	t.Parallel()
	s := natstest.Start(t)
	js, err := jetstream.New(s.Connect())
	if err != nil {
		t.Fatal(err)
	}
	check := worker.LogCheck(js)
	ctx := context.Background()
	task := appendRun(t, s, "fast", 3)
	if ok, err := check(ctx, task); err != nil || !ok {
		t.Fatalf("fence in the last message: current %v, %v", ok, err)
	}
	foreign := task
	foreign.Attempt = 2 // another attempt, same version
	if ok, err := check(ctx, foreign); err == nil && ok {
		t.Fatal("a task of another attempt was taken as current by the fence version")
	}
	beyond := task
	beyond.FenceVersion = 1000
	if ok, err := check(ctx, beyond); err == nil || ok {
		t.Fatalf("a fence beyond the head: %v, %v; want an error", ok, err)
	}
	// The attempt reports: recorded after the fence.
	head, err := s.Log.Head(ctx, "fast")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Log.Append(ctx, "fast", head, time.Now(), events.AttemptReported{Action: task.Action, Attempt: 1, Outcome: events.OutcomeOutput, Content: json.RawMessage(`{"ok":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := check(ctx, task); err != nil || ok {
		t.Fatalf("after the report: current %v, %v; want not current", ok, err)
	}
	// Without the version the whole run is folded: the same answer.
	task.FenceVersion = 0
	if ok, err := check(ctx, task); err != nil || ok {
		t.Fatalf("folded after the report: current %v, %v", ok, err)
	}
}
