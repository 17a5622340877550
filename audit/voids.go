package audit

import (
	"fmt"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
)

// VoidCheck is who voided a message (CheckVoid): the typed name
// (PersonView.By), and, when a signed proof verifies, its key
// (PersonView.Verified, Key). A void's proof covers the key, not the
// name, and no runner checks the key against the people's keys: only the
// auditor's (WithPeople) say whose it is — Named, the auditor's name for
// it, when PeopleChecked.
type VoidCheck struct {
	// Seq is the stream sequence of the message voided, Record that of
	// the void record.
	Seq    uint64 `json:"seq"`
	Record uint64 `json:"record"`
	projections.PersonView
	Named         string `json:"named,omitempty"`
	PeopleChecked bool   `json:"people_checked,omitempty"`
}

// Describe says who voided the message: "by NAME (unverified)" for a typed
// name; "by NAMED (verified, key K, a person's key you trust)" for a key
// the auditor names (with the typed name when it differs); else "with a
// proof signed by key K (the name … is typed; not checked against
// people's keys: give --people)".
func (v VoidCheck) Describe() string {
	switch {
	case !v.Verified:
		return v.PersonView.Describe()
	case v.PeopleChecked && v.Named != "":
		s := "by " + v.Named + " (verified, key " + v.Key + ", a person's key you trust"
		if v.By != "" && v.By != v.Named {
			s += fmt.Sprintf("; typed as %q", v.By)
		}
		return s + ")"
	}
	return fmt.Sprintf("with a proof signed by key %s (the name %q is typed; not checked against people's keys: give --people)", v.Key, v.By)
}

// CheckVoid checks who voided a message of run (v, a repair's void
// record: `weft repair drop`; docs/security.md, "Who did it"): verified
// when the record carries a signed proof (proof.VoidSubject) that states
// exactly its run, sequence, the voided body's SHA-256 and reason,
// verifies with the key the record names and had not expired when the
// record was made; unverified for a typed name. A record that claims a
// verified identity without such a proof is a "proof" problem (it was
// edited, or written by hand). With WithPeople a verified one must be
// signed by a person's key the auditor names ("untrusted" otherwise), and
// with WithTrust by no runner's head key the auditor trusts; the typed
// name is not checked (the proof does not cover it, and no signed head
// covers a void record): the auditor's name for the key is reported
// (VoidCheck.Named).
func CheckVoid(run string, v eventlog.VoidRecord, opts ...Option) (VoidCheck, *Problem) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	who := VoidCheck{Seq: v.Seq, Record: v.At, PersonView: projections.PersonView{By: v.By, Reason: v.Reason, At: v.Recorded}, PeopleChecked: c.people != nil}
	what := fmt.Sprintf("void of the message at stream sequence %d (void record at sequence %d)", v.Seq, v.At)
	claimed := v.Proof != nil || v.Verified || v.Key != ""
	if !claimed {
		return who, nil
	}
	why := ""
	switch {
	case v.Proof == nil:
		why = "the record carries no signed proof"
	case !v.Verified || v.Key != v.Proof.Key:
		why = fmt.Sprintf("the recorded identity (verified %t, key %s) is not the proof's key %s", v.Verified, v.Key, v.Proof.Key)
	default:
		if err := proof.CheckCommand(*v.Proof, proof.VoidSubject(run, v.Seq, v.SHA256, v.Reason), v.Recorded); err != nil {
			why = err.Error()
		}
	}
	if why != "" {
		return who, &Problem{Kind: KindProof, Message: fmt.Sprintf("run %s: the %s says a signed proof vouches for %q, but %s", run, what, v.By, why)}
	}
	who.Verified, who.Key = true, v.Key
	who.Named = nameOf(c, v.Key)
	// The key only: the typed name is no evidence (see above).
	keyOnly := projections.PersonView{By: who.Named, Verified: true, Key: v.Key}
	if why, _ := personProblem(c, what, keyOnly); why != "" {
		return who, &Problem{Kind: KindUntrusted, Message: fmt.Sprintf("run %s: %s", run, why)}
	}
	return who, nil
}

// nameOf is the auditor's name for the person's key key (WithPeople): its
// first name given, else the key itself; "" when the auditor does not
// name the key.
func nameOf(c config, key string) string {
	names, ok := c.people[key]
	if !ok {
		return ""
	}
	for _, n := range names {
		if n != "" {
			return n
		}
	}
	return key
}
