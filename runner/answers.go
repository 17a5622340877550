package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/telemetry"
	"github.com/weftrun/weft/tools"
)

// Approve answers an approval request (api.Backend): the references are
// checked first, then the proof, then the policy is re-run with the
// approver's context.
func (r *Runner) Approve(ctx context.Context, req api.ApproveRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointApprove, req, &out, func(ctx context.Context, rn *run) error {
		err := r.answerOne(ctx, rn, answerOfApprove(req))
		out = r.reply(rn)
		return err
	})
	return out, err
}

// answerSubject is what an answer to action a's request appr is for, as a
// signed proof must state it (package proof): the run, the request, the
// call's tool and arguments as recorded and, for an approve that narrows
// the call (edit) or answers a request re-asked after an edited attempt,
// the approved arguments (proof.Subject.WithApproved).
func answerSubject(rn *run, a aggregate.Action, appr aggregate.Approval, answer, reason string, edit json.RawMessage) proof.Subject {
	s := proof.Subject{Run: rn.id, Action: a.ID, Revision: appr.Revision, Requirement: appr.Requirement, Tool: a.Tool, Arguments: a.Arguments, Answer: answer, Reason: reason}
	return s.WithApproved(edit, a.Edited)
}

// Reject rejects an approval request (api.Backend). A credential or a
// signed proof, when given, is verified like an approval's and its
// reviewer recorded.
func (r *Runner) Reject(ctx context.Context, req api.RejectRequest) (api.Reply, error) {
	var out api.Reply
	err := r.route(ctx, req.Run, api.EndpointReject, req, &out, func(ctx context.Context, rn *run) error {
		err := r.answerOne(ctx, rn, answerOfReject(req))
		out = r.reply(rn)
		return err
	})
	return out, err
}

// answer is an approval answer as approve, reject or an item of a batch
// decision carry it: Kind is events.AnswerApprove or AnswerReject.
type answer struct {
	Kind       string
	Action     string
	Revision   int
	Approver   string
	Credential string
	Reason     string
	By         string
	Proof      *events.ApprovalProof
	// Arguments are an approve's edited arguments (nil: the call as asked).
	Arguments json.RawMessage
}

func answerOfApprove(req api.ApproveRequest) answer {
	return answer{Kind: events.AnswerApprove, Action: req.Action, Revision: req.Revision, Approver: req.Approver, Credential: req.Credential, Proof: req.Proof, Arguments: api.EditedArguments(req.Arguments)}
}

func answerOfReject(req api.RejectRequest) answer {
	return answer{Kind: events.AnswerReject, Action: req.Action, Revision: req.Revision, Approver: req.Approver, Credential: req.Credential, Reason: req.Reason, By: req.By, Proof: req.Proof}
}

// answerOne decides one answer alone: checked (checkAnswer), then decided,
// or its refusal answered after the due expiries a refusal of the
// references records (the bare command).
func (r *Runner) answerOne(ctx context.Context, rn *run, ans answer) error {
	c, bare, err := r.checkAnswer(ctx, rn, ans, r.clock(rn))
	if err != nil {
		if bare != nil {
			_ = r.step(ctx, rn, bare)
		}
		return err
	}
	err = r.step(ctx, rn, c)
	r.emitAnswered(ctx, rn, ans)
	return err
}

// emitAnswered emits the telemetry of an answer that was decided.
func (r *Runner) emitAnswered(ctx context.Context, rn *run, ans answer) {
	word := "approved"
	if ans.Kind == events.AnswerReject {
		word = "rejected"
	}
	r.tel.Emit(ctx, telemetry.ApprovalAnswered, "run", rn.id, "action", ans.Action, "answer", word)
}

