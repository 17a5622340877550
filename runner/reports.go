package runner

// The worker-facing commands: a tool attempt's report and a settling
// tool's settlement (docs/protocol/41-tasks.md).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

// checkSettled refuses a settlement's output that the action's tool's
// output schema refuses, as checkOutput does for a reconciliation
// (docs/semantics.md §9, §10): invalid_content naming the path
// and the reason, before anything is decided. An unknown action is left
// to the aggregate.
func checkSettled(rn *run, action string, content json.RawMessage) error {
	if tool, err := notAnOutput(rn, action, content); err != nil {
		return &weft.Error{Code: weft.CodeInvalidContent, Message: fmt.Sprintf("settlement content is not an output of %s: %v", tool, err)}
	}
	return nil
}

// notAnOutput validates content against the output schema of action's
// tool as rn's agent serves it, and returns the tool and the reason when
// it is not one of its outputs. An unknown action or tool is left to the
// aggregate (nil).
func notAnOutput(rn *run, action string, content json.RawMessage) (string, error) {
	if rn.agent == nil {
		return "", nil
	}
	a, ok := rn.state.Action(action)
	if !ok {
		return "", nil
	}
	t, ok := rn.agent.Tool(a.Tool)
	if !ok {
		return "", nil
	}
	return a.Tool, tools.ValidateOutput(t, content)
}

// Settle offers a settlement (api.Backend). A settlement of an action
// whose body still runs waits for the body (docs/semantics.md §9) until the
// attempt's recorded deadline plus the lease (time for the tool timeout to
// be recorded), or as long as ctx allows when the attempt has no deadline
// (an Infinity timeout); a body still running then is answered
// settle_unconfirmed, reason body_running. A settlement whose ctx ends
// while it waits for the run (another command holds it) is answered
// runner_busy, not applied (docs/protocol.md, runner_busy). A refusal
// not_awaited emits settlement_refused with the summary.
func (r *Runner) Settle(ctx context.Context, req api.Settlement) (api.Reply, error) {
	var out api.Reply
	for {
		// Whether to wait for a running body, and how long, is the
		// aggregate's (AwaitBody); the wait is the runner's.
		waiting := false
		var over error
		err := r.route(ctx, req.Run, api.EndpointSettle, req, &out, func(ctx context.Context, rn *run) error {
			if err := checkQueue(rn, req.Action, req.Queue); err != nil {
				return err
			}
			if wait, werr := aggregate.AwaitBody(rn.state, req.Action, r.lease, r.clock(rn)); wait || werr != nil {
				waiting, over = true, werr
				return nil
			}
			if req.Outcome == events.OutcomeOutput {
				if err := checkSettled(rn, req.Action, req.Content); err != nil {
					return err
				}
			}
			content := req.Content
			if req.Outcome == events.OutcomeExplain && content == nil {
				content = tools.ErrorContent(req.Message)
			}
			err := r.step(ctx, rn, aggregate.Settle{Action: req.Action, Outcome: req.Outcome, Content: content, Message: req.Message, Summary: req.Summary})
			var we *weft.Error
			if errors.As(err, &we) && we.Code == weft.CodeNotAwaited {
				r.tel.Emit(ctx, telemetry.SettlementRefused, "run", rn.id, "action", req.Action, "summary", req.Summary)
			}
			out = r.reply(rn)
			return err
		})
		if !waiting {
			return out, busyIfInternal(err)
		}
		if over != nil {
			return out, over
		}
		select {
		case <-ctx.Done():
			return out, &weft.Error{Code: weft.CodeSettleUnconfirmed, Reason: ReasonBodyRunning, Message: "the body is still running: " + ctx.Err().Error()}
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ReasonBodyRunning is the Reason of settle_unconfirmed when the settled
// action's body was still running when the settlement stopped waiting
// (aggregate.ReasonBodyRunning).
const ReasonBodyRunning = aggregate.ReasonBodyRunning

// Report applies a worker's report (api.Backend).
func (r *Runner) Report(ctx context.Context, req api.Report) (api.Reply, error) {
	var cmd aggregate.Command
	switch req.Outcome {
	case api.OutcomeOutput, api.OutcomeExplain, api.OutcomeUncertain:
		cmd = aggregate.Report{Action: req.Action, Attempt: req.Attempt, Outcome: req.Outcome, Content: req.Content, Message: req.Message, Evidence: req.Evidence}
	case api.OutcomeOversize:
		// The aggregate checks the reported size against the run's limit.
		cmd = aggregate.Report{Action: req.Action, Attempt: req.Attempt, Outcome: events.OutcomeOversize, Bytes: req.Bytes}
	case api.OutcomeLost:
		// Which causes are recorded is the aggregate's (LostCommand); for
		// the others (nil) the run is woken (due timers applied) and the
		// reply is the usual one. not_started (a claim its worker marked)
		// records nothing by itself: the claim is read (below).
		if req.Cause != api.CauseNotStarted {
			var err error
			if cmd, err = aggregate.LostCommand(req.Action, req.Attempt, req.Cause, req.Evidence); err != nil {
				return api.Reply{}, err
			}
		}
	default:
		return api.Reply{}, &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("report outcome %q", req.Outcome)}
	}
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointReport, req, &out, func(ctx context.Context, rn *run) error {
		if err := checkQueue(rn, req.Action, req.Queue); err != nil {
			return err
		}
		// Another worker's worker_lost while this runner's own worker
		// holds the attempt: refused runner_busy, retried (handtask.go).
		if err := r.heldHere(req); err != nil {
			return err
		}
		var err error
		if cmd == nil {
			if req.Cause == api.CauseNotStarted || req.Cause == api.CauseTimedOut {
				// Its worker marked the claim not started (a timed_out
				// report follows a deadline mark): if a decision read the
				// claim before the mark, the claim's value now says the
				// body never started (docs/adr/0023-closing-attempts.md,
				// "Late evidence: a mark after the decision").
				err = r.recordLateMarks(ctx, rn, req.Action)
			}
			if rn.driven && err == nil {
				err = r.wakeLocked(ctx, rn, false)
			}
		} else {
			err = r.step(ctx, rn, cmd)
		}
		out = r.reply(rn)
		return err
	})
	return out, busyIfInternal(err)
}

// checkQueue refuses a report or settlement received on a tool queue's
// subject (q not nil) for an action of a run of another agent identity, or
// a call of another tool (aggregate.OtherQueue): wrong_reference, reason
// other_queue, and nothing is recorded. With package roles' permissions a
// worker publishes only on its own queue's subjects, so it reports and
// settles for its own tool only.
func checkQueue(rn *run, action string, q *api.Queue) error {
	if q == nil {
		return nil
	}
	aq := aggregate.Queue{Agent: events.AgentRef{Name: q.Agent, Version: q.Version}, Tool: q.Tool}
	if why := aggregate.OtherQueue(rn.state, action, aq, q.String()); why != "" {
		return &weft.Error{Code: weft.CodeWrongReference, Reason: api.ReasonOtherQueue, Message: why}
	}
	return nil
}
