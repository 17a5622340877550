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
		Tool: i.Tool, Arguments: i.Arguments, Answer: answer}.WithApproved(nil, i.Approved)
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
				Tool: a.Tool, Arguments: a.Arguments, Answer: answer}.WithApproved(nil, a.Approved), nil
		}
	}
	return proof.Subject{}, &weft.Error{Code: weft.CodeWrongReference, Message: fmt.Sprintf("action %s of run %s has no approval request of revision %d", action, v.Run, revision)}
}

// person is who made the command s: by, verified when the event says the
// deployment vouched for it and its recorded proof still states exactly s
// with a good signature (a log edited afterwards no longer verifies).
func person(s proof.CommandSubject, by string, id events.Identity, p *events.CommandProof, at time.Time) *PersonView {
	verified := commandProblem(s, id, p) == ""
	key := ""
	if verified {
		key = id.Key
	}
	return &PersonView{By: by, Verified: verified, Key: key, Reason: s.Reason, At: at}
}

// commandProblem says why the identity id and command proof p recorded
// with the command s do not verify against it ("" when they do).
func commandProblem(s proof.CommandSubject, id events.Identity, p *events.CommandProof) string {
	switch {
	case p == nil:
		return "the event records no command proof"
	case !id.Verified:
		return "the event does not say the deployment vouched for its proof"
	case p.Key != id.Key:
		return fmt.Sprintf("the recorded key %s is not the proof's key %s", id.Key, p.Key)
	}
	if err := proof.BindsCommand(*p, s); err != nil {
		return err.Error()
	}
	if err := proof.VerifyCommand(*p); err != nil {
		return err.Error()
	}
	return ""
}

// answerProblem says why the identity and approval proof recorded with the
// answer e do not verify ("" when they do), given st, the view's check of
// e's proof against the request it answers (nil: no proof). An answer
// recorded before events carried an identity has none: its proof alone
// decides (only a signed approver's key is ever recorded with an answer).
func answerProblem(e events.ApprovalAnswered, st *ProofStatus) string {
	switch {
	case e.Proof == nil || st == nil:
		return "the event records no approval proof"
	case !st.Verified:
		return st.Reason
	case e.Identity != (events.Identity{}) && e.Identity != (events.Identity{Verified: true, Key: e.Proof.Key}):
		return fmt.Sprintf("the recorded identity (verified %t, key %s) is not the proof's key %s", e.Verified, e.Key, e.Proof.Key)
	}
	return ""
}

// Deed is one command a person made, as the log records it: the event's
// Version, What was done ("approve 1/call_1_1", "reconcile 1/call_1_2",
// "resolve …", "cancel") and who did it (Who.Verified only when the
// recorded proof still verifies against the event and the run before it).
// Claimed says the event claims a verified identity (it records a proof,
// or says the deployment vouched for it); Problem says why that claim does
// not verify ("" when it does, or nothing is claimed). Only an edited log
// has a claim that does not verify.
type Deed struct {
	Version uint64
	What    string
	Who     PersonView
	Claimed bool
	Problem string
}

// Deeds returns the commands people made in history (answers,
// reconciliations, resolutions, a cancellation, pauses, resumes, the
// restart that made the run), oldest first, each with
// who made it, checked as the run view checks it (Fold): an answer's proof
// against the request it answers, a command proof against its event.
func Deeds(history []events.Recorded) []Deed {
	var v RunView
	var out []Deed
	for _, r := range history {
		before := v.Version
		v = Apply(v, r)
		if v.Version == before {
			continue // ignored, as the view ignores it
		}
		if d, ok := deedIn(v, r); ok {
			out = append(out, d)
		}
	}
	return out
}

// deedIn returns the person's command rec records, v being the view with
// rec applied; false for any other event.
func deedIn(v RunView, rec events.Recorded) (Deed, bool) {
	e, ok := rec.Event.(events.ApprovalAnswered)
	if !ok {
		return commandDeed(rec)
	}
	if e.Answer == events.AnswerExpired {
		return Deed{}, false
	}
	d := Deed{Version: rec.Version, What: e.Answer + " " + e.Action, Claimed: e.Proof != nil || e.Identity != (events.Identity{}),
		Who: PersonView{By: e.Reviewer, Reason: e.Reason, At: rec.At}}
	var st *ProofStatus
	if a, ok := v.Action(e.Action); ok {
		for _, h := range a.Approvals {
			if h.Revision == e.Revision {
				st = h.Proof
			}
		}
	}
	if d.Problem = answerProblem(e, st); d.Problem == "" {
		d.Who.Verified, d.Who.Key = true, e.Proof.Key
	} else if !d.Claimed {
		d.Problem = ""
	}
	return d, true
}

// commandDeed returns the person's command rec records (a reconciliation,
// a resolution, a cancellation, a pause, a resume, the restart that made
// the run), false for any other event.
func commandDeed(rec events.Recorded) (Deed, bool) {
	var what, by string
	var s proof.CommandSubject
	var id events.Identity
	var p *events.CommandProof
	switch e := rec.Event.(type) {
	case events.Reconciled:
		command := proof.CommandReconcile
		if e.Stored {
			command = proof.CommandReconcileStored
		}
		what = command + " " + e.Action + " (" + e.Kind + ")"
		s = proof.CommandSubject{Command: command, Run: rec.Run, Action: e.Action, Content: e.Content, Reason: e.Reason}
		by, id, p = e.By, e.Identity, e.Proof
	case events.Resolved:
		what = proof.CommandResolve + " " + e.Action + " (" + e.Kind + ")"
		s = proof.CommandSubject{Command: proof.CommandResolve, Run: rec.Run, Action: e.Action, Content: e.Content, Reason: e.Reason}
		by, id, p = e.By, e.Identity, e.Proof
	case events.CancelRequested:
		what = proof.CommandCancel
		s = proof.CommandSubject{Command: proof.CommandCancel, Run: rec.Run, Reason: e.Reason}
		by, id, p = e.By, e.Identity, e.Proof
	case events.RunPaused:
		what = proof.CommandPause
		s = proof.CommandSubject{Command: proof.CommandPause, Run: rec.Run, Reason: e.Reason}
		by, id, p = e.By, e.Identity, e.Proof
	case events.RunResumed:
		what = proof.CommandResume
		s = proof.CommandSubject{Command: proof.CommandResume, Run: rec.Run, Reason: e.Reason}
		by, id, p = e.By, e.Identity, e.Proof
	case events.RunForked:
		// The restart that made this run: its proof states the parent,
		// the turn and this run (proof.RestartSubject).
		what = fmt.Sprintf("%s from %s turn %d", proof.CommandRestart, e.From.Run, e.From.Turn)
		s = proof.RestartSubject(e.From.Run, e.From.Turn, rec.Run, e.Reason)
		by, id, p = e.By, e.Identity, e.Proof
	default:
		return Deed{}, false
	}
	d := Deed{Version: rec.Version, What: what, Who: *person(s, by, id, p, rec.At), Claimed: p != nil || id != (events.Identity{})}
	if d.Claimed && !d.Who.Verified {
		d.Problem = commandProblem(s, id, p)
	}
	return d, true
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

// deed is who made the person's command e of run (a reconciliation, a
// resolution, a cancellation, a pause, a resume, a restart), recorded at at.
func deed(run string, e events.Event, at time.Time) *PersonView {
	d, _ := commandDeed(events.Recorded{Run: run, At: at, Event: e})
	return &d.Who
}