// checkAnswer checks an answer before it is decided, in the aggregate's
// order (PlanAnswer; docs/semantics.md §4): an approver an agent with
// approvers requires for a reject, a replayed proof, the references — the
// proof before the expiry of a due request — then the proof, and for an
// approve the policy re-run with the approver's context. It returns the
// command to decide (Approve or Reject), or the refusal and, for a refusal
// of the references, the bare command that records the due expiries (a
// refused proof changes nothing: no bare command).
func (r *Runner) checkAnswer(ctx context.Context, rn *run, ans answer, now time.Time) (aggregate.Command, aggregate.Command, error) {
	plan, err := aggregate.PlanAnswer(rn.state, aggregate.AnswerCheck{Answer: ans.Kind, Action: ans.Action, Revision: ans.Revision,
		Approver: ans.Approver, Approvers: len(rn.agent.Approvers()) > 0, Proof: ans.Proof}, now)
	if err != nil {
		return nil, nil, err
	}
	edit, valid, err := r.checkEdit(rn, plan, ans)
	if err != nil {
		return nil, nil, err // an edit the input codec refuses changes nothing
	}
	var pf approvers.Proof
	verified := false
	if plan.Verify {
		in := approvers.Answer{Approver: ans.Approver, Credential: ans.Credential, Signed: ans.Proof}
		if pf, err = approvers.AuthorizeAnswer(ctx, rn.agent.Approvers(), in, answerSubject(rn, plan.Action, plan.Request, ans.Kind, ans.Reason, edit), now); err != nil {
			return nil, nil, err // a refused proof changes nothing
		}
		verified = true
	}
	if plan.Refusal != nil {
		// The bare command records due expiries; the refusal is the
		// pre-check's.
		if ans.Kind == events.AnswerReject {
			return nil, aggregate.Reject{Action: ans.Action, Revision: ans.Revision, Reason: ans.Reason}, plan.Refusal
		}
		return nil, aggregate.Approve{Action: ans.Action, Revision: ans.Revision}, plan.Refusal
	}
	if ans.Kind == events.AnswerReject {
		c := aggregate.Reject{Action: ans.Action, Revision: ans.Revision, Reason: ans.Reason, By: ans.By}
		if verified {
			c.By, c.Verifier, c.Proof, c.Identity = pf.Reviewer(), pf.Approver(), pf.Signed(), answerIdentity(pf.Signed())
		}
		if err := r.people.Required(c.By, c.Identity.Verified, c.Reason, true); err != nil {
			return nil, nil, err
		}
		return c, nil, nil
	}
	id := answerIdentity(pf.Signed())
	if err := r.people.Required(pf.Reviewer(), id.Verified, "", false); err != nil {
		return nil, nil, err
	}
	a, appr := plan.Action, plan.Request
	reqm := policy.Requirement{Name: appr.Requirement.Name, Version: appr.Requirement.Version}
	timeout, _ := rn.state.Limits().PolicyTimeout.Duration()
	pctx := policy.WithReview(ctx, policy.Review{Reviewer: pf.Reviewer(), Verifier: pf.Approver(), Requirement: reqm, Revision: ans.Revision})
	call := policy.Action{Run: rn.id, ActionID: a.ID, Tool: a.Tool, Arguments: a.CallArguments(), Target: targetOf(rn.agent, a.Tool)}
	if edit != nil {
		// The policy judges the edited call, the edit as checked by the
		// input codec (docs/semantics.md §4, "Approving narrower
		// arguments").
		call.Arguments, call.Decoded = edit, valid.Decoded
	}
	if edit != nil || a.Edited != nil {
		// The call runs with an approver's edit: the policy gets the
		// model's arguments too, to hold the edit narrower than them
		// (docs/security.md, "Approving narrower arguments").
		call.Asked = a.Arguments
	}
	dec, perr := policy.Evaluate(pctx, rn.agent.Policy(), call, timeout)
	cfg, _ := rn.agent.ToolConfig(a.Tool)
	return aggregate.Approve{Action: ans.Action, Revision: ans.Revision, Reviewer: pf.Reviewer(), Verifier: pf.Approver(), Proof: pf.Signed(), Identity: id, Policy: PolicyResult(dec, perr), Tool: cfg, Arguments: edit}, nil, nil
}

// checkEdit checks an approve's edited arguments before anything else of
// the answer but its references (docs/semantics.md §4, "Approving narrower
// arguments"): they must decode with the tool's input codec
// (invalid_content, nothing recorded). It returns them normalized by the
// codec (tools.Arguments.JSON), as the policy judges them, the proof
// covers them, the answer records them and the body gets them — the same
// bytes, as for a model's call — and as the codec decoded them; nil for an
// answer without an edit or with one equal to the arguments the call runs
// with (aggregate.EditOf). When the references are refused (PlanAnswer
// answers that refusal) the edit is only compacted, for the proof check
// that comes first.
func (r *Runner) checkEdit(rn *run, plan aggregate.AnswerPlan, ans answer) (json.RawMessage, tools.Arguments, error) {
	if ans.Arguments == nil || ans.Kind != events.AnswerApprove {
		return nil, tools.Arguments{}, nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, ans.Arguments); err != nil {
		return nil, tools.Arguments{}, &weft.Error{Code: weft.CodeInvalidContent, Message: "arguments: the edited arguments are not JSON: " + err.Error()}
	}
	edit := json.RawMessage(c.Bytes())
	if plan.Refusal != nil {
		return aggregate.EditOf(plan.Action, edit), tools.Arguments{}, nil
	}
	outcome, detail, valid := rn.agent.ValidateCall(plan.Action.Tool, edit)
	if outcome != events.CallValid {
		return nil, tools.Arguments{}, &weft.Error{Code: weft.CodeInvalidContent, Message: fmt.Sprintf("arguments: the edited arguments do not fit tool %s's input schema: %s", plan.Action.Tool, detail)}
	}
	if edit = aggregate.EditOf(plan.Action, valid.JSON); edit == nil {
		return nil, tools.Arguments{}, nil
	}
	return edit, valid, nil
}

