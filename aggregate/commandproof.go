package aggregate

import (
	"fmt"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// UsedCommandProof is a signed command proof a run recorded (with a
// Reconciled, Resolved, CancelRequested, RunPaused or RunResumed): its
// key, its digest (package proof's CommandDigest, lowercase hex), the
// event it was recorded with and that event's version. A command proof is
// consumed once, as an approval proof is (docs/security.md, "Who did it").
type UsedCommandProof struct {
	Key     string      `json:"key"`
	Digest  string      `json:"digest"`
	Event   events.Name `json:"event"`
	Version uint64      `json:"version"`
}

// commandProofOf is the signed command proof e records, nil for none.
func commandProofOf(e events.Event) *events.CommandProof {
	switch e := e.(type) {
	case events.Reconciled:
		return e.Proof
	case events.Resolved:
		return e.Proof
	case events.CancelRequested:
		return e.Proof
	case events.RunPaused:
		return e.Proof
	case events.RunResumed:
		return e.Proof
	}
	return nil
}

// commandProofFor is the signed command proof c is made with, nil for none.
func commandProofFor(c Command) *events.CommandProof {
	switch c := c.(type) {
	case Reconcile:
		return c.Proof
	case Resolve:
		return c.Proof
	case Cancel:
		return c.Proof
	case Pause:
		return c.Proof
	case Resume:
		return c.Proof
	}
	return nil
}

// useCommandProof records the command proof e carries as used (evolve).
func (s *State) useCommandProof(name events.Name, e events.Event) {
	if p := commandProofOf(e); p != nil {
		d := proof.CommandDigest(*p)
		s.commandProofs = append(s.commandProofs, UsedCommandProof{Key: p.Key, Digest: fmt.Sprintf("%x", d), Event: name, Version: s.version})
	}
}

// CommandProofUsed reports whether s records a command made with the
// signed command proof p (the same statement by the same key), and with
// which event: a command proof is consumed once.
func CommandProofUsed(s State, p *events.CommandProof) (UsedCommandProof, bool) {
	if p == nil {
		return UsedCommandProof{}, false
	}
	d := fmt.Sprintf("%x", proof.CommandDigest(*p))
	for _, u := range s.commandProofs {
		if u.Key == p.Key && u.Digest == d {
			return u, true
		}
	}
	return UsedCommandProof{}, false
}

// CheckCommandUnused refuses a signed command proof s already recorded
// (proof_refused, reason proof_used); nil for none. Decide checks it
// first for a reconcile, resolve, cancel, pause or resume, so that a
// replayed proof is named as one (a pause proof sent again after the
// resume would otherwise pause the run again in its signer's name).
func CheckCommandUnused(s State, p *events.CommandProof) error {
	if u, used := CommandProofUsed(s, p); used {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: proof.ReasonProofUsed,
			Message: fmt.Sprintf("this command proof was already recorded with %s at version %d: a proof is consumed once", u.Event, u.Version)}
	}
	return nil
}
