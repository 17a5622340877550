package aggregate

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// The reasons of an edit_refused error (docs/semantics.md §4, "Approving
// narrower arguments").
const (
	// EditAttempted means the call already started (an attempt was fenced
	// or a child run started) with the arguments it was approved with; a
	// replay runs the same ones.
	EditAttempted = "attempted"
	// EditDenied means the policy, re-run with the edited arguments and the
	// approver's context, denies the edited call.
	EditDenied = "policy_denied"
	// EditRequires means the policy requires another approval for the edited
	// call than the one being answered.
	EditRequires = "policy_requires"
	// EditPolicyFailed means the policy failed (error, panic, timeout) on the
	// edited call.
	EditPolicyFailed = "policy_failed"
)

// CallArguments are the arguments the action's attempts and body use:
// the approver's edit when one narrowed the call, else the model's
// (validated) arguments.
func (a Action) CallArguments() json.RawMessage {
	if a.Edited != nil {
		return a.Edited
	}
	return a.Arguments
}

// Started reports whether a call started with its arguments: an attempt
// was fenced (a body may have run with them) or a delegation's child run
// started. From then on an edit is locked: a replay runs the same
// arguments (docs/semantics.md §4, "Approving narrower arguments").
func (a Action) Started() bool {
	return a.Attempts > 0 || a.Child != nil
}

// EditOf is the edit an approve of action a records for the edited
// arguments edit (normalized by the tool's input codec): nil, no edit,
// for none and for arguments byte-equal to those the call would run with
// (the model's, or the edit a started call ran with). A signed proof of
// the approve states the edit, or else the standing a.Edited
// (proof.Subject.WithApproved).
func EditOf(a Action, edit json.RawMessage) json.RawMessage {
	if edit == nil || bytes.Equal(edit, a.CallArguments()) {
		return nil
	}
	return edit
}

// checkEdit decides whether an approve may narrow action a, asked under
// requirement req, to edited arguments (EditOf: not nil), given the
// policy's decision on the edited call (pol, re-run with the approver's
// context): only a call that has not started (Started) — a request
// re-asked before any attempt may be narrowed again, or approved as the
// model asked it — and only when the policy allows the edited call or
// requires no other approval than the one being answered. Otherwise
// edit_refused, and nothing is recorded: the request stays pending.
func checkEdit(a Action, req Approval, edited json.RawMessage, pol PolicyResult) error {
	if !json.Valid(edited) {
		return &weft.Error{Code: weft.CodeInvalidContent, Message: "the edited arguments are not JSON"}
	}
	refuse := func(reason, format string, args ...any) error {
		return &weft.Error{Code: weft.CodeEditRefused, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if a.Started() {
		return refuse(EditAttempted, "action %s already started with its arguments (%s): a replay runs the same arguments, approve or reject them as they are", a.ID, startedWith(a))
	}
	switch pol.Decision {
	case events.PolicyAllow:
		return nil
	case events.PolicyRequireApproval:
		if pol.Requirement == req.Requirement {
			return nil
		}
		return refuse(EditRequires, "the policy requires %s v%d for the edited call, not the %s v%d being answered", pol.Requirement.Name, pol.Requirement.Version, req.Requirement.Name, req.Requirement.Version)
	case events.PolicyDeny:
		return refuse(EditDenied, "the policy denies the edited call%s", parenthesized(pol.Reason))
	}
	return refuse(EditPolicyFailed, "the policy failed on the edited call%s", parenthesized(pol.Reason))
}

// startedWith says how call a started: its attempts, or its child run.
func startedWith(a Action) string {
	if a.Attempts > 0 {
		return fmt.Sprintf("%d attempt(s)", a.Attempts)
	}
	return "child run " + a.Child.Child
}

// editedNote is what the model reads of an action an approver narrowed:
// the note, the arguments the call ran with and the result
// (docs/semantics.md §4, "Approving narrower arguments").
func editedNote(edited, content json.RawMessage) json.RawMessage {
	b, _ := json.Marshal(struct {
		Note      string          `json:"note"`
		Arguments json.RawMessage `json:"arguments"`
		Result    json.RawMessage `json:"result"`
	}{EditedNote, edited, content})
	return b
}

// EditedNote is the note the model reads with the result of a call an
// approver approved with edited arguments.
const EditedNote = "an approver approved this call with edited arguments: it ran with these arguments, not the ones you asked for"
