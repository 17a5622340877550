package audit

import (
	"fmt"

	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
)

// CheckVoid checks who voided a message of run (v, a repair's void
// record: `weft repair drop`; docs/security.md, "Who did it"): verified
// when the record carries a signed proof (proof.VoidSubject) that states
// exactly its run, sequence, the voided body's SHA-256 and reason,
// verifies with the key the record names and had not expired when the
// record was made; unverified for a typed name. A
// record that claims a verified identity without such a proof is a
// "proof" problem (it was edited, or written by hand); with WithPeople or
// WithTrust a verified one must be signed by a person's key the auditor
// names, under its name ("untrusted"), as a person's command is.
func CheckVoid(run string, v eventlog.VoidRecord, opts ...Option) (projections.PersonView, *Problem) {
	var c config
	for _, o := range opts {
		o(&c)
	}
	who := projections.PersonView{By: v.By, Reason: v.Reason, At: v.Recorded}
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
	if why, _ := personProblem(c, what, who); why != "" {
		return who, &Problem{Kind: KindUntrusted, Message: fmt.Sprintf("run %s: %s", run, why)}
	}
	return who, nil
}
