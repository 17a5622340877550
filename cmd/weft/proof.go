package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/proof"
)

// signFlags are the flags of a signed answer (approve, reject).
type signFlags struct {
	key string
	ttl time.Duration
}

func addSignFlags(fs *flag.FlagSet) *signFlags {
	s := &signFlags{}
	fs.StringVar(&s.key, "signing-key", "", "sign the answer with this nkey seed file (an approver of signed proofs; docs/security.md) instead of a --credential")
	fs.DurationVar(&s.ttl, "proof-ttl", approvers.DefaultLifetime, "with --signing-key: how long the signed proof is valid (at most the approver's lifetime)")
	return s
}

// readSigningKey reads an nkey user seed ("SU…") from path.
func readSigningKey(path string) (nkeys.KeyPair, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--signing-key: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, usagef("--signing-key %s: not an nkey seed: %v", path, err)
	}
	if pub, _ := kp.PublicKey(); nkeys.Prefix(pub) != nkeys.PrefixByteUser {
		return nil, usagef("--signing-key %s: not a user key (SU…)", path)
	}
	return kp, nil
}

// signAnswer signs answer to the pending approval request of action in
// run, as the run view shows it (revision: the one given, else the pending
// one, which it sets), and says on w exactly what it signs. The runtime
// checks every value against the run itself: a view that lied would only
// get the proof refused.
func signAnswer(ctx context.Context, w io.Writer, q *projector.Client, sf *signFlags, run, action string, revision *int, answer string) (*events.ApprovalProof, error) {
	kp, err := readSigningKey(sf.key)
	if err != nil {
		return nil, err
	}
	v, err := q.Run(ctx, run)
	if err != nil {
		return nil, err
	}
	s, err := v.ProofSubject(action, *revision, answer)
	if err != nil {
		return nil, err
	}
	*revision = s.Revision
	pub, _ := kp.PublicKey()
	p, err := proof.New(s, pub, time.Now().Add(sf.ttl))
	if err != nil {
		return nil, err
	}
	if p, err = proof.Sign(p, kp.Sign); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "signing: %s run %s action %s revision %d (%s v%d): %s %s\n  key %s, expires %s\n",
		answer, run, action, s.Revision, s.Requirement.Name, s.Requirement.Version, s.Tool, s.Arguments, pub, p.Expires.Format(time.RFC3339))
	return &p, nil
}

// printAnswers lists the answered approval requests of v: who answered,
// which approver verified it and, for a signed proof, its key and whether
// it verifies (docs/security.md: an audit shows who).
func printAnswers(w io.Writer, v projections.RunView) {
	first := true
	for _, a := range v.Actions {
		for _, h := range a.Approvals {
			if h.Answer == "" || h.Answer == events.AnswerExpired {
				continue
			}
			if first {
				fmt.Fprintln(w, "\nanswers:")
				first = false
			}
			line := fmt.Sprintf("  %s revision %d: %s", a.ID, h.Revision, h.Answer)
			if h.Reviewer != "" {
				line += " by " + h.Reviewer
			}
			if h.Verifier != "" {
				line += ", verified by approver " + h.Verifier
			}
			if p := h.Proof; p != nil {
				if p.Verified {
					line += "; signed by key " + p.Key + ": the proof verifies"
				} else {
					line += "; signed by key " + p.Key + ": the proof DOES NOT VERIFY (" + p.Reason + ")"
				}
			}
			fmt.Fprintln(w, line)
		}
	}
}

// printProofChecks lists the signed proofs audit verify re-checked.
func printProofChecks(w io.Writer, checks []audit.ProofCheck) {
	for _, c := range checks {
		verdict := "verifies"
		if !c.Verified {
			verdict = "DOES NOT VERIFY: " + c.Reason
		}
		fmt.Fprintf(w, "proof: event %d, %s of action %s revision %d by %s (approver %s), key %s: %s\n",
			c.Version, c.Answer, c.Action, c.Revision, c.Reviewer, c.Verifier, c.Key, verdict)
	}
}
