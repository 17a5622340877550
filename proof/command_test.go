package proof_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// TestCommandProof (docs/security.md "Who did it"): a command proof
// verifies for exactly the command it states — another command, run,
// action, content or reason is refused with its reason, an altered proof
// bad_signature, an expired one proof_expired — and its digest is not an
// approval proof's (the domains differ), so one can never pass for the
// other.
func TestCommandProof(t *testing.T) {
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := proof.CommandSubject{Command: proof.CommandReconcile, Run: "r-1", Action: "1/c1", Content: json.RawMessage(`{ "error" : "no" }`), Reason: "ticket 7"}
	p, err := proof.NewCommand(s, pub, at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	if err := proof.CheckCommand(p, s, at); err != nil {
		t.Fatalf("the proof of s: %v", err)
	}
	compact := s
	compact.Content = json.RawMessage(`{"error":"no"}`)
	if err := proof.CheckCommand(p, compact, at); err != nil {
		t.Fatalf("the same content, canonical: %v", err)
	}
	reason := func(err error) string {
		var pe *proof.Error
		if !errors.As(err, &pe) {
			return "none"
		}
		return pe.Reason
	}
	for _, c := range []struct {
		edit func(*proof.CommandSubject)
		want string
	}{
		{func(x *proof.CommandSubject) { x.Command = proof.CommandResolve }, proof.ReasonOtherCommand},
		{func(x *proof.CommandSubject) { x.Run = "r-2" }, proof.ReasonOtherRun},
		{func(x *proof.CommandSubject) { x.Action = "1/c2" }, proof.ReasonOtherAction},
		{func(x *proof.CommandSubject) { x.Content = json.RawMessage(`{"error":"yes"}`) }, proof.ReasonOtherContent},
		{func(x *proof.CommandSubject) { x.Reason = "ticket 8" }, proof.ReasonOtherReason},
	} {
		other := s
		c.edit(&other)
		if got := reason(proof.CheckCommand(p, other, at)); got != c.want {
			t.Errorf("a proof checked against %+v: %s, want %s", other, got, c.want)
		}
	}
	altered := p
	altered.Reason = "ticket 8"
	s8 := s
	s8.Reason = "ticket 8"
	if got := reason(proof.CheckCommand(altered, s8, at)); got != proof.ReasonBadSignature {
		t.Errorf("an altered proof: %s, want bad_signature", got)
	}
	if got := reason(proof.CheckCommand(p, s, at.Add(time.Minute))); got != proof.ReasonProofExpired {
		t.Errorf("at its expiry: %s, want proof_expired", got)
	}
	// The same fields under the approval proof's domain give another digest.
	ap := events.ApprovalProof{Key: p.Key, Run: p.Run, Action: p.Action, Expires: p.Expires}
	if proof.Digest(ap) == proof.CommandDigest(p) {
		t.Error("an approval proof's digest equals a command proof's")
	}
}
