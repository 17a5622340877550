package aggregate

import (
	"encoding/json"
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
)

// Resolve records the final truth of an open question: an action
// reconciled as unconfirmed ({"unconfirmed": note}), whose effect the run
// went on without knowing. Content is the tool's encoded output (the effect
// happened) or {"error": message} (it did not); an {"unconfirmed": …}
// content is refused invalid_content, because a resolution is definite.
// It is decided on live and finished runs alike and changes nothing but
// the action's audit record (events.Resolved): nothing resumes.
//
// Refusals: wrong_reference (no such action), not_resolvable (the action
// is not reconciled as unconfirmed; Reason its state, or the reconciled
// kind "output" or "error" when a definite truth was recorded),
// already_resolved (Reason the earlier resolution's kind), invalid_content.
type Resolve struct {
	Action  string
	Content json.RawMessage
	By      string
	// Reason, Identity and Proof are recorded as given.
	Reason   string
	Identity events.Identity
	Proof    *events.CommandProof
}

// CommandName returns "resolve".
func (Resolve) CommandName() string { return "resolve" }

func (Resolve) isCommand() {}

// ResolvedTruth is the final truth recorded for an open question.
type ResolvedTruth struct {
	// Kind is events.ReconciledOutput or ReconciledError.
	Kind string `json:"kind"`
	// Content is the tool's output or {"error": message}.
	Content json.RawMessage `json:"content"`
	// By is who recorded it.
	By string `json:"by,omitempty"`
}

// OpenQuestion reports whether the action is an open question: reconciled
// as unconfirmed and not resolved yet.
func (a Action) OpenQuestion() bool {
	return a.State == ActionReconciled && a.reconciledKind() == events.ReconciledUnconfirmed && a.Resolved == nil
}

// reconciledKind is how a reconciled action was reconciled: the recorded
// kind, or for a state folded before the kind was kept (a snapshot of an
// older version), the kind of its content.
func (a Action) reconciledKind() string {
	if a.ReconciledKind != "" {
		return a.ReconciledKind
	}
	k, _ := ContentKind(a.Content)
	return k
}

func (d *decider) resolve(c Resolve) error {
	a, ok := d.s.Action(c.Action)
	if !ok {
		return weft.Errorf(weft.CodeWrongReference, "run %s has no action %q", d.s.run, c.Action)
	}
	if a.State == ActionReconciled && a.Resolved != nil {
		return &weft.Error{Code: weft.CodeAlreadyResolved, Reason: a.Resolved.Kind, Message: fmt.Sprintf("action %s was resolved already (%s)", a.ID, a.Resolved.Kind)}
	}
	if !a.OpenQuestion() {
		reason := string(a.State)
		if a.State == ActionReconciled {
			reason = a.reconciledKind()
		}
		return &weft.Error{Code: weft.CodeNotResolvable, Reason: reason, Message: fmt.Sprintf("action %s is no open question (%s): only an action reconciled as unconfirmed is resolved", a.ID, reason)}
	}
	kind, err := ContentKind(c.Content)
	if err != nil {
		return err
	}
	if kind == events.ReconciledUnconfirmed {
		return weft.Errorf(weft.CodeInvalidContent, `a resolution is the final truth: give the tool's encoded output or {"error": message}, not {"unconfirmed": note}`)
	}
	d.emit(events.Resolved{Action: a.ID, Kind: kind, Content: c.Content, By: c.By, Reason: c.Reason, Identity: c.Identity, Proof: c.Proof})
	return nil
}

// evolveResolved folds a Resolved event; t is its transition (machine.go:
// from reconciled, the state unchanged).
func (s *State) evolveResolved(name events.Name, e events.Resolved, t Transition, ok bool) {
	a := s.move(name, e.Action, t, ok)
	if a.Resolved != nil {
		s.bug(name, "action %s resolved twice", e.Action)
	}
	a.Resolved = &ResolvedTruth{Kind: e.Kind, Content: e.Content, By: e.By}
}
