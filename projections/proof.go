package projections

import (
	"fmt"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// ProofSubject returns what a signed answer to the pending approval
// request i is for (package proof): i's run, action, revision and
// requirement, the call's tool and arguments, and answer
// (events.AnswerApprove or events.AnswerReject). Sign it with proof.New
// and proof.Sign. The runner checks every value against the run itself,
// so an item that is out of date only gets the proof refused.
func (i ApprovalItem) ProofSubject(answer string) proof.Subject {
	return proof.Subject{Run: i.Run, Action: i.Action, Revision: i.Revision, Requirement: i.Requirement,
		Tool: i.Tool, Arguments: i.Arguments, Answer: answer}
}

// ProofSubject returns what a signed answer to the approval request of
// action at revision is for, as v records it (revision 0: the pending
// request). It is a wrong_reference error when v has no such action, or
// no such request of it.
func (v RunView) ProofSubject(action string, revision int, answer string) (proof.Subject, error) {
	a, ok := v.Action(action)
	if !ok {
		return proof.Subject{}, &weft.Error{Code: weft.CodeWrongReference, Message: fmt.Sprintf("run %s has no action %s", v.Run, action)}
	}
	if revision == 0 {
		if a.Pending == nil {
			return proof.Subject{}, &weft.Error{Code: weft.CodeWrongReference, Message: fmt.Sprintf("action %s of run %s has no pending approval request to sign for (state %s)", action, v.Run, a.State)}
		}
		revision = a.Pending.Revision
	}
	for _, h := range a.Approvals {
		if h.Revision == revision {
			return proof.Subject{Run: v.Run, Action: action, Revision: revision, Requirement: h.Requirement,
				Tool: a.Tool, Arguments: a.Arguments, Answer: answer}, nil
		}
	}
	return proof.Subject{}, &weft.Error{Code: weft.CodeWrongReference, Message: fmt.Sprintf("action %s of run %s has no approval request of revision %d", action, v.Run, revision)}
}

// person is who made the command s: by, verified when the event says the
// deployment vouched for it and its recorded proof still states exactly s
// with a good signature (a log edited afterwards no longer verifies).
func person(s proof.CommandSubject, by string, id events.Identity, p *events.CommandProof, at time.Time) *PersonView {
	verified := id.Verified && p != nil && p.Key == id.Key && proof.BindsCommand(*p, s) == nil && proof.VerifyCommand(*p) == nil
	key := ""
	if verified {
		key = id.Key
	}
	return &PersonView{By: by, Verified: verified, Key: key, Reason: s.Reason, At: at}
}
