package main

import (
	"context"
	"encoding/json"
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
	// print: print the signed command proof and send nothing
	// (--print-proof, for the console's form without its script).
	print bool
}

func addSignFlags(fs *flag.FlagSet) *signFlags {
	s := &signFlags{}
	fs.StringVar(&s.key, "signing-key", "", "sign the command with this nkey seed file (a key of an approver of signed proofs, or of the deployment's person keys; docs/security.md)")
	fs.DurationVar(&s.ttl, "proof-ttl", approvers.DefaultLifetime, "with --signing-key: how long the signed proof is valid (at most the approver's, or the deployment's, lifetime)")
	return s
}

// addCommandSignFlags are addSignFlags and --print-proof (the commands
// signed with a command proof: reconcile, resolve, cancel, pause, resume).
func addCommandSignFlags(fs *flag.FlagSet) *signFlags {
	s := addSignFlags(fs)
	fs.BoolVar(&s.print, "print-proof", false, "with --signing-key: print the signed command proof (JSON) and send nothing — to paste into the console's form (docs/console.md)")
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
// one, which it sets) — narrowed to the edited arguments edit when set
// (docs/semantics.md §4, "Approving narrower arguments") —, and says on w
// exactly what it signs. The runtime
// checks every value against the run itself: a view that lied would only
// get the proof refused.
func signAnswer(ctx context.Context, w io.Writer, q runReader, sf *signFlags, run, action string, revision *int, answer, reason string, edit json.RawMessage) (*events.ApprovalProof, error) {
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
	if edit != nil {
		s.Approved = edit
	}
	if s, err = s.Answering(answer, reason); err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	p, err := proof.SignAnswer(s, kp, time.Now().Add(sf.ttl))
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "signing: %s run %s action %s revision %d (%s v%d): %s %s\n  key %s, expires %s\n",
		answer, run, action, s.Revision, s.Requirement.Name, s.Requirement.Version, s.Tool, s.Arguments, pub, p.Expires.Format(time.RFC3339))
	if s.Approved != nil {
		fmt.Fprintf(w, "  narrowed to the edited arguments %s\n", s.Approved)
	}
	if s.Reason != "" {
		fmt.Fprintf(w, "  for the reason %q\n", s.Reason)
	}
	return &p, nil
}

// signCommand signs s with the --signing-key (nil without one) and says
// on w exactly what it signs.
func signCommand(w io.Writer, sf *signFlags, s proof.CommandSubject) (*events.CommandProof, error) {
	if sf.key == "" {
		if sf.print {
			return nil, usagef("--print-proof needs --signing-key")
		}
		return nil, nil
	}
	kp, err := readSigningKey(sf.key)
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	p, err := proof.NewCommand(s, pub, time.Now().Add(sf.ttl))
	if err != nil {
		return nil, err
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "signing: %s run %s", s.Command, s.Run)
	if s.Action != "" {
		fmt.Fprintf(w, " action %s content %s", s.Action, oneLine(string(s.Content), 60))
	}
	fmt.Fprintf(w, " reason %q\n  key %s, expires %s\n", s.Reason, pub, p.Expires.Format(time.RFC3339))
	return &p, nil
}

// printedProof prints p as JSON on w when --print-proof was given and
// reports whether it did: the command is then not sent.
func printedProof(w io.Writer, sf *signFlags, p *events.CommandProof) (bool, error) {
	if !sf.print {
		return false, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return true, err
	}
	_, err = fmt.Fprintln(w, string(b))
	return true, err
}

// printDeeds lists who did each thing a person did in the run (answers,
// reconciliations, resolutions, a cancellation, pauses, resumes, the
// restart that made it), and whether the
// deployment vouched for it (docs/security.md, "Who did it").
func printDeeds(w io.Writer, envs []events.Envelope) {
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		rec, err := projector.Recorded(env)
		if err != nil {
			break // the audit names an event that does not decode
		}
		recs = append(recs, rec)
	}
	for i, d := range projections.Deeds(recs) {
		if i == 0 {
			fmt.Fprintln(w, "who:")
		}
		line := fmt.Sprintf("  event %d: %s %s", d.Version, d.What, d.Who.Describe())
		if d.Who.Reason != "" {
			line += fmt.Sprintf(", reason %q", d.Who.Reason)
		}
		fmt.Fprintln(w, line)
	}
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
			line := fmt.Sprintf("  %s revision %d: %s %s", a.ID, h.Revision, h.Answer, projections.PersonView{By: h.Reviewer, Verified: h.Verified, Key: keyOf(h.Proof)}.Describe())
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
			if h.Arguments != nil {
				fmt.Fprintf(w, "    narrowed: the model asked %s, approved %s\n", oneLine(string(a.Arguments), 80), oneLine(string(h.Arguments), 80))
			}
		}
	}
}

func keyOf(p *projections.ProofStatus) string {
	if p == nil {
		return ""
	}
	return p.Key
}

// printPeople lists who reconciled, resolved and cancelled in v.
func printPeople(w io.Writer, v projections.RunView) {
	var lines []string
	for _, a := range v.Actions {
		if p := a.Reconciled; p != nil {
			lines = append(lines, fmt.Sprintf("  %s reconciled %s%s", a.ID, p.Describe(), reason(p.Reason)))
		}
		if q := a.Question; q != nil && q.Resolution != nil {
			r := q.Resolution
			lines = append(lines, fmt.Sprintf("  %s resolved (%s) %s%s", a.ID, r.Kind, r.Person().Describe(), reason(r.Reason)))
		}
	}
	if p := v.Cancelled; p != nil {
		lines = append(lines, fmt.Sprintf("  cancelled %s%s", p.Describe(), reason(p.Reason)))
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\nwho:")
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	}
}

func reason(r string) string {
	if r == "" {
		return ""
	}
	return fmt.Sprintf(", reason %q", r)
}

// printProofChecks lists the signed proofs audit verify re-checked.
func printProofChecks(w io.Writer, checks []audit.ProofCheck) {
	for _, c := range checks {
		verdict := "verifies"
		if c.Trusted {
			verdict += ", a person's key you trust"
		}
		if c.ReasonUnsigned {
			verdict += " (its reason is not signed: the proof states none)"
		}
		if !c.Verified {
			verdict = "DOES NOT VERIFY: " + c.Reason
		}
		if c.Command != "" {
			what := c.Command
			if c.Action != "" {
				what += " of action " + c.Action
			}
			fmt.Fprintf(w, "proof: event %d, %s by %s, key %s: %s\n", c.Version, what, c.Reviewer, c.Key, verdict)
			continue
		}
		fmt.Fprintf(w, "proof: event %d, %s of action %s revision %d by %s (approver %s), key %s: %s\n",
			c.Version, c.Answer, c.Action, c.Revision, c.Reviewer, c.Verifier, c.Key, verdict)
	}
}
