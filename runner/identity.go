package runner

import (
	"encoding/json"

	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// WithPeople sets how the runner vouches for who made a person's command
// (docs/security.md, "Who did it"): the person keys whose signed command
// proofs make a reconcile, resolve, cancel, pause, resume, restart, legal
// hold or release of a hold verified, and
// whether every person's command must say who made it and why
// (identity_required).
// Answers are verified by the agent's approvers' keys.
func WithPeople(p approvers.People) Option { return func(r *Runner) { r.people = p } }

// who is who made the person's command endpoint on rn (a reconcile,
// resolve, cancel, pause or resume): the key's person when it carries a command proof the
// deployment's person keys vouch for, else the name typed (unverified).
func (r *Runner) who(rn *run, endpoint, action string, content json.RawMessage, reason, by string, signed *events.CommandProof) (approvers.Who, error) {
	s := proof.CommandSubject{Command: endpoint, Run: rn.id, Action: action, Content: content, Reason: reason}
	return r.people.Command(s, by, signed, r.clock(rn))
}

// whoOf is who made a person's command s that is no command of a live run
// (a restart, a legal hold or its release): as who, at the runner's clock.
func (r *Runner) whoOf(s proof.CommandSubject, by string, signed *events.CommandProof) (approvers.Who, error) {
	return r.people.Command(s, by, signed, r.clock(nil))
}

// answerIdentity is an answer's identity: verified, by its key, when it was
// given with a signed proof (the approver checked the key), else not.
func answerIdentity(signed *events.ApprovalProof) events.Identity {
	if signed == nil {
		return events.Identity{}
	}
	return events.Identity{Verified: true, Key: signed.Key}
}
