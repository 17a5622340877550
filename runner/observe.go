package runner

import (
	"context"
	"fmt"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/telemetry"
)

// observe emits the docs/semantics.md §11 telemetry for appended events, after
// the commit.
func (r *Runner) observe(ctx context.Context, rn *run, evs []events.Event) {
	// A turn whose reply the decision refused ends with another model_turn
	// result than the reply's kind (docs/semantics.md §11): answer_rejected (a
	// typed answer that did not decode, corrected next turn),
	// protocol_violation, budget_stop (the run ran out of turns or tokens).
	turnResult, replied := turnOverride(evs), false
	for _, ev := range evs {
		switch e := ev.(type) {
		case events.RunStarted:
			r.tel.Emit(ctx, telemetry.RunStarted, "run", rn.id)
		case events.RunRecovered:
			r.tel.Emit(ctx, telemetry.RunRecovered, "run", rn.id, "cause", e.Cause)
		case events.ModelReplied:
			replied = true
			res := string(e.Kind)
			if turnResult != "" {
				res = turnResult
			}
			r.tel.Emit(ctx, telemetry.ModelTurn, "run", rn.id, "result", res)
		case events.ModelFailed:
			res := "model_failure"
			if e.RetryAt != nil {
				res = "retry"
			}
			r.tel.Emit(ctx, telemetry.ModelTurn, "run", rn.id, "result", res)
		case events.ApprovalRequested:
			r.tel.Emit(ctx, telemetry.ApprovalRequested, "run", rn.id, "action", e.Action)
			rn.asked[fmt.Sprint(e.Action, "#", e.Revision)] = r.now()
		case events.ApprovalAnswered:
			if e.Answer == events.AnswerExpired {
				r.tel.Emit(ctx, telemetry.ApprovalAnswered, "run", rn.id, "action", e.Action, "answer", "expired")
			}
			key := fmt.Sprint(e.Action, "#", e.Revision)
			now := r.now()
			since, ok := rn.asked[key]
			if !ok {
				since = now
			}
			delete(rn.asked, key)
			r.tel.ApprovalWait(ctx, rn.id, e.Action, e.Revision, e.Answer, since, now)
		case events.AttemptReported:
			res := "model_visible"
			switch e.Outcome {
			case events.OutcomeUncertain:
				res = "effect_uncertain"
			case events.OutcomeOversize:
				res = "host_failure"
			}
			r.tel.Emit(ctx, telemetry.ToolSettled, "run", rn.id, "action", e.Action, "result", res)
		case events.AttemptLost:
			// Only a loss that ends the attempt's effect as uncertain
			// settles the action now; replay, reapproval and a settle
			// window settle it later.
			if e.Next == events.NextUncertain {
				r.tel.Emit(ctx, telemetry.ToolSettled, "run", rn.id, "action", e.Action, "result", "effect_uncertain", "cause", e.Cause)
			}
		case events.ActionUncertain:
			r.tel.Emit(ctx, telemetry.ToolSettled, "run", rn.id, "action", e.Action, "result", "effect_uncertain")
		case events.SettlementAccepted:
			res := "model_visible"
			if e.Outcome == events.OutcomeUncertain {
				res = "effect_uncertain"
			}
			r.tel.Emit(ctx, telemetry.ToolSettled, "run", rn.id, "action", e.Action, "result", res)
		case events.RunFinished:
			r.tel.Emit(ctx, telemetry.RunFinished, "run", rn.id, "outcome", e.Outcome.Kind)
		}
	}
	if turnResult != "" && !replied {
		r.tel.Emit(ctx, telemetry.ModelTurn, "run", rn.id, "result", turnResult)
	}
}

// turnOverride returns the model_turn result a decision gives its turn
// instead of the reply's kind, or "".
func turnOverride(evs []events.Event) string {
	for _, ev := range evs {
		switch e := ev.(type) {
		case events.AnswerRejected:
			return "answer_rejected"
		case events.RunFinished:
			switch {
			case e.Outcome.Reason == events.ReasonModelProtocolViolation:
				return "protocol_violation"
			case e.Outcome.Kind == events.OutcomeBudgetExhausted:
				return "budget_stop"
			}
		}
	}
	return ""
}
