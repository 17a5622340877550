// Package approvers proves that a person may approve an action.
//
// An agent lists its approvers (agent.WithApprovers). When an action waits
// for approval under a policy.Requirement, whoever approves it presents a
// credential to one of those approvers; the approver's verify function
// authenticates the credential for the requirement and names the reviewer.
// The result is a Proof, which lives for a short time (60 s by default) and
// which the runtime checks, with Check, before anything about the action
// changes:
//
//  1. the agent has approvers (else proof_refused(no_approvers));
//  2. the proof comes from one of them (else proof_refused(other_approvers));
//  3. it proves the pending requirement, name and version (else
//     proof_refused(other_requirement));
//  4. it has not expired (else proof_refused(proof_expired)).
//
// A refused proof leaves the approval request pending. Time is always
// injected: Prove reads the approver's clock (WithClock) and Check takes now,
// so tests never depend on the wall clock.
//
// Two kinds of approver exist:
//
//   - New takes a Verify function: the pluggable interface for
//     applications that authenticate people otherwise (an OIDC token, a
//     session cookie, an HSM). Verify gets the credential the answer carries
//     and the pending requirement and names the reviewer, or refuses
//     (NotAuthenticated, NotAuthorized, Unavailable). What it checked is not
//     recorded beyond the reviewer and the approver's name: an audit trusts
//     the approver's word. Trusting is the simplest: it believes any
//     non-empty credential (tests and the demo only).
//   - Signed trusts a list of keys: an answer carries a signed proof
//     (events.ApprovalProof, package proof) by one of them over exactly the
//     run, action, revision, requirement, tool and arguments it answers, and
//     its expiry. AuthorizeAnswer checks the key (not_authenticated,
//     not_authorized), what the proof states against what is pending
//     (other_run, other_action, other_revision, other_requirement,
//     other_tool, other_arguments, other_answer), the signature
//     (bad_signature), the expiry (proof_expired) and that the proof does not
//     outlive the approver's lifetime (lifetime_exceeded). The proof is
//     recorded with the answer, so `weft audit verify` re-checks it offline.
//     The runtime refuses a proof already recorded (proof_used).
package approvers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/proof"
)

// DefaultLifetime is how long a Proof lives unless WithLifetime says
// otherwise.
const DefaultLifetime = 60 * time.Second

// The reasons of a proof_refused error, as in weft.Error.Reason.
const (
	// ReasonNotAuthenticated means the credential was not recognised.
	ReasonNotAuthenticated = "not_authenticated"
	// ReasonNotAuthorized means the reviewer may not approve this requirement.
	ReasonNotAuthorized = "not_authorized"
	// ReasonUnavailable means the approver could not verify right now; the
	// error's code is unavailable, not proof_refused, and a retry may work.
	ReasonUnavailable = "unavailable"
	// ReasonNoApprovers means the agent has no approvers.
	ReasonNoApprovers = "no_approvers"
	// ReasonOtherApprovers means the proof comes from an approver the agent does
	// not list.
	ReasonOtherApprovers = "other_approvers"
	// ReasonOtherRequirement means the proof is for another requirement name or
	// version than the one pending.
	ReasonOtherRequirement = "other_requirement"
	// ReasonProofExpired means the proof outlived its lifetime.
	ReasonProofExpired = "proof_expired"
	// ReasonLifetimeExceeded means a signed proof expires later than the
	// approver's lifetime from now allows.
	ReasonLifetimeExceeded = "lifetime_exceeded"
	// ReasonProofUsed means a signed proof was already recorded with an
	// answer, or a command proof with a command: a proof is consumed once
	// (aggregate.ProofUsed, aggregate.CommandProofUsed).
	ReasonProofUsed = proof.ReasonProofUsed
)

// Denial is why a verify function refuses a credential. Return one from a
// Verify made with NotAuthenticated, NotAuthorized or Unavailable.
type Denial struct {
	// Reason is ReasonNotAuthenticated, ReasonNotAuthorized or
	// ReasonUnavailable.
	Reason string
	// Message is a human-readable detail; it must carry no secrets.
	Message string
}

