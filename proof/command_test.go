package proof_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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

// TestCommandDigestPinned_Void (docs/protocol/20-events.md, the command
// proof; docs/security.md, "Who did it"): a repair's void proof states the
// command void, the run, no action, as content the SHA-256 of the bytes
// {"seq":SEQ,"sha256":"HASH"} and the reason; its content and digest are
// pinned here for the documented example, so a verifier written from the
// document computes the same bytes.
func TestCommandDigestPinned_Void(t *testing.T) {
	sha := "c5f8d8e1d2f06b0ba0f2a3bfa3c9c3e3a8e7b0e2f9d8c1a0b3e4f5a6b7c8d9e0"
	p, err := proof.NewCommand(proof.VoidSubject("pay-7", 1042, sha, "published by hand by mistake"),
		"UDVEU3DD4KOFECV66VIHWEZOYX4ZKR3WV27L464SIIPOU2IUI3JCYSJF", time.Date(2026, 11, 30, 10, 1, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	content := sha256.Sum256([]byte(`{"seq":1042,"sha256":"` + sha + `"}`))
	if p.Command != "void" || p.Action != "" || p.Content != hex.EncodeToString(content[:]) {
		t.Fatalf("void proof %+v: want command void, no action, content_sha256 %x", p, content)
	}
	const want = "6febca913ed9159551c18193cda8eb7151226246c4d4ddb40cea764241eaf35c"
	if got := fmt.Sprintf("%x", proof.CommandDigest(p)); got != want {
		t.Fatalf("void digest %s, want %s (content_sha256 %s)", got, want, p.Content)
	}
}
