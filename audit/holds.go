package audit

import (
	"fmt"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
)

// Hold is a legal hold on a run: while it is not released, retention
// removes neither the run nor any run of its family. A run may have
// several, each released on its own (ID). They are kept in the
// weft_holds bucket (retention.Hold is this type), not in the run's log:
// a finished run's log is closed by its signed end head (docs/semantics.md
// §1), and a hold says nothing about what the run did. An export carries
// each as a hold line and CheckHolds checks it.
type Hold struct {
	Run string `json:"run"`
	// ID names the hold among the run's (h1, h2, ...): a release names it.
	ID string `json:"id"`
	// By is who placed it; Identity whether the deployment vouched for By
	// (a signed command proof by one of its person keys, Proof) when it
	// was placed: docs/security.md, "Who did it". A hold placed before
	// holds recorded it has neither (unverified).
	By string `json:"by"`
	events.Identity
	Proof  *events.CommandProof `json:"proof,omitempty"`
	Reason string               `json:"reason"`
	At     time.Time            `json:"at"`
	// Released is set once the hold was released: by whom, why and when.
	Released *HoldRelease `json:"released,omitempty"`
	// CommandID is the command that placed it (weft.api.hold, which `weft
	// hold` sends; empty for a hold placed by retention.Place without one,
	// as the CLI did before): Place with it again answers this hold and
	// adds none.
	CommandID string `json:"command_id,omitempty"`
}

// HoldRelease is who released a hold (Identity and Proof as for Hold), why
// and when (retention.Release is this type).
type HoldRelease struct {
	By string `json:"by"`
	events.Identity
	Proof  *events.CommandProof `json:"proof,omitempty"`
	Reason string               `json:"reason"`
	At     time.Time            `json:"at"`
	// CommandID is the command that released it (weft.api.release_hold;
	// empty for a release without one, as the CLI made before):
	// retention.ReleaseHold with it again answers this release.
	CommandID string `json:"command_id,omitempty"`
}

// Active reports whether the hold still exempts its run.
func (h Hold) Active() bool { return h.Run != "" && h.Released == nil }

// HoldCheck is who placed one legal hold of a run and, once released, who
// released it (CheckHolds), as weft_holds or an export records them
// (retention.Hold): docs/security.md, "Retention and legal hold",
// docs/adr/0040-who-restarted-and-who-held.md.
type HoldCheck struct {
	// ID is the hold's id among the run's (h1, h2, ...).
	ID       string    `json:"id"`
	Placed   HoldDeed  `json:"placed"`
	Released *HoldDeed `json:"released,omitempty"`
	// Active says the hold was not released.
	Active bool `json:"active"`
}