// Error returns "reason: message".
func (d *Denial) Error() string {
	if d.Message == "" {
		return d.Reason
	}
	return d.Reason + ": " + d.Message
}

// NotAuthenticated returns the Denial of a credential that was not
// recognised.
func NotAuthenticated(message string) *Denial {
	return &Denial{Reason: ReasonNotAuthenticated, Message: message}
}

// NotAuthorized returns the Denial of a reviewer who may not approve the
// requirement.
func NotAuthorized(message string) *Denial {
	return &Denial{Reason: ReasonNotAuthorized, Message: message}
}

// Unavailable returns the Denial of an approver that cannot verify right
// now (its identity provider is down, say).
func Unavailable(message string) *Denial {
	return &Denial{Reason: ReasonUnavailable, Message: message}
}

// Verify authenticates credential for requirement and returns the reviewer
// it belongs to (a stable identity, such as an e-mail address or a user id,
// recorded on the action for audit), or a *Denial. Any other error counts as
// Unavailable. It must honour ctx.
type Verify func(ctx context.Context, credential string, requirement policy.Requirement) (reviewer string, err error)

// Approver verifies credentials for requirements and issues Proofs. Create
// one with New (a Verify function) or Signed (trusted keys); it is safe for
// concurrent use.
type Approver struct {
	name     string
	verify   Verify
	keys     []Key // Signed
	lifetime time.Duration
	now      func() time.Time
}

// Key is a signing key a Signed approver trusts.
type Key struct {
	// Public is the key's public nkey, a user key ("U…"; weft roles
	// approver-key prints one, `nk -gen user` makes one).
	Public string
	// Reviewer is the identity recorded as the reviewer of the answers
	// signed with the key (an e-mail address, say); empty: the key itself.
	Reviewer string
	// Requirements, when not empty, are the names of the only requirements
	// the key may answer (else not_authorized).
	Requirements []string
}

// Name is the name recorded for the answers and commands signed with the
// key: its Reviewer, else the key itself.
func (k Key) Name() string {
	if k.Reviewer != "" {
		return k.Reviewer
	}
	return k.Public
}

// Option configures an Approver.
type Option func(*Approver)

// WithLifetime sets how long the approver's proofs live. A lifetime of zero
// or less keeps DefaultLifetime.
func WithLifetime(d time.Duration) Option {
	return func(a *Approver) {
		if d > 0 {
			a.lifetime = d
		}
	}
}

// WithClock sets the clock Prove stamps proofs with; time.Now by default.
func WithClock(now func() time.Time) Option {
	return func(a *Approver) {
		if now != nil {
			a.now = now
		}
	}
}

// New returns an approver called name (recorded as the verifier of every
// approval it proves) that authenticates credentials with verify.
func New(name string, verify Verify, opts ...Option) *Approver {
	a := &Approver{name: name, verify: verify, lifetime: DefaultLifetime, now: time.Now}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Trusting returns an approver called name that believes any non-empty
// credential and names the reviewer after it. It is for tests and the
// offline demo only: it authenticates nobody.
func Trusting(name string, opts ...Option) *Approver {
	return New(name, func(_ context.Context, credential string, _ policy.Requirement) (string, error) {
		if credential == "" {
			return "", NotAuthenticated("empty credential")
		}
		return credential, nil
	}, opts...)
}

// Signed returns an approver called name that accepts signed proofs by
// keys only (AuthorizeAnswer); a bare credential is refused
// not_authenticated. Its lifetime bounds how far in the future a proof may
// expire (DefaultLifetime unless WithLifetime).
func Signed(name string, keys []Key, opts ...Option) *Approver {
	a := New(name, nil, opts...)
	a.keys = append([]Key{}, keys...) // non-nil: IsSigned
	return a
}

// IsSigned reports whether the approver takes signed proofs (Signed).
func (a *Approver) IsSigned() bool { return a != nil && a.keys != nil }

// Keys returns the keys a Signed approver trusts.
func (a *Approver) Keys() []Key { return append([]Key(nil), a.keys...) }

// Name returns the approver's name.
func (a *Approver) Name() string { return a.name }

// Lifetime returns how long the approver's proofs live.
func (a *Approver) Lifetime() time.Duration { return a.lifetime }

// Prove authenticates credential for requirement and returns a Proof that
// lives for the approver's lifetime from now (the approver's clock). A
// refused credential gives a *weft.Error: proof_refused with Reason
// not_authenticated or not_authorized, or unavailable (Reason unavailable)
// when the approver could not verify. A verify that panics counts as
// unavailable.
func (a *Approver) Prove(ctx context.Context, credential string, requirement policy.Requirement) (p Proof, err error) {
	if a == nil || a.verify == nil {
		return Proof{}, &weft.Error{Code: weft.CodeUnavailable, Reason: ReasonUnavailable, Message: "approver has no verify function"}
	}
	defer func() {
		if r := recover(); r != nil {
			p, err = Proof{}, &weft.Error{Code: weft.CodeUnavailable, Reason: ReasonUnavailable, Message: "approver " + a.name + " panicked"}
		}
	}()
	reviewer, verr := a.verify(ctx, credential, requirement)
	if verr == nil && reviewer == "" {
		verr = NotAuthenticated("verify named no reviewer")
	}
	if verr != nil {
		var d *Denial
		if errors.As(verr, &d) && d.Reason != ReasonUnavailable {
			return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: d.Reason, Message: d.Message}
		}
		return Proof{}, &weft.Error{Code: weft.CodeUnavailable, Reason: ReasonUnavailable, Message: verr.Error()}
	}
	issued := a.now()
	return Proof{
		approver:    a.name,
		reviewer:    reviewer,
		requirement: requirement,
		issued:      issued,
		expires:     issued.Add(a.lifetime),
	}, nil
}

