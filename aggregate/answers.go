package aggregate

import (
	"errors"
	"fmt"
	"strings"

	"github.com/weftrun/weft"
)

// Answers answers several approval requests of one run in one decision (a
// batch decision, docs/protocol/40-commands.md "weft.api.decide"): each of
// Answers is an Approve or a Reject, exactly as it would be decided alone
// (docs/semantics.md §4: its proof, its references, the policy's decision
// re-run in the approver's context), in order, each on the state the
// earlier ones left — so a second answer to the same request is refused
// already_answered and a signed proof used twice proof_used.
//
// Within the run the batch is all or nothing: when any answer is refused,
// none is recorded and Decide refuses with *AnswersRefused, which names
// each answer's own refusal; only the due approval expiries (applied before
// any command is judged) and, for a takeover, its recovery are recorded.
// Otherwise every answer is recorded in the one decision, followed by the
// follow-on events of the whole (one append).
//
// An answer whose re-run policy fails ends the run failed(policy_failed)
// (docs/semantics.md §4), so the run's later answers are refused run_ended
// and nothing is recorded: such an answer is decided alone.
type Answers struct {
	Answers []Command
}

// CommandName returns "answers".
func (Answers) CommandName() string { return "answers" }

func (Answers) isCommand() {}

// AnswersRefused is Decide's refusal of an Answers batch: Refusals[i] is
// answer i's own refusal (a *weft.Error), nil for an answer that was valid
// but is not recorded because another answer of the batch was refused.
// Unwrap returns the first refusal, so that errors.As finds a *weft.Error
// (the batch is refused definitely, never for a retry).
type AnswersRefused struct {
	Refusals []error
}

// Error lists the refused answers by index.
func (e *AnswersRefused) Error() string {
	var parts []string
	for i, err := range e.Refusals {
		if err != nil {
			parts = append(parts, fmt.Sprintf("answer %d: %v", i+1, err))
		}
	}
	return "batch refused, nothing recorded: " + strings.Join(parts, "; ")
}

// Unwrap returns the first refusal.
func (e *AnswersRefused) Unwrap() error {
	for _, err := range e.Refusals {
		if err != nil {
			return err
		}
	}
	return nil
}

// answers decides an Answers batch: see Answers.
func (d *decider) answers(c Answers) error {
	if len(c.Answers) == 0 {
		return weft.Errorf(weft.CodeInvalidRequest, "a batch of answers has no answer")
	}
	n, before := len(d.evs), d.s.Clone()
	refusals := make([]error, len(c.Answers))
	refused := false
	for i, a := range c.Answers {
		var err error
		switch a := a.(type) {
		case Approve:
			err = d.approve(a)
		case Reject:
			err = d.reject(a)
		default:
			err = weft.Errorf(weft.CodeInvalidRequest, "a batch of answers holds approvals and rejections only, not %s", a.CommandName())
		}
		if err != nil {
			refusals[i], refused = err, true
		}
	}
	if refused {
		d.evs, d.s = d.evs[:n], before
		return &AnswersRefused{Refusals: refusals}
	}
	return nil
}

// IsAnswersRefused reports whether err is a refused batch of answers, and
// returns it.
func IsAnswersRefused(err error) (*AnswersRefused, bool) {
	var ar *AnswersRefused
	ok := errors.As(err, &ar)
	return ar, ok
}
