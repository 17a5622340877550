package runner

import (
	"context"
	"errors"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// newWorker builds the in-process worker for every tool of the agents:
// each agent identity's binding of a tool serves that identity's queue
// only (docs/semantics.md §3), whatever other agents bind under the same name.
func (r *Runner) newWorker() *worker.Worker {
	// The in-process worker reports and settles directly (also while the
	// API service is stopped during a drain).
	// Its drain grace is the runner's drain window: the runner abandons
	// it at the end of the window (Run), and the worker would on its own.
	opts := append([]worker.Option{worker.WithID(r.id), worker.WithLogger(r.log), worker.WithDrainGrace(r.drain),
		worker.WithReporter(func(ctx context.Context, rep api.Report) error { _, err := r.Report(ctx, rep); return err }),
		worker.WithSettler(func(ctx context.Context, s api.Settlement) error { _, err := r.Settle(ctx, s); return err }),
		worker.WithContextFrom(r.tel.Extract),
	}, r.workerOpts...)
	if r.group {
		opts = append(opts, worker.WithGroupCommit())
	}
	w := worker.New(r.nc, r.js, opts...)
	for _, ag := range r.list {
		for _, t := range ag.Tools() {
			if _, sub := agent.SubAgent(t); sub || r.external[t.Name()] {
				continue // a delegation has no body: its child run does the work
			}
			w.Handle(api.Queue{Agent: ag.Name(), Version: ag.Version(), Tool: t.Name()}, ToolHandler(t, r.tel))
		}
	}
	return w
}

// ToolHandler adapts a bound tool to a worker.Handler: the body gets the
// call, the validated arguments, the approver's context when the action was
// approved, and a settlement wired to the worker's settle path.
func ToolHandler(t tools.Tool, tel *telemetry.Telemetry) worker.Handler {
	return func(ctx context.Context, task api.Task, settle worker.Settler) worker.Result {
		if task.Reviewer != "" {
			ctx = policy.WithReview(ctx, policy.Review{Reviewer: task.Reviewer})
		}
		if tel != nil {
			var end func()
			ctx, end = startAttempt(ctx, tel, task)
			defer end()
		}
		s := tools.NewSettlement(task.Run, task.Action, func(ctx context.Context, res tools.Result, summary string) error {
			err := settle(ctx, api.Settlement{Schema: api.Schema, Run: task.Run, Action: task.Action, Outcome: res.Outcome, Content: res.Content, Message: res.Message, Evidence: res.Evidence, Summary: summary})
			var we *weft.Error
			if tel != nil && errors.As(err, &we) && we.Code == weft.CodeNotAwaited && we.Reason == worker.ReasonOwnCall {
				// Refused by the worker, not the run: the telemetry the
				// run would emit for not_awaited (docs/semantics.md §9).
				tel.Emit(ctx, telemetry.SettlementRefused, "run", task.Run, "action", task.Action, "summary", summary)
			}
			return err
		})
		res := t.Invoke(ctx, tools.Call{Run: task.Run, Action: task.Action, Attempt: task.Attempt, Correlation: task.Correlation}, task.Arguments, s)
		return worker.Result{Outcome: res.Outcome, Content: res.Content, Message: res.Message, Evidence: res.Evidence}
	}
}

func startAttempt(ctx context.Context, tel *telemetry.Telemetry, task api.Task) (context.Context, func()) {
	ctx, span := tel.StartAttempt(ctx, task.Run, task.Action, task.Tool, task.Attempt)
	return ctx, func() { span.End() }
}
