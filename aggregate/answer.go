package aggregate

import (
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// AnswerCheck is an approval answer as it arrives, before the runner does
// any I/O for it (verifying its proof, re-running the policy): Answer is
// events.AnswerApprove or events.AnswerReject; Approver is the approver
// the answer names (empty for none) and Approvers whether the run's agent
// has any configured.
type AnswerCheck struct {
	Answer    string
	Action    string
	Revision  int
	Approver  string
	Approvers bool
	Proof     *events.ApprovalProof
}

// AnswerPlan is what the runner does for an answer that PlanAnswer did
// not refuse outright, in this order:
//
//  1. When Verify is set, verify the answer's proof against Request (the
//     request of Action as recorded); a refused proof is the answer, and
//     nothing is recorded (docs/semantics.md §4: a refused answer leaves the pause
//     intact).
//  2. When Refusal is set, decide the bare command (Approve or Reject with
//     only Action and Revision: it records the expiries that are due) and
//     answer Refusal.
//  3. Otherwise decide the answer with the verified proof (for an approve,
//     with the policy re-run in the approver's context).
type AnswerPlan struct {
	Action  Action
	Request Approval
	Verify  bool
	Refusal error
}

// PlanAnswer decides the order in which an approval answer c is checked
// against s at the store time now, before the runner verifies its proof
// or re-runs the policy. It refuses outright (nothing to verify, nothing
// recorded):
//
//   - a reject without an approver for an agent that has approvers:
//     invalid_request (the field is missing, no proof was refused);
//   - a signed proof s already recorded: proof_refused(proof_used), named
//     as a replay before the references are checked (CheckUnused).
//
// Then the references are checked (CheckAnswer). An approve whose request
// is due but not yet recorded as expired verifies its proof first and
// only then is refused approval_expired (docs/semantics.md §4: proof checked
// first, then expiry). Any other refusal of the references is answered
// without verifying anything. A valid approve always verifies its proof; a
// valid reject verifies one when it names an approver or the agent has
// approvers.
func PlanAnswer(s State, c AnswerCheck, now time.Time) (AnswerPlan, error) {
	if c.Answer == events.AnswerReject && c.Approver == "" && c.Approvers {
		return AnswerPlan{}, &weft.Error{Code: weft.CodeInvalidRequest, Message: "approver is required (the agent has approvers)"}
	}
	if err := CheckUnused(s, c.Proof); err != nil {
		return AnswerPlan{}, err
	}
	a, _ := s.Action(c.Action)
	appr, err := CheckAnswer(s, c.Action, c.Revision, now)
	if err != nil {
		due := c.Answer == events.AnswerApprove && weft.ErrorCode(err) == weft.CodeApprovalExpired && a.Request.Answer == ""
		return AnswerPlan{Action: a, Request: a.Request, Verify: due, Refusal: err}, nil
	}
	verify := c.Answer == events.AnswerApprove || c.Approver != "" || c.Approvers
	return AnswerPlan{Action: a, Request: appr, Verify: verify}, nil
}
