package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/worker"
)

// settleFromBody runs one task whose body settles another action with the
// worker's settle path and returns what the body's settler answered.
func settleFromBody(t *testing.T, opts ...worker.Option) error {
	t.Helper()
	nc, js := startServer(t)
	rs := &reports{ch: make(chan struct{}, 10)}
	w := worker.New(nc, js, append([]worker.Option{worker.WithReporter(rs.report), worker.WithoutAttemptCheck()}, opts...)...)
	got := make(chan error, 1)
	w.Handle(queue("settler"), func(ctx context.Context, task api.Task, settle worker.Settler) worker.Result {
		got <- settle(ctx, api.Settlement{Schema: api.Schema, Run: "r", Action: "1/other", Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`)})
		return worker.Result{Outcome: api.OutcomeOutput, Content: json.RawMessage(`1`)}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	publish(t, js, api.Task{Run: "r", Action: "1/a", Tool: "settler", Attempt: 1, Arguments: json.RawMessage(`1`), TimeoutMS: -1, MaxResultBytes: 100})
	err := receive(t, "the body's settlement answered", got)
	receive(t, "the body's report", rs.ch)
	cancel()
	receive(t, "Run returned", done)
	return err
}

// docs/semantics.md §9: a settlement no runner answers (out of process, no
// responders on weft.api.settle) is refused settle_unconfirmed, reason
// no_responders — never an uncoded transport error.
func TestScenario27_SettleWithNoRunnerIsUnconfirmed(t *testing.T) {
	t.Parallel()
	err := settleFromBody(t)
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeSettleUnconfirmed || we.Reason != worker.ReasonNoResponders {
		t.Fatalf("settle with no runner: %v, want settle_unconfirmed(no_responders)", err)
	}
}

// docs/semantics.md §9: refusals outside the settlement's closed set are
// mapped:
// runner_busy (in process, the command was not applied) → settle_unconfirmed
// with that reason; run_ended → not_awaited; already_recorded unchanged.
func TestScenario27_SettleRefusalsStayInTheDocumentedSet(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		refusal weft.Code
		code    weft.Code
		reason  string
	}{
		{weft.CodeRunnerBusy, weft.CodeSettleUnconfirmed, string(weft.CodeRunnerBusy)},
		{weft.CodeContended, weft.CodeSettleUnconfirmed, string(weft.CodeContended)},
		{weft.CodeRunEnded, weft.CodeNotAwaited, string(weft.CodeRunEnded)},
		{weft.CodeAlreadyRecorded, weft.CodeAlreadyRecorded, ""},
	} {
		t.Run(string(c.refusal), func(t *testing.T) {
			err := settleFromBody(t, worker.WithSettler(func(context.Context, api.Settlement) error {
				return &weft.Error{Code: c.refusal}
			}))
			var we *weft.Error
			if !errors.As(err, &we) || we.Code != c.code || we.Reason != c.reason {
				t.Fatalf("refusal %s: got %v, want %s(%s)", c.refusal, err, c.code, c.reason)
			}
		})
	}
	if err := worker.SettleError(nil); err != nil {
		t.Fatalf("SettleError(nil) = %v", err)
	}
}