// Proof is an approver's statement that a reviewer may approve a
// requirement, valid until it expires. Only Approver.Prove and
// AuthorizeAnswer make one.
type Proof struct {
	approver    string
	reviewer    string
	requirement policy.Requirement
	issued      time.Time
	expires     time.Time
	signed      *events.ApprovalProof
}

// Signed returns the signed proof the answer was authorised by (to record
// with it), nil for an approver with a Verify function.
func (p Proof) Signed() *events.ApprovalProof { return p.signed }

// Approver returns the name of the approver that issued the proof (the
// verifier recorded with the approval).
func (p Proof) Approver() string { return p.approver }

// Reviewer returns who the approver authenticated.
func (p Proof) Reviewer() string { return p.reviewer }

// Requirement returns the requirement the proof was given for.
func (p Proof) Requirement() policy.Requirement { return p.requirement }

// Issued returns when the approver issued the proof, by its clock.
func (p Proof) Issued() time.Time { return p.issued }

// Expires returns the instant from which the proof is refused.
func (p Proof) Expires() time.Time { return p.expires }

// IsZero reports whether p is the zero Proof, which no approver issued.
func (p Proof) IsZero() bool { return p.approver == "" }

// Check checks proof against an agent's approvers and the pending
// requirement at time now, in this order, and returns nil or a *weft.Error
// proof_refused with Reason no_approvers, other_approvers,
// other_requirement or proof_expired. A proof expires at Expires: now equal
// to it is already too late.
func Check(approvers []*Approver, proof Proof, requirement policy.Requirement, now time.Time) error {
	if len(approvers) == 0 {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNoApprovers, Message: "the agent has no approvers"}
	}
	if _, ok := Find(approvers, proof.approver); !ok || proof.IsZero() {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonOtherApprovers,
			Message: "the proof was not issued by one of the agent's approvers"}
	}
	if proof.requirement != requirement {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonOtherRequirement,
			Message: "the proof is for " + describe(proof.requirement) + ", the action requires " + describe(requirement)}
	}
	if !now.Before(proof.expires) {
		return &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonProofExpired,
			Message: "the proof expired at " + proof.expires.UTC().Format(time.RFC3339Nano)}
	}
	return nil
}

// Find returns the approver called name in approvers.
func Find(approvers []*Approver, name string) (*Approver, bool) {
	for _, a := range approvers {
		if a != nil && a.name == name {
			return a, true
		}
	}
	return nil, false
}

func describe(r policy.Requirement) string {
	return fmt.Sprintf("%s v%d", r.Name, r.Version)
}

