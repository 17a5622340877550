package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// TestSemantics8_AnAbandonedWorkerReturnsWithinTheRunnersWait
// (docs/semantics.md §8, the drain window): Abandon promises that
// Run returns once the tries still in flight end, LateAfterAbandon at most,
// within runner.Run's 10 s wait after Abandon (runner/runner.go). An attempt
// claimed but not started when the worker stops is released
// (releaseClaim) and requeued (requeue): with a server that no longer
// answers, both were waited for on context.Background (5 s + 10 s), so Run
// returned about 15 s after Abandon, after the embedding runner had
// returned without it. They end with the other tries now.
func TestSemantics8_AnAbandonedWorkerReturnsWithinTheRunnersWait(t *testing.T) {
	t.Parallel()
	s, nc, js := startServerHandle(t)

	var checks atomic.Int32
	second, proceed := make(chan struct{}), make(chan struct{})
	w := worker.New(nc, js, worker.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))), worker.WithReporter(func(context.Context, api.Report) error { return nil }),
		worker.WithAttemptCheck(func(ctx context.Context, _ api.Task) (bool, error) {
			if checks.Add(1) == 1 {
				return true, nil
			}
			close(second) // the check after the claim
			<-proceed
			return false, errors.New("the log does not answer")
		}))
	w.Handle(queue("echo"), func(_ context.Context, task api.Task, _ worker.Settler) worker.Result {
		t.Error("the body started")
		return worker.Result{Outcome: api.OutcomeOutput, Content: task.Arguments}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "echo", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1})
	receive(t, "the second check", second)
	s.Shutdown() // the server stops answering
	cancel()
	w.Abandon() // the embedding runner's drain window ended
	start := time.Now()
	close(proceed)
	receive(t, "Run returned after Abandon", done)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Run returned %s after Abandon, want within runner.Run's 10 s wait (LateAfterAbandon %s)", took.Round(100*time.Millisecond), worker.LateAfterAbandon)
	} else {
		t.Logf("Run returned %s after Abandon", took.Round(100*time.Millisecond))
	}
}
