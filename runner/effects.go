package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
	"github.com/weftrun/weft/worker"
)

// dispatch publishes a fenced attempt as a task. It names the fence's
// version when this runner appended it, so that the worker's check reads
// only the run's last message (worker.LogCheck).
func (r *Runner) dispatch(ctx context.Context, rn *run, d aggregate.Dispatch) error {
	s := rn.state
	ref := s.Started().Agent
	task := api.Task{
		Schema: api.Schema, Run: rn.id, Action: d.Action, Agent: ref.Name, Version: ref.Version, Tool: d.Tool, Attempt: d.Attempt,
		Incarnation: d.Fence.Incarnation, Claim: api.ClaimKey(rn.id, d.Action, d.Attempt, d.Fence.Incarnation), Arguments: d.Arguments, TimeoutMS: int64(d.Fence.Timeout),
		Deadline: d.Fence.Deadline, MaxResultBytes: s.Limits().MaxResultBytes, SettleWithinMS: int64(d.Fence.SettleWithin),
		IdempotencyKey: tools.Call{Run: rn.id, Action: d.Action, Attempt: d.Attempt}.IdempotencyKey(),
		Correlation:    s.Started().Correlation,
		FenceVersion:   rn.fences[attemptKey(d.Action, d.Attempt, d.Fence.Incarnation)],
	}
	if a, ok := s.Action(d.Action); ok && a.Approved && len(a.Answers) > 0 {
		task.Reviewer = a.Answers[len(a.Answers)-1].Reviewer
	}
	b, err := json.Marshal(task)
	if err != nil {
		return err
	}
	// Addressed by the run's agent identity: only the body bound in that
	// agent@version takes it (docs/semantics.md §3).
	subject := api.Queue{Agent: ref.Name, Version: ref.Version, Tool: d.Tool}.Subject()
	msg := nats.NewMsg(subject)
	msg.Data = b
	msg.Header.Set(api.HeaderMsgID, fmt.Sprintf("%s/%s/%d/%d", rn.id, d.Action, d.Attempt, d.Fence.Incarnation))
	// The producer span of the publish (in the run's trace): the task
	// carries it as traceparent and the worker's attempt span is its child.
	sctx, span := r.tel.StartDispatch(ctx, rn.id, d.Action, d.Tool, d.Attempt, subject)
	r.tel.Inject(sctx, msg.Header)
	key := attemptKey(d.Action, d.Attempt, d.Fence.Incarnation)
	// The runner's own worker takes the task at once (handtask.go). By
	// default no stream copy is published with it: the handed task
	// publishes it (copyFallback) only if it ends without running the
	// attempt to its report — its body not started while this process
	// lives (its claim's outcome unknown, the worker stopping, ...), or its
	// report not delivered. A process that dies takes its handed tasks
	// with it, and the run's new owner fences again (docs/semantics.md §8),
	// so the copy is not needed for that
	// (docs/adr/0039-the-stream-copy-only-when-needed.md).
	if !r.eagerCopy {
		fallback := func(fctx context.Context, unstarted string) { r.copyFallback(fctx, rn, key, msg, unstarted) }
		if r.giveTask(rn, task, msg.Header, fallback) {
			span.End()
			r.tel.Emit(ctx, telemetry.ToolDispatched, "run", rn.id, "action", d.Action, "tool", d.Tool, "attempt", fmt.Sprint(d.Attempt))
			return nil
		}
	} else if r.giveTask(rn, task, msg.Header, nil) {
		// WithEagerTaskCopy: the copy is published with the hand-off
		// (its claim and the publish are written together, or its claim
		// went out with the fence: prepareHandOffs). The copy names that
		// worker, so that another Go worker delays its first delivery
		// instead of claiming and reporting at once
		// (worker.HeaderHandedTo, docs/protocol/41-tasks.md).
		msg.Header.Set(worker.HeaderHandedTo, r.id)
		// The copy is the fallback of a body that runs here: its
		// acknowledgement is waited for off the run's lock (copyAcked),
		// so that the body's report is not held behind its fsync
		// (docs/adr/0031-claim-with-the-fence.md).
		// With group commit the copies of concurrent runs leave in
		// atomic batches (docs/adr/0032-fewer-writes-per-run.md).
		if !r.bg.Go(func(bctx context.Context) { r.copyAcked(bctx, rn, key, msg, span) }) {
			// The runner stops: the copy is not sent at all (it is
			// sent from the background group); the fence is in the
			// log, and the next driver dispatches again.
			span.End()
		}
		r.tel.Emit(ctx, telemetry.ToolDispatched, "run", rn.id, "action", d.Action, "tool", d.Tool, "attempt", fmt.Sprint(d.Attempt))
		return nil
	}
	_, err = r.js.PublishMsg(ctx, msg)
	if err != nil {
		span.RecordError(err)
	}
	span.End()
	if err != nil {
		return err
	}
	r.tel.Emit(ctx, telemetry.ToolDispatched, "run", rn.id, "action", d.Action, "tool", d.Tool, "attempt", fmt.Sprint(d.Attempt))
	return nil
}

