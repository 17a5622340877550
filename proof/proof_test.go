package proof_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// fixedKey is a user key from a fixed seed, so digests and signatures are
// reproducible.
func fixedKey(t *testing.T, b byte) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func pub(t *testing.T, kp nkeys.KeyPair) string {
	t.Helper()
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	at      = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	subject = proof.Subject{
		Run: "pay-7", Action: "2/call_2_1", Revision: 1, Requirement: events.Requirement{Name: "finance", Version: 1},
		Tool: "send_payment", Arguments: json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount":1200,"currency":"EUR"}`),
		Answer: events.AnswerApprove,
	}
)

func signed(t *testing.T, kp nkeys.KeyPair, s proof.Subject, expires time.Time) events.ApprovalProof {
	t.Helper()
	p, err := proof.New(s, pub(t, kp), expires)
	if err != nil {
		t.Fatal(err)
	}
	p, err = proof.Sign(p, kp.Sign)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func reason(err error) string {
	var pe *proof.Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	if err == nil {
		return ""
	}
	return "not a proof.Error: " + err.Error()
}

// TestProofChecks: a proof verifies for exactly what it was signed for,
// and each difference is refused with its own reason (wrong arguments, action,
// revision; expired).
func TestProofChecks(t *testing.T) {
	kp := fixedKey(t, 7)
	p := signed(t, kp, subject, at.Add(time.Minute))
	if err := proof.Check(p, subject, at); err != nil {
		t.Fatalf("a proof of exactly the subject: %v", err)
	}
	other := func(f func(*proof.Subject)) proof.Subject { s := subject; f(&s); return s }
	for _, c := range []struct {
		name string
		s    proof.Subject
		want string
	}{
		{"another run", other(func(s *proof.Subject) { s.Run = "pay-8" }), proof.ReasonOtherRun},
		{"another action", other(func(s *proof.Subject) { s.Action = "2/call_2_2" }), proof.ReasonOtherAction},
		{"another revision", other(func(s *proof.Subject) { s.Revision = 2 }), proof.ReasonOtherRevision},
		{"another requirement version", other(func(s *proof.Subject) { s.Requirement.Version = 2 }), proof.ReasonOtherRequirement},
		{"another tool", other(func(s *proof.Subject) { s.Tool = "refund" }), proof.ReasonOtherTool},
		{"other arguments", other(func(s *proof.Subject) {
			s.Arguments = json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount":12000,"currency":"EUR"}`)
		}), proof.ReasonOtherArguments},
		{"another answer", other(func(s *proof.Subject) { s.Answer = events.AnswerReject }), proof.ReasonOtherAnswer},
	} {
		if got := reason(proof.Check(p, c.s, at)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	// The same arguments spelled with other whitespace are the same
	// arguments: their canonical bytes are equal.
	spaced := other(func(s *proof.Subject) {
		s.Arguments = json.RawMessage("{ \"invoice\": \"INV-7\",\n \"payee\": \"ACME Ltd\", \"amount\": 1200, \"currency\": \"EUR\" }")
	})
	if err := proof.Check(p, spaced, at); err != nil {
		t.Errorf("whitespace only: %v", err)
	}
	if got := reason(proof.Check(p, subject, at.Add(time.Minute))); got != proof.ReasonProofExpired {
		t.Errorf("at its expiry: %q, want proof_expired", got)
	}
	if err := proof.Check(p, subject, at.Add(time.Minute-time.Nanosecond)); err != nil {
		t.Errorf("just before its expiry: %v", err)
	}
}

// TestProofTampered: changing any stated value after signing (to make the
// proof match something else), or the signature, or the key, breaks the
// signature.
func TestProofTampered(t *testing.T) {
	kp := fixedKey(t, 7)
	p := signed(t, kp, subject, at.Add(time.Minute))
	h, _ := proof.ArgumentsHash(json.RawMessage(`{"invoice":"INV-7","payee":"Evil Ltd","amount":1200,"currency":"EUR"}`))
	for name, f := range map[string]func(*events.ApprovalProof){
		"arguments":   func(p *events.ApprovalProof) { p.Arguments = h },
		"revision":    func(p *events.ApprovalProof) { p.Revision = 2 },
		"expiry":      func(p *events.ApprovalProof) { p.Expires = p.Expires.Add(time.Hour) },
		"answer":      func(p *events.ApprovalProof) { p.Answer = events.AnswerReject },
		"requirement": func(p *events.ApprovalProof) { p.Requirement.Name = "ops" },
		"key":         func(p *events.ApprovalProof) { p.Key = pub(t, fixedKey(t, 8)) },
		"signature":   func(p *events.ApprovalProof) { p.Signature = p.Signature[:10] + "A" + p.Signature[11:] },
		"not a key":   func(p *events.ApprovalProof) { p.Key = "alice" },
	} {
		q := p
		f(&q)
		if got := reason(proof.Verify(q)); got != proof.ReasonBadSignature {
			t.Errorf("%s changed: %q, want bad_signature", name, got)
		}
	}
	// Signed by another key than the one it names.
	q, _ := proof.New(subject, pub(t, kp), at.Add(time.Minute))
	q, _ = proof.Sign(q, fixedKey(t, 9).Sign)
	if got := reason(proof.Verify(q)); got != proof.ReasonBadSignature {
		t.Errorf("signed by another key: %q, want bad_signature", got)
	}
}

// TestDigestPinned pins the digest of a fixed proof: the signed bytes are
// part of the protocol (docs/protocol/20-events.md) and never change.
func TestDigestPinned(t *testing.T) {
	p, err := proof.New(subject, pub(t, fixedKey(t, 7)), at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Arguments) != 64 {
		t.Fatalf("arguments hash %q", p.Arguments)
	}
	d := proof.Digest(p)
	const want = "6752121d809c9c928a4ee88aebde93bbee3a244d22e340b423899de8cb70ab77" // also computed by a 10-line Python script from the documented layout
	if got := hex.EncodeToString(d[:]); got != want {
		t.Fatalf("digest %s, want %s (arguments %s, key %s)", got, want, p.Arguments, p.Key)
	}
}

// TestPublicKeyDecodesNkeys: the package's own nkey decoding (it imports
// nothing from NATS) agrees with nkeys, and refuses what nkeys refuses.
func TestPublicKeyDecodesNkeys(t *testing.T) {
	for b := range byte(32) {
		kp := fixedKey(t, b)
		raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(pub(t, kp)))
		if err != nil {
			t.Fatal(err)
		}
		got, err := proof.PublicKey(pub(t, kp))
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("key %d: %x %v, want %x", b, got, err, raw)
		}
		if k, err := proof.UserKey(raw); err != nil || k != pub(t, kp) {
			t.Fatalf("key %d: UserKey %s %v, want %s", b, k, err, pub(t, kp))
		}
	}
	if _, err := proof.UserKey(make([]byte, 31)); err == nil {
		t.Error("UserKey took 31 bytes")
	}
	acc, _ := nkeys.CreateAccount()
	apub, _ := acc.PublicKey()
	if _, err := proof.PublicKey(apub); err == nil {
		t.Error("an account key decoded as a user key")
	}
	good := pub(t, fixedKey(t, 1))
	bad := good[:5] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"[(int(good[5]-'A')+1)%32]) + good[6:]
	if _, err := proof.PublicKey(bad); err == nil {
		t.Error("a key with a wrong checksum decoded")
	}
}

// TestCanonicalIsGoEncoding: the canonical bytes are those encoding/json
// writes for the arguments (what the log and the views carry), and
// canonicalising them again changes nothing.
func TestCanonicalIsGoEncoding(t *testing.T) {
	in := json.RawMessage("{ \"note\": \"<a & b>\u2028\", \"n\": 1e3, \"u\": \"\\u00e9\" }")
	c, err := proof.Canonical(in)
	if err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(struct {
		A json.RawMessage `json:"a"`
	}{in})
	if want := `{"a":` + string(c) + `}`; string(enc) != want {
		t.Fatalf("canonical %s, encoding/json writes %s", c, enc)
	}
	again, _ := proof.Canonical(c)
	if !bytes.Equal(again, c) {
		t.Fatalf("not idempotent: %s then %s", c, again)
	}
}

// TestSignedOutsideNkeys: a proof signed by a plain ed25519 key — as a
// browser's WebCrypto key or a hardware key signs, knowing nothing of
// nkeys — named by UserKey and signed over Digest, base64url without
// padding, verifies; the same signature over another digest does not.
func TestSignedOutsideNkeys(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	key, err := proof.UserKey(priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	p, err := proof.New(subject, key, at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d := proof.Digest(p)
	p.Signature = base64.RawURLEncoding.EncodeToString(ed25519.Sign(priv, d[:]))
	if err := proof.Verify(p); err != nil {
		t.Fatalf("a proof signed with plain ed25519: %v", err)
	}
	if err := proof.Check(p, subject, at); err != nil {
		t.Fatalf("check: %v", err)
	}
	p.Revision++
	if r := reason(proof.Verify(p)); r != proof.ReasonBadSignature {
		t.Fatalf("the signature over another statement: %s, want bad_signature", r)
	}
}

// TestSemantics4_ApproveNarrower_ProofCoversEdit: a proof of an approve
// with edited arguments (docs/semantics.md §4, "Approving narrower
// arguments") states both the call as asked and the approved arguments,
// and verifies only for exactly that edit: a proof of the call as asked
// is refused for an edited answer, an edited proof for an answer as asked
// or another edit, and changing the approved hash breaks the signature.
func TestSemantics4_ApproveNarrower_ProofCoversEdit(t *testing.T) {
	kp := fixedKey(t, 7)
	edited := subject
	edited.Approved = json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount":200,"currency":"EUR"}`)
	p := signed(t, kp, edited, at.Add(time.Minute))
	if err := proof.Check(p, edited, at); err != nil {
		t.Fatalf("a proof of exactly the edit: %v", err)
	}
	if got := reason(proof.Check(p, subject, at)); got != proof.ReasonOtherArguments {
		t.Errorf("an edited proof for the answer as asked: %q, want other_arguments", got)
	}
	other := edited
	other.Approved = json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount":300,"currency":"EUR"}`)
	if got := reason(proof.Check(p, other, at)); got != proof.ReasonOtherArguments {
		t.Errorf("an edited proof for another edit: %q, want other_arguments", got)
	}
	asAsked := signed(t, kp, subject, at.Add(time.Minute))
	if got := reason(proof.Check(asAsked, edited, at)); got != proof.ReasonOtherArguments {
		t.Errorf("a proof of the call as asked for an edited answer: %q, want other_arguments", got)
	}
	q := p
	q.Approved, _ = proof.ArgumentsHash(other.Approved)
	if got := reason(proof.Verify(q)); got != proof.ReasonBadSignature {
		t.Errorf("approved hash changed after signing: %q, want bad_signature", got)
	}
	q = p
	q.Approved = ""
	if got := reason(proof.Verify(q)); got != proof.ReasonBadSignature {
		t.Errorf("approved hash removed after signing: %q, want bad_signature", got)
	}
	d := proof.Digest(p)
	const want = "87daebb79f734575167db772fb3ef271b5e4189ba39e072f1fa68475ca6ebb3b" // also computed by a Python script from the documented layout
	if got := hex.EncodeToString(d[:]); got != want {
		t.Errorf("edited digest %s, want %s (approved %s)", got, want, p.Approved)
	}
}

// TestSemantics4_ApproveNarrower_SubjectWithApproved (docs/semantics.md §4,
// "Approving narrower arguments"): the one rule for which edit a proof's
// subject states — an approve's own edit, else the edit the call started
// with, else none; a reject states none whatever the edits.
func TestSemantics4_ApproveNarrower_SubjectWithApproved(t *testing.T) {
	edit, standing := json.RawMessage(`{"amount":50}`), json.RawMessage(`{"amount":70}`)
	approve := proof.Subject{Answer: events.AnswerApprove}
	reject := proof.Subject{Answer: events.AnswerReject, Approved: edit}
	for _, c := range []struct {
		name           string
		s              proof.Subject
		edit, standing json.RawMessage
		want           string
	}{
		{"approve with an edit", approve, edit, standing, string(edit)},
		{"approve of a started edit", approve, nil, standing, string(standing)},
		{"approve as asked", approve, nil, nil, ""},
		{"reject", reject, edit, standing, ""},
	} {
		if got := c.s.WithApproved(c.edit, c.standing).Approved; string(got) != c.want {
			t.Errorf("%s: approved %s, want %q", c.name, got, c.want)
		}
	}
}

// TestSecuritySignedReject_ProofCoversReason (docs/security.md, "Signed
// approval proofs"; docs/protocol/20-events.md, the v3 digest): a reject's
// proof that states its reason is digested under "weft approval proof v3"
// with the reason last, pinned here for the documented example; it
// verifies for that reason only (other_reason otherwise), and with the
// reason taken out of the proof its signature no longer verifies. A proof
// stating no reason (v1) still verifies for a reject with a reason, and
// CoversReason says the reason is not covered.
func TestSecuritySignedReject_ProofCoversReason(t *testing.T) {
	kp := fixedKey(t, 7)
	s := subject
	s.Answer, s.Reason = events.AnswerReject, "the invoice is a duplicate"
	p, err := proof.New(s, pub(t, kp), at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	d := proof.Digest(p)
	const want = "008e38bd6f8b33b060cf2cb93f5807e814f2a6c0ed08b390d376455cabefe8a6"
	if got := hex.EncodeToString(d[:]); got != want {
		t.Fatalf("v3 digest %s, want %s (%+v)", got, want, p)
	}
	if p, err = proof.Sign(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	if err := proof.Check(p, s, at); err != nil || !proof.CoversReason(p, s) {
		t.Fatalf("the reject as signed: %v, covers %t", err, proof.CoversReason(p, s))
	}
	other := s
	other.Reason = "paid by card"
	var pe *proof.Error
	if err := proof.Check(p, other, at); !errors.As(err, &pe) || pe.Reason != proof.ReasonOtherReason {
		t.Fatalf("another reason: %v, want other_reason", err)
	}
	stripped := p
	stripped.Reason = ""
	if err := proof.Check(stripped, s, at); !errors.As(err, &pe) || pe.Reason != proof.ReasonBadSignature {
		t.Fatalf("the reason taken out of the proof: %v, want bad_signature", err)
	}
	v1s := s
	v1s.Reason = ""
	v1, err := proof.New(v1s, pub(t, kp), at.Add(time.Minute))
	if err == nil {
		v1, err = proof.Sign(v1, kp.Sign)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := proof.Check(v1, s, at); err != nil || proof.CoversReason(v1, s) {
		t.Fatalf("a v1 reject proof for a reject with a reason: %v, covers %t; want it verifying, the reason not covered", err, proof.CoversReason(v1, s))
	}
}

// TestSecuritySignedReject_AnsweringSignsTheReason: the subject of a
// reject sent with a reason states it (Answering), and SignAnswer signs it
// as the v3 proof the runner binds — the proof New and Sign make; an
// approve states no reason and keeps its edit, a reject drops the edit.
func TestSecuritySignedReject_AnsweringSignsTheReason(t *testing.T) {
	kp := fixedKey(t, 7)
	edited := subject
	edited.Approved = json.RawMessage(`{"amount":1}`)
	r, err := edited.Answering(events.AnswerReject, "the invoice is a duplicate")
	if err != nil || r.Answer != events.AnswerReject || r.Reason != "the invoice is a duplicate" || r.Approved != nil {
		t.Fatalf("reject subject %+v (%v)", r, err)
	}
	if a, err := edited.Answering(events.AnswerApprove, ""); err != nil || a.Reason != "" || a.Approved == nil {
		t.Fatalf("approve subject %+v (%v): want no reason, the edit kept", a, err)
	}
	p, err := proof.SignAnswer(r, kp, at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want, err := proof.New(r, pub(t, kp), at.Add(time.Minute))
	if err == nil {
		want, err = proof.Sign(want, kp.Sign)
	}
	if err != nil || p != want {
		t.Fatalf("SignAnswer %+v, want %+v (%v)", p, want, err)
	}
	if err := proof.Check(p, r, at); err != nil || !proof.CoversReason(p, r) {
		t.Fatalf("check: %v, covers %t", err, proof.CoversReason(p, r))
	}
}

// TestSecuritySignedReject_AnsweringRefusesWhatItWouldNotSign: an approve
// with a reason and an answer that is neither approve nor reject are
// refused (as the TypeScript SDK's signProof throws), not signed as
// something other than what is sent.
func TestSecuritySignedReject_AnsweringRefusesWhatItWouldNotSign(t *testing.T) {
	if _, err := subject.Answering(events.AnswerApprove, "looks fine"); err == nil {
		t.Error("an approve with a reason: want refused")
	}
	for _, answer := range []string{"", "rejected", "Approve"} {
		if _, err := subject.Answering(answer, "a reason"); err == nil {
			t.Errorf("answer %q: want refused", answer)
		}
	}
}