// checksBudget is how long the checks of one run's part of a batch may
// take before its remaining items are refused unchecked: half the agent's
// command timeout, so that with the last item's policy and the append the
// part is answered within the wait of a runner that forwarded it (twice
// the command timeout) and holds the run no longer than a few commands do.
func checksBudget(rn *run) time.Duration {
	d, ok := rn.state.Limits().CommandTimeout.Duration()
	if !ok || d <= 0 {
		d = 5 * time.Second
	}
	return d / 2
}

// Decide answers one run's part of a batch decision (api.Backend): each
// item checked as it would be alone (checkAnswer), then all of them decided
// as one (aggregate.Answers: all or nothing, one append). When an item is
// refused before the decision (its proof, its references), none is
// decided; a refusal of the references first records the due expiries, as
// a single answer does.
func (r *Runner) Decide(ctx context.Context, req api.DecideRun) (api.DecideRunReply, error) {
	out := api.DecideRunReply{Schema: api.Schema, Run: req.Run}
	err := r.route(ctx, req.Run, api.EndpointDecide, req, &out, func(ctx context.Context, rn *run) error {
		now := r.clock(rn)
		batch := aggregate.Answers{Answers: make([]aggregate.Command, len(req.Items))}
		refusals := make([]error, len(req.Items))
		var bare aggregate.Command
		refused := false
		start, budget := time.Now(), checksBudget(rn)
		for i, it := range req.Items {
			if i > 0 && time.Since(start) >= budget {
				// The run is held while its items are checked: past the
				// budget the rest is refused unchecked, a definite answer
				// (sent again as it is, it would take as long).
				for j := i; j < len(req.Items); j++ {
					refusals[j] = &weft.Error{Code: weft.CodePayloadTooLarge, Message: fmt.Sprintf("action %s: not checked: this run's items took longer than %s to check (half its command timeout; a slow policy or approver), so none is recorded; send fewer of them per batch", req.Items[j].Action, budget)}
				}
				refused = true
				break
			}
			ans := answerOfApprove(it.Approve())
			if it.Answer == events.AnswerReject {
				ans = answerOfReject(it.Reject())
			}
			c, b, err := r.checkAnswer(ctx, rn, ans, now)
			if ap, ok := c.(aggregate.Approve); ok && err == nil && ap.Policy.Decision == events.PolicyError && ap.Arguments == nil && len(req.Items) > 1 {
				// Alone, this approval ends the run failed (policy_failed,
				// docs/semantics.md §4); a batch never ends a run on its
				// other items' behalf, whatever their order.
				err = &weft.Error{Code: weft.CodeInvalidRequest, Message: fmt.Sprintf("action %s: the policy re-run with the approver's context failed (%s): answered alone, this approval ends the run failed (policy_failed); answer it alone, or without it", it.Action, ap.Policy.Reason)}
			}
			if err != nil {
				refusals[i], refused = err, true
				if bare == nil {
					bare = b
				}
				continue
			}
			batch.Answers[i] = c
		}
		var err error
		if refused {
			if bare != nil {
				_ = r.step(ctx, rn, bare)
			}
			err = &aggregate.AnswersRefused{Refusals: refusals}
		} else {
			err = r.step(ctx, rn, batch)
			if err == nil {
				for _, it := range req.Items {
					r.emitAnswered(ctx, rn, answer{Kind: it.Answer, Action: it.Action})
				}
			}
		}
		out.Items = api.Outcomes(req.Items, nil, r.reply(rn).Status)
		if ar, ok := aggregate.IsAnswersRefused(err); ok {
			out.Items = api.Outcomes(req.Items, ar.Refusals, "")
		}
		return err
	})
	if _, ok := aggregate.IsAnswersRefused(err); ok {
		// Refused as a batch: every item says why, in the reply.
		return out, nil
	}
	return out, err
}