// HoldDeed is who placed or released a hold: the name recorded and the
// reason (PersonView.By, Reason, At), verified (with its key) when the
// record's signed command proof verifies against the hold (Command:
// proof.CommandHold, or proof.CommandReleaseHold with the hold's id as
// its action), else unverified (a typed name). Digest is the proof's
// (proof.CommandDigest, lowercase hex); Trusted says its key is a
// person's the auditor names (WithPeople); Problem says why a proof the
// record carries does not verify ("" when it does, or none is claimed).
type HoldDeed struct {
	Command string `json:"command"`
	projections.PersonView
	Digest  string `json:"digest,omitempty"`
	Trusted bool   `json:"trusted,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// CheckHolds checks who placed and released each legal hold of run
// (holds: what weft_holds keeps for it, retention.HoldsOf, or its hold
// lines in an export), in the order given, and returns the checks and the
// first problem (nil: none). A hold or release that claims a verified
// identity (a proof, verified, or a key) must carry a signed command
// proof by the key recorded that states exactly this run, its command
// (proof.HoldSubject; proof.ReleaseHoldSubject with the hold's id) and the
// reason recorded, with a good signature, and that no other placement or
// release of the run records too (proof_used): otherwise a "proof"
// problem naming the hold. The proof's expiry is not checked, as for the
// log's command proofs: the runner checked it when the hold was placed,
// and the time recorded beside it is no more protected than the rest of
// the record. With WithPeople (and WithTrust), a verified one is checked
// as a person's command of the log is (people.go: "untrusted" for a key
// the auditor does not name as a person's, a runner's head key, or a name
// the auditor does not give the key). One recorded with a typed name
// alone is unverified, not a problem.
//
// What it cannot see: weft_holds is not the signed log, and a hold is not
// an event, so a hold deleted whole from the bucket (or from an export)
// leaves no trace here; and a proof covers the key, not the name.
func CheckHolds(run string, holds []Hold, opts ...Option) ([]HoldCheck, *Problem) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	var out []HoldCheck
	var first *Problem
	seen := map[string]string{} // a proof's digest: the placement or release that recorded it first
	note := func(p *Problem) {
		if first == nil {
			first = p
		}
	}
	for _, h := range holds {
		hc := HoldCheck{ID: h.ID, Active: h.Released == nil}
		if h.Run != run {
			note(&Problem{Kind: KindSequence, Message: fmt.Sprintf("run %s: the legal hold %s is recorded for run %q", run, h.ID, h.Run)})
		}
		placed := fmt.Sprintf("placement of legal hold %s", h.ID)
		hc.Placed = checkHoldDeed(proof.HoldSubject(run, h.Reason), h.By, h.Identity, h.Proof, h.Reason, h.At)
		if p := holdProblem(c, run, placed, &hc.Placed, seen); p != nil {
			note(p)
		}
		if r := h.Released; r != nil {
			what := fmt.Sprintf("release of legal hold %s", h.ID)
			d := checkHoldDeed(proof.ReleaseHoldSubject(run, h.ID, r.Reason), r.By, r.Identity, r.Proof, r.Reason, r.At)
			hc.Released = &d
			if p := holdProblem(c, run, what, hc.Released, seen); p != nil {
				note(p)
			}
		}
		out = append(out, hc)
	}
	return out, first
}

// checkHoldDeed is the check of one placement or release of a hold: by,
// id, p, reason and at as recorded, s what its proof must state.
func checkHoldDeed(s proof.CommandSubject, by string, id events.Identity, p *events.CommandProof, reason string, at time.Time) HoldDeed {
	d := HoldDeed{Command: s.Command, PersonView: projections.PersonView{By: by, Reason: reason, At: at}}
	if p != nil {
		d.Digest = fmt.Sprintf("%x", proof.CommandDigest(*p))
	}
	claimed := p != nil || id != (events.Identity{})
	if !claimed {
		return d
	}
	switch {
	case p == nil:
		d.Problem = "the record says the deployment vouched for it (verified, key " + orNone(id.Key) + ") and carries no signed proof"
	case !id.Verified || id.Key != p.Key:
		d.Problem = fmt.Sprintf("the recorded identity (verified %t, key %s) is not the proof's key %s", id.Verified, orNone(id.Key), p.Key)
	default:
		if err := proof.BindsCommand(*p, s); err != nil {
			d.Problem = err.Error()
		} else if err := proof.VerifyCommand(*p); err != nil {
			d.Problem = err.Error()
		}
	}
	if d.Problem == "" {
		d.Verified, d.Key = true, p.Key
	}
	return d
}

// holdProblem is the problem of the checked placement or release d (what)
// of a hold of run: its proof does not verify, another placement or
// release of the run recorded it first (seen), or (WithPeople, WithTrust)
// its key is not a person's the auditor names under the name recorded.
func holdProblem(c config, run, what string, d *HoldDeed, seen map[string]string) *Problem {
	if d.Problem != "" {
		return &Problem{Kind: KindProof, Message: fmt.Sprintf("run %s: the %s by %q does not verify: %s", run, what, d.By, d.Problem)}
	}
	if !d.Verified {
		return nil
	}
	if earlier, ok := seen[d.Digest]; ok {
		d.Verified, d.Key = false, ""
		d.Problem = fmt.Sprintf("%s: this command proof was already recorded with the %s", proof.ReasonProofUsed, earlier)
		return &Problem{Kind: KindProof, Message: fmt.Sprintf("run %s: the %s by %q reuses the command proof (digest %s) already recorded with the %s: a proof is consumed once (%s)",
			run, what, d.By, d.Digest, earlier, proof.ReasonProofUsed)}
	}
	seen[d.Digest] = what
	why, trusted := personProblem(c, what, d.PersonView)
	if why != "" {
		return &Problem{Kind: KindUntrusted, Message: fmt.Sprintf("run %s: %s", run, why)}
	}
	d.Trusted = trusted
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