// Authorize is the whole approval check the runtime makes for an approve
// command that names an approver and carries a credential: the agent must
// have approvers (no_approvers), approver must be one of them
// (other_approvers), the credential must prove the pending requirement
// (Prove's errors), and the proof must pass Check at now. It returns the
// proof, whose Reviewer and Approver are recorded with the answer.
func Authorize(ctx context.Context, list []*Approver, approver, credential string, requirement policy.Requirement, now time.Time) (Proof, error) {
	if len(list) == 0 {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNoApprovers, Message: "the agent has no approvers"}
	}
	a, ok := Find(list, approver)
	if !ok {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonOtherApprovers,
			Message: fmt.Sprintf("%q is not one of the agent's approvers", approver)}
	}
	if a.IsSigned() {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNotAuthenticated,
			Message: fmt.Sprintf("approver %s takes signed proofs only: send proof (weft approve --signing-key)", a.name)}
	}
	p, err := a.Prove(ctx, credential, requirement)
	if err != nil {
		return Proof{}, err
	}
	if err := Check(list, p, requirement, now); err != nil {
		return Proof{}, err
	}
	return p, nil
}

// Answer is how an approve or reject command authenticates: the approver
// it names, and a Credential (for a Verify function) or a Signed proof
// (for a Signed approver).
type Answer struct {
	Approver   string
	Credential string
	Signed     *events.ApprovalProof
}

// AuthorizeAnswer is the whole check of an answer to the pending request
// subject at now: the agent must have approvers (no_approvers), the answer
// must name one of them (other_approvers); a Signed approver then checks
// the signed proof (Signed's checks, in the order of the package doc), an
// approver with a Verify function the credential (Prove's errors); and the
// proof must pass Check at now. It returns the Proof whose Reviewer,
// Approver and Signed are recorded with the answer. Whether a signed proof
// was used before is the caller's to check (aggregate.ProofUsed).
func AuthorizeAnswer(ctx context.Context, list []*Approver, ans Answer, subject proof.Subject, now time.Time) (Proof, error) {
	reqm := policy.Requirement{Name: subject.Requirement.Name, Version: subject.Requirement.Version}
	if len(list) == 0 {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNoApprovers, Message: "the agent has no approvers"}
	}
	a, ok := Find(list, ans.Approver)
	if !ok {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonOtherApprovers,
			Message: fmt.Sprintf("%q is not one of the agent's approvers", ans.Approver)}
	}
	if !a.IsSigned() {
		if ans.Signed != nil {
			return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNotAuthenticated,
				Message: fmt.Sprintf("approver %s verifies credentials, not signed proofs", a.name)}
		}
		return Authorize(ctx, list, ans.Approver, ans.Credential, reqm, now)
	}
	p := ans.Signed
	if p == nil {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNotAuthenticated,
			Message: fmt.Sprintf("approver %s takes signed proofs only: send proof (weft approve --signing-key)", a.name)}
	}
	k, ok := a.key(p.Key)
	if !ok {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNotAuthenticated,
			Message: fmt.Sprintf("key %s is not one of approver %s's keys", p.Key, a.name)}
	}
	if len(k.Requirements) > 0 && !slices.Contains(k.Requirements, subject.Requirement.Name) {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNotAuthorized,
			Message: fmt.Sprintf("key %s may not answer requirement %s", p.Key, subject.Requirement.Name)}
	}
	if err := proof.Check(*p, subject, now); err != nil {
		var pe *proof.Error
		if errors.As(err, &pe) {
			return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: pe.Reason, Message: pe.Message}
		}
		return Proof{}, err
	}
	if p.Expires.After(now.Add(a.lifetime)) {
		return Proof{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonLifetimeExceeded,
			Message: fmt.Sprintf("the proof expires at %s, more than approver %s's %s from now", p.Expires.UTC().Format(time.RFC3339), a.name, a.lifetime)}
	}
	signed := *p
	return Proof{approver: a.name, reviewer: k.Name(), requirement: reqm, issued: now, expires: p.Expires, signed: &signed}, nil
}

func (a *Approver) key(public string) (Key, bool) {
	for _, k := range a.keys {
		if k.Public == public {
			return k, true
		}
	}
	return Key{}, false
}