// copyAckWait bounds copyAcked's wait for a copy's acknowledgement.
const copyAckWait = 10 * time.Second

// copyAcked publishes msg, the stream copy of a task the runner's own
// worker took (dispatch), and waits for its acknowledgement. A copy not
// acknowledged is
// published again by the run's next act: the attempt of key is recorded
// as its copy lost (run.copyLost, under a lock of its own, not the run's:
// a run's lock held by a command or a stalled step must not leave the
// attempt fenced with no copy) and the run woken (retryLater); that act
// marks it not dispatched and publishes it again — the same message id, so
// a copy that did land is not stored twice. Meanwhile the handed task runs
// with no copy, as when a synchronous publish failed
// (docs/adr/0027-fewer-writes-per-step.md).
func (r *Runner) copyAcked(ctx context.Context, rn *run, key string, msg *nats.Msg, span trace.Span) {
	pctx, cancel := context.WithTimeout(ctx, copyAckWait)
	_, err := r.publishCopy(pctx, msg)
	cancel()
	if err == nil || ctx.Err() != nil {
		span.End()
		// Acknowledged, or the runner stops: a copy still queued for its
		// group's batch is then not sent at all (its context ended), and
		// the next driver dispatches again.
		return
	}
	span.RecordError(err)
	span.End()
	r.log.Warn("dispatch: the task's stream copy was not acknowledged; published again", "run", rn.id, "attempt", key, "err", err)
	r.testHook("copy-unacknowledged", -1, rn.id)
	r.markCopyLost(rn, key)
}

// copyFallback publishes msg, the stream copy of a task handed to the
// runner's own worker without one (dispatch), when the handed task ends
// without running the attempt to its report (worker.Fallback): its
// delivery runs the body as a first delivery (the claim was removed),
// takes over a claim left unstarted (unstarted, the claim's token, named
// as api.HeaderUnstartedClaim as a requeue names it, so that a delivery in
// another worker takes it over too), or reports or acks as any delivery
// does. The copy does not name the worker (worker.HeaderHandedTo): the
// handed task is over, nothing is to be waited for. It is published from
// the handed task's goroutine, not the runner's background group, so that
// a drain, which stops that group before the worker, still publishes the
// copies of the handed tasks its worker's stop leaves unstarted before the
// partitions are released. The publish is bounded by ctx (the worker's:
// cut short after its Abandon) and copyAckWait. A copy not acknowledged
// is published again by the run's next act, as in copyAcked; a runner
// that stops meanwhile leaves it to the run's next owner, which
// dispatches every attempt fenced and not reported again.
func (r *Runner) copyFallback(ctx context.Context, rn *run, key string, msg *nats.Msg, unstarted string) {
	msg.Header.Del(worker.HeaderHandedTo)
	if unstarted != "" && !slices.Contains(msg.Header.Values(api.HeaderUnstartedClaim), unstarted) {
		msg.Header.Add(api.HeaderUnstartedClaim, unstarted)
	}
	r.testHook("copy-fallback", -1, rn.id)
	pctx, cancel := context.WithTimeout(ctx, copyAckWait)
	_, err := r.publishCopy(pctx, msg)
	cancel()
	if err == nil {
		return
	}
	r.log.Warn("dispatch: the stream copy of a handed task that did not run was not acknowledged; published again", "run", rn.id, "attempt", key, "err", err)
	r.markCopyLost(rn, key)
}

