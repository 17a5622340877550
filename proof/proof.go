// Package proof signs and verifies Weft's approval proofs: an approver's
// ed25519 signature (an nkey user key) over a digest of exactly what an
// answer approves — the run, the action, the revision and the requirement
// of the approval request, the tool called and the SHA-256 of its
// canonical arguments bytes — plus the answer and the proof's expiry.
//
// A proof (events.ApprovalProof) states those values and carries the
// signature over them. Checking one is two steps, both pure:
//
//  1. Check compares what it states with the facts (a Subject, taken from
//     the run: the pending request and the call it is for) and names the
//     first difference as a reason: other_run, other_action,
//     other_revision, other_requirement, other_tool, other_arguments,
//     other_answer; then verifies the signature (bad_signature) and the
//     expiry at the given time (proof_expired).
//  2. The caller checks the key: whether it is trusted, and for what
//     (approvers.Signed), and that the proof was not used before
//     (aggregate: proof_used).
//
// The runner checks a proof before it records the answer; the log records
// it (events.ApprovalAnswered.Proof); `weft audit verify` checks it again
// offline against the facts the log records, so an approval whose call was
// altered afterwards — even with a rewritten hash chain — no longer
// verifies. The package is pure: no clock, no I/O (time comes in as an
// argument), and signing takes a function (an nkeys key pair's Sign).
package proof

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base32"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/weftrun/weft/events"
)

// The reasons Check returns (as the Reason of a proof_refused error).
const (
	// ReasonOtherRun means the proof is for another run.
	ReasonOtherRun = "other_run"
	// ReasonOtherAction means the proof is for another action.
	ReasonOtherAction = "other_action"
	// ReasonOtherRevision means the proof is for another revision of the
	// request (an earlier one, or one never issued).
	ReasonOtherRevision = "other_revision"
	// ReasonOtherRequirement means the proof is for another requirement
	// name or version.
	ReasonOtherRequirement = "other_requirement"
	// ReasonOtherTool means the proof is for a call of another tool.
	ReasonOtherTool = "other_tool"
	// ReasonOtherArguments means the proof is for other arguments.
	ReasonOtherArguments = "other_arguments"
	// ReasonOtherAnswer means the proof gives another answer (approve for
	// a reject, or the reverse).
	ReasonOtherAnswer = "other_answer"
	// ReasonBadSignature means the signature does not verify with the
	// proof's key: the proof was altered, or signed by another key.
	ReasonBadSignature = "bad_signature"
	// ReasonProofExpired means the proof's expiry has passed.
	ReasonProofExpired = "proof_expired"
	// ReasonProofUsed is not Check's: the runtime refuses a proof already
	// recorded with an answer of the run (aggregate.ProofUsed), and a
	// command proof already recorded with a command (CheckCommand's
	// neither: aggregate.CommandProofUsed).
	ReasonProofUsed = "proof_used"
)

// Subject is what an answer is for, as the run records it: the pending
// approval request (Run, Action, Revision, Requirement), the call it
// approves (Tool, Arguments as recorded) and the answer given.
type Subject struct {
	Run         string
	Action      string
	Revision    int
	Requirement events.Requirement
	Tool        string
	Arguments   json.RawMessage
	// Approved are the edited arguments an approve narrows the call to
	// (docs/semantics.md §4, "Approving narrower arguments"); nil for an
	// answer to the call as asked. A proof of an edited approve states
	// their hash too (events.ApprovalProof.Approved).
	Approved json.RawMessage
	// Answer is events.AnswerApprove or events.AnswerReject.
	Answer string
	// Reason is the reason a reject gives ("" for none, and for an
	// approve). A proof that states a reason covers it (the v3 digest);
	// New states s.Reason.
	Reason string
}

// WithApproved returns s with the edited arguments its answer approves:
// for an approve, edit (the answer's own edit) or else standing (the edit
// a call already started with, which a request re-asked after a lost
// attempt approves); none for a reject. The runtime, the audit and the
// run view all state a proof's subject through it, so that none of them
// can tell another edit (docs/semantics.md §4, "Approving narrower
// arguments").
func (s Subject) WithApproved(edit, standing json.RawMessage) Subject {
	s.Approved = nil
	if s.Answer != events.AnswerApprove {
		return s
	}
	s.Approved = edit
	if s.Approved == nil {
		s.Approved = standing
	}
	return s
}

