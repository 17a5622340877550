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

// Deed is one command a person made, as the log records it: the event's
// Version, What was done ("approve 1/call_1_1", "reconcile 1/call_1_2",
// "resolve …", "cancel") and who did it (Who.Verified only when the
// recorded proof still verifies against the event).
type Deed struct {
	Version uint64
	What    string
	Who     PersonView
}

// DeedOf returns the person's command rec records (an answer, a
// reconciliation, a resolution, a cancellation), false for any other
// event. An answer's proof is checked by the view's fold (Proof), so
// here an answer is verified when its event says so and it carries a
// proof by the same key whose signature verifies.
func DeedOf(rec events.Recorded) (Deed, bool) {
	var what string
	var p *PersonView
	switch e := rec.Event.(type) {
	case events.ApprovalAnswered:
		if e.Answer == events.AnswerExpired {
			return Deed{}, false
		}
		what = e.Answer + " " + e.Action
		verified := e.Verified && e.Proof != nil && e.Proof.Key == e.Key && proof.Verify(*e.Proof) == nil
		key := ""
		if verified {
			key = e.Key
		}
		p = &PersonView{By: e.Reviewer, Verified: verified, Key: key, Reason: e.Reason, At: rec.At}
	case events.Reconciled:
		command := proof.CommandReconcile
		if e.Stored {
			command = proof.CommandReconcileStored
		}
		what = command + " " + e.Action + " (" + e.Kind + ")"
		p = person(proof.CommandSubject{Command: command, Run: rec.Run, Action: e.Action, Content: e.Content, Reason: e.Reason}, e.By, e.Identity, e.Proof, rec.At)
	case events.Resolved:
		what = proof.CommandResolve + " " + e.Action + " (" + e.Kind + ")"
		p = person(proof.CommandSubject{Command: proof.CommandResolve, Run: rec.Run, Action: e.Action, Content: e.Content, Reason: e.Reason}, e.By, e.Identity, e.Proof, rec.At)
	case events.CancelRequested:
		what = proof.CommandCancel
		p = person(proof.CommandSubject{Command: proof.CommandCancel, Run: rec.Run, Reason: e.Reason}, e.By, e.Identity, e.Proof, rec.At)
	default:
		return Deed{}, false
	}
	return Deed{Version: rec.Version, What: what, Who: *p}, true
}

// Describe says who did it: "by NAME (verified, key K)", "by NAME
// (unverified)", or "by nobody named (unverified)".
func (p PersonView) Describe() string {
	name := p.By
	if name == "" {
		name = "nobody named"
	}
	switch {
	case p.Verified && p.Key != "":
		return "by " + name + " (verified, key " + p.Key + ")"
	case p.Verified:
		return "by " + name + " (verified)"
	}
	return "by " + name + " (unverified)"
}

// deed is who made the person's command e of run, recorded at at.
func deed(run string, e events.Event, at time.Time) *PersonView {
	d, _ := DeedOf(events.Recorded{Run: run, At: at, Event: e})
	return &d.Who
}