// markCopyLost records that the stream copy of the attempt of key was not
// acknowledged (under the run's lostMu, not its lock: a run's lock held by
// a command or a stalled step must not leave the attempt fenced with no
// copy) and wakes the run, whose next act marks the attempt not
// dispatched (undispatchLost) and publishes it again.
func (r *Runner) markCopyLost(rn *run, key string) {
	rn.lostMu.Lock()
	if rn.copyLost == nil {
		rn.copyLost = map[string]bool{}
	}
	rn.copyLost[key] = true
	rn.lostMu.Unlock()
	r.testHook("copy-lost", -1, rn.id)
	r.retryLater(rn.id)
}

// undispatchLost marks the attempts whose stream copies were not
// acknowledged (copyAcked) not dispatched, so that act publishes them
// again. Under the run's lock.
func (rn *run) undispatchLost() {
	rn.lostMu.Lock()
	defer rn.lostMu.Unlock()
	for key := range rn.copyLost {
		delete(rn.dispatched, key)
	}
	clear(rn.copyLost)
}

// resolve validates every call of the batch and runs the policy on the
// valid ones, failing closed.
func (r *Runner) resolve(ctx context.Context, rn *run, b aggregate.CallBatch) aggregate.ResolveCalls {
	ag := rn.agent
	timeout, _ := rn.state.Limits().PolicyTimeout.Duration()
	out := aggregate.ResolveCalls{Turn: b.Turn}
	// Each call's arguments are parsed and validated once, here; the
	// delegation bounds and the policy read that result (docs/adr/0022).
	valid := make([]tools.Arguments, len(b.Calls))
	results := make([]aggregate.Resolution, len(b.Calls))
	validIDs := map[string]bool{}
	for i, c := range b.Calls {
		results[i] = aggregate.Resolution{CallID: c.ID}
		results[i].Validation, results[i].Detail, valid[i] = ag.ValidateCall(c.Name, c.Arguments)
		results[i].Normalized = valid[i].JSON
		validIDs[c.ID] = results[i].Validation == events.CallValid
	}
	limited := delegationLimits(rn, b, validIDs) // checked before policy
	for i, c := range b.Calls {
		res := results[i]
		target, over := delegationTarget(rn, c, &res, limited)
		if res.Validation == events.CallValid && !over {
			args := res.Normalized
			if args == nil {
				args = c.Arguments
			}
			pctx, span := r.tel.StartPolicy(ctx, rn.id, aggregate.ActionID(b.Turn, c.ID))
			dec, err := policy.Evaluate(pctx, ag.Policy(), policy.Action{Run: rn.id, ActionID: aggregate.ActionID(b.Turn, c.ID), Tool: c.Name, Arguments: args, Decoded: valid[i].Decoded, Target: target}, timeout)
			span.End()
			res.Policy = PolicyResult(dec, err)
			res.Tool, _ = ag.ToolConfig(c.Name)
		}
		out.Calls = append(out.Calls, res)
	}
	return out
}