// Canonical returns the canonical bytes of a JSON value: insignificant
// whitespace removed and, inside strings, <, >, &, U+2028 and U+2029
// written \u003c, \u003e, \u0026, \u2028, \u2029 — the form in which the
// log, the run view and the approvals inbox carry a call's arguments
// (Go's encoding/json). Everything else (key order, number spelling,
// other escapes) is kept as it is. It is idempotent.
func Canonical(v json.RawMessage) ([]byte, error) {
	var c bytes.Buffer
	if err := json.Compact(&c, v); err != nil {
		return nil, fmt.Errorf("proof: arguments: %w", err)
	}
	var e bytes.Buffer
	json.HTMLEscape(&e, c.Bytes())
	return e.Bytes(), nil
}

// ArgumentsHash returns the lowercase hex SHA-256 of the canonical bytes of
// arguments.
func ArgumentsHash(arguments json.RawMessage) (string, error) {
	c, err := Canonical(arguments)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// New returns the unsigned proof of s by key, expiring at expires (cut to
// whole seconds).
func New(s Subject, key string, expires time.Time) (events.ApprovalProof, error) {
	h, err := ArgumentsHash(s.Arguments)
	if err != nil {
		return events.ApprovalProof{}, err
	}
	approved := ""
	if s.Approved != nil {
		if approved, err = ArgumentsHash(s.Approved); err != nil {
			return events.ApprovalProof{}, err
		}
	}
	return events.ApprovalProof{
		Key: key, Run: s.Run, Action: s.Action, Revision: s.Revision, Requirement: s.Requirement,
		Tool: s.Tool, Arguments: h, Approved: approved, Answer: s.Answer, Reason: s.Reason, Expires: expires.UTC().Truncate(time.Second),
	}, nil
}

// domain separates the digests of approval proofs from anything else the
// same key signs; domainEdited those of proofs of an edited approve (a
// proof with an approved hash), so that neither form can be read as the
// other.
const (
	domain       = "weft approval proof v1"
	domainEdited = "weft approval proof v2"
	// domainReason is the digest of a proof that states a reason.
	domainReason = "weft approval proof v3"
)

// Digest returns the SHA-256 digest a proof's signature covers: of the
// domain string "weft approval proof v1" followed by, each as a 4-byte
// big-endian length and its bytes: the answer, the run, the action, the
// revision (decimal), the requirement's name, its version (decimal), the
// tool, the arguments hash (lowercase hex), the expiry (Unix seconds,
// decimal) and the key. A proof of an edited approve (Approved set) is
// digested under "weft approval proof v2" with the approved arguments'
// hash (lowercase hex) after the key. A proof that states a reason
// (Reason: a reject's) is digested under "weft approval proof v3" with the
// approved arguments' hash (empty for none) and the reason after the key.
func Digest(p events.ApprovalProof) [32]byte {
	if p.Reason != "" {
		return digest(domainReason, p.Answer, p.Run, p.Action, strconv.Itoa(p.Revision), p.Requirement.Name, strconv.Itoa(p.Requirement.Version),
			p.Tool, p.Arguments, strconv.FormatInt(p.Expires.Unix(), 10), p.Key, p.Approved, p.Reason)
	}
	if p.Approved != "" {
		return digest(domainEdited, p.Answer, p.Run, p.Action, strconv.Itoa(p.Revision), p.Requirement.Name, strconv.Itoa(p.Requirement.Version),
			p.Tool, p.Arguments, strconv.FormatInt(p.Expires.Unix(), 10), p.Key, p.Approved)
	}
	return digest(domain, p.Answer, p.Run, p.Action, strconv.Itoa(p.Revision), p.Requirement.Name, strconv.Itoa(p.Requirement.Version),
		p.Tool, p.Arguments, strconv.FormatInt(p.Expires.Unix(), 10), p.Key)
}

// digest is the SHA-256 of the domain string followed by each field as a
// 4-byte big-endian length and its bytes.
func digest(domain string, fields ...string) [32]byte {
	var b bytes.Buffer
	b.WriteString(domain)
	for _, f := range fields {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		b.Write(n[:])
		b.WriteString(f)
	}
	return sha256.Sum256(b.Bytes())
}

// Sign signs p with sign (an nkeys.KeyPair's Sign for p.Key) and returns it
// with its Signature set.
func Sign(p events.ApprovalProof, sign func([]byte) ([]byte, error)) (events.ApprovalProof, error) {
	sig, err := signDigest(Digest(p), sign)
	p.Signature = sig
	return p, err
}

func signDigest(d [32]byte, sign func([]byte) ([]byte, error)) (string, error) {
	sig, err := sign(d[:])
	if err != nil {
		return "", fmt.Errorf("proof: sign: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(sig), nil
}

// Signer is a key that signs: an nkeys.KeyPair, or anything that names its
// nkey user public key and signs bytes with it (plain ed25519).
type Signer interface {
	PublicKey() (string, error)
	Sign(input []byte) ([]byte, error)
}

// SignAnswer returns the proof that the holder of k gives s.Answer to s,
// expiring at expires, signed: the one signing of an answer that the CLI
// (`weft approve|reject --signing-key`) and the Go client (client.Client's
// RejectSigned) share. It states everything s states: the edited
// arguments of an approve (s.Approved), and the reason of a reject
// (s.Reason, the v3 digest), which Answering sets.
func SignAnswer(s Subject, k Signer, expires time.Time) (events.ApprovalProof, error) {
	key, err := k.PublicKey()
	if err != nil {
		return events.ApprovalProof{}, fmt.Errorf("proof: sign: %w", err)
	}
	p, err := New(s, key, expires)
	if err != nil {
		return events.ApprovalProof{}, err
	}
	return Sign(p, k.Sign)
}

// Answering returns s as the subject of the answer that is sent: answer
// (events.AnswerApprove or events.AnswerReject) with reason, the reason
// the reject gives, so that a signed reject's proof covers the reason the
// model reads (the v3 digest) and the audit does not list it unsigned. A
// reject approves no edited arguments. An approve with a reason and an
// answer that is neither are refused, as the TypeScript SDK's signProof
// refuses them: nothing would sign what is sent.
func (s Subject) Answering(answer, reason string) (Subject, error) {
	switch answer {
	case events.AnswerApprove:
		if reason != "" {
			return Subject{}, fmt.Errorf("proof: an approve gives no reason (%q)", reason)
		}
		s.Answer, s.Reason = answer, ""
		return s, nil
	case events.AnswerReject:
		s.Answer, s.Approved, s.Reason = answer, nil, reason
		return s, nil
	}
	return Subject{}, fmt.Errorf("proof: unknown answer %q: want %q or %q", answer, events.AnswerApprove, events.AnswerReject)
}

// Error is why a proof is refused: Reason is one of the Reason constants.
type Error struct {
	Reason  string
	Message string
}

// Error returns "reason: message".
func (e *Error) Error() string { return e.Reason + ": " + e.Message }

func refuse(reason, format string, args ...any) *Error {
	return &Error{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Check checks p against s at time now, in this order, and returns nil or
// an *Error: each stated value against the subject's (other_run,
// other_action, other_revision, other_requirement, other_tool,
// other_arguments, other_answer, and other_reason for a proof that
// states a reason), the signature (bad_signature, also for a
// key that is not a user nkey) and the expiry (proof_expired when now is
// not before Expires).
func Check(p events.ApprovalProof, s Subject, now time.Time) error {
	if err := Binds(p, s); err != nil {
		return err
	}
	if err := Verify(p); err != nil {
		return err
	}
	if !now.Before(p.Expires) {
		return refuse(ReasonProofExpired, "the proof expired at %s", p.Expires.UTC().Format(time.RFC3339))
	}
	return nil
}

// Binds checks that p states exactly s (Check's first step).
func Binds(p events.ApprovalProof, s Subject) error {
	switch {
	case p.Run != s.Run:
		return refuse(ReasonOtherRun, "the proof is for run %q, not %q", p.Run, s.Run)
	case p.Action != s.Action:
		return refuse(ReasonOtherAction, "the proof is for action %q, not %q", p.Action, s.Action)
	case p.Revision != s.Revision:
		return refuse(ReasonOtherRevision, "the proof is for revision %d, the request is revision %d", p.Revision, s.Revision)
	case p.Requirement != s.Requirement:
		return refuse(ReasonOtherRequirement, "the proof is for %s v%d, the request requires %s v%d", p.Requirement.Name, p.Requirement.Version, s.Requirement.Name, s.Requirement.Version)
	case p.Tool != s.Tool:
		return refuse(ReasonOtherTool, "the proof is for tool %q, the action calls %q", p.Tool, s.Tool)
	}
	h, err := ArgumentsHash(s.Arguments)
	if err != nil {
		return refuse(ReasonOtherArguments, "the action's arguments are not JSON: %v", err)
	}
	if p.Arguments != h {
		return refuse(ReasonOtherArguments, "the proof is for arguments with SHA-256 %s, the action's are %s", short(p.Arguments), short(h))
	}
	if err := bindsApproved(p, s); err != nil {
		return err
	}
	if p.Answer != s.Answer {
		return refuse(ReasonOtherAnswer, "the proof gives the answer %q, not %q", p.Answer, s.Answer)
	}
	if p.Reason != "" && p.Reason != s.Reason {
		return refuse(ReasonOtherReason, "the proof states the reason %q, the answer %q", p.Reason, s.Reason)
	}
	return nil
}

// CoversReason reports whether p covers the reason of the answer s: it
// states it (the v3 digest), or s gives none. A proof signed before
// proofs stated reasons still verifies (Binds checks a reason only when
// the proof states one), but the reason it was recorded with is vouched
// for by nobody but the log.
func CoversReason(p events.ApprovalProof, s Subject) bool {
	return s.Reason == "" || p.Reason == s.Reason
}

// bindsApproved checks that p approves exactly the edited arguments s
// approves, or none when s approves the call as asked (other_arguments).
func bindsApproved(p events.ApprovalProof, s Subject) error {
	if s.Approved == nil {
		if p.Approved != "" {
			return refuse(ReasonOtherArguments, "the proof approves edited arguments with SHA-256 %s, the answer approves the call as asked", short(p.Approved))
		}
		return nil
	}
	h, err := ArgumentsHash(s.Approved)
	if err != nil {
		return refuse(ReasonOtherArguments, "the approved arguments are not JSON: %v", err)
	}
	switch p.Approved {
	case h:
		return nil
	case "":
		return refuse(ReasonOtherArguments, "the proof approves the call as asked, the answer approves edited arguments with SHA-256 %s", short(h))
	}
	return refuse(ReasonOtherArguments, "the proof approves edited arguments with SHA-256 %s, the answer's are %s", short(p.Approved), short(h))
}

// Verify checks p's signature by p.Key over Digest(p) (bad_signature).
func Verify(p events.ApprovalProof) error {
	return verifyDigest(p.Key, p.Signature, Digest(p))
}

// verifyDigest checks signature (base64url) by key over d (bad_signature).
func verifyDigest(key, signature string, d [32]byte) error {
	pub, err := PublicKey(key)
	if err != nil {
		return refuse(ReasonBadSignature, "key %q: %v", key, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return refuse(ReasonBadSignature, "the signature is not a base64url ed25519 signature")
	}
	if !ed25519.Verify(pub, d[:], sig) {
		return refuse(ReasonBadSignature, "the signature does not verify with key %s: the proof was altered or signed by another key", short(key))
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12] + "…"
	}
	return s
}

// prefixUser is the nkey prefix byte of user keys ('U').
const prefixUser = 20 << 3

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// PublicKey decodes an nkey user public key ("U…": base32 of the prefix
// byte, the 32-byte ed25519 key and a CRC-16/XMODEM, little endian).
func PublicKey(key string) (ed25519.PublicKey, error) {
	raw, err := b32.DecodeString(key)
	if err != nil || len(raw) != 1+ed25519.PublicKeySize+2 {
		return nil, errors.New("not an nkey public key")
	}
	body, sum := raw[:len(raw)-2], binary.LittleEndian.Uint16(raw[len(raw)-2:])
	if crc16(body) != sum {
		return nil, errors.New("bad nkey checksum")
	}
	if body[0] != prefixUser {
		return nil, errors.New("not a user nkey (U…)")
	}
	return ed25519.PublicKey(body[1:]), nil
}

// UserKey returns the nkey user public key ("U…") of the ed25519 public
// key pub: how a proof names a key held outside nkeys (a browser's
// WebCrypto key, a hardware key), whose holder signs Digest(p) with plain
// ed25519. It is PublicKey's inverse.
func UserKey(pub ed25519.PublicKey) (string, error) {
	if len(pub) != ed25519.PublicKeySize {
		return "", fmt.Errorf("proof: an ed25519 public key has %d bytes, not %d", ed25519.PublicKeySize, len(pub))
	}
	raw := append([]byte{prefixUser}, pub...)
	raw = binary.LittleEndian.AppendUint16(raw, crc16(raw))
	return b32.EncodeToString(raw), nil
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), as nkeys uses.
func crc16(data []byte) uint16 {
	var crc uint16
	for _, b := range data {
		crc ^= uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