// PolicyResult is how a policy decision and the evaluator's error are
// recorded: the one conversion from package policy's types to the
// aggregate's (aggregate.PolicyOutcome, docs/semantics.md §4), used by the
// runner and by anything else that decides commands with a policy (the
// scale loader in internal/bench/scale).
func PolicyResult(dec policy.Decision, err error) aggregate.PolicyResult {
	q := dec.Requirement()
	return aggregate.PolicyOutcome(string(dec.Kind()), dec.Reason(), events.Requirement{Name: q.Name, Version: q.Version}, err)
}

// callModel makes the model call for a requested turn in the runner's
// background group and feeds the answer back as a command. The call is
// bounded by the turn's deadline and by the runner's lifetime: one cut
// short by the runner's stop records nothing, and the turn, still
// requested in the log, is called again by the next driver (docs/semantics.md
// §8).
func (r *Runner) callModel(rn *run, mc aggregate.ModelCall) {
	ag := rn.agent
	req := ag.Request(modelRequest(rn.state))
	life := r.bg.ctx
	ctx, cancel := context.WithCancel(life)
	if !mc.Deadline.IsZero() {
		ctx, cancel = context.WithDeadline(life, mc.Deadline)
	}
	rn.modelTurn, rn.modelCancel = mc.Turn, cancel
	r.inflight.Add(1)
	id := rn.id
	typed := ag.Typed()
	started := r.bg.Go(func(context.Context) {
		defer r.inflight.Done()
		defer cancel()
		sctx, span := r.tel.StartModel(ctx, id, mc.Turn, ag.Model().Name())
		reply, err := ag.Model().Complete(sctx, req)
		if err != nil && life.Err() != nil {
			// Cut short by the runner's stop: not a model failure.
			telemetry.EndModel(span, "", nil, "stopped")
			r.log.Debug("model call stopped with the runner; the next driver calls again", "run", id, "turn", mc.Turn)
			return
		}
		var cmd aggregate.Command
		if err != nil {
			var me *model.Error
			kind, msg, status, after := model.ErrOther, err.Error(), 0, time.Duration(0)
			switch {
			case errors.As(err, &me):
				kind, msg, status, after = me.Kind, me.Message, me.Status, me.RetryAfter
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				kind, msg = model.ErrTimedOut, "the model timeout stopped the call"
			}
			if ctx.Err() == context.DeadlineExceeded {
				kind = model.ErrTimedOut
			}
			telemetry.EndModel(span, "", nil, string(kind))
			cmd = aggregate.ModelFailure{Turn: mc.Turn, Kind: failureKind(kind), Status: status, Message: msg, RetryAfter: after}
		} else {
			telemetry.EndModel(span, string(reply.Kind), reply.Usage, "")
			mr := ReplyCommand(mc.Turn, reply)
			if typed && reply.Kind == model.ReplyFinalAnswer {
				ans, derr := ag.DecodeAnswer(reply.Turn.Text)
				if derr != nil {
					mr.AnswerError = derr.Error()
				} else {
					mr.Answer = ans
				}
			}
			cmd = mr
		}
		if err := r.command(life, id, cmd); err != nil {
			r.log.Debug("model answer", "run", id, "turn", mc.Turn, "err", err)
			switch {
			case transient(err):
				// Not recorded: kept, and recorded by the next pass of act
				// (the turn stays requested in the log).
				r.keepReply(id, cmd)
				r.retryLater(id)
			case weft.ErrorCode(err) == weft.CodeQuarantined:
				// Kept too, never dropped (docs/semantics.md §8), until the
				// repair: the repaired run is woken (watchQuarantined)
				// and its next pass of act records it, instead of calling
				// the model again for the same turn.
				r.keepReply(id, cmd)
			}
		}
	})
	if !started {
		// The runner stopped: the turn stays requested in the log.
		r.inflight.Done()
		cancel()
	}
}

// attemptKey names an attempt of a run: action, attempt, incarnation.
func attemptKey(action string, attempt, incarnation int) string {
	return fmt.Sprintf("%s/%d/%d", action, attempt, incarnation)
}
