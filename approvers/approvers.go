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
// Trusting returns an approver that believes any non-empty credential, for
// tests and the offline demo.
package approvers

import (
	"context"
	"errors"
	"fmt"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/policy"
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
// one with New; it is safe for concurrent use.
type Approver struct {
	name     string
	verify   Verify
	lifetime time.Duration
	now      func() time.Time
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
// requirement, valid until it expires. Only Approver.Prove makes one.
type Proof struct {
	approver    string
	reviewer    string
	requirement policy.Requirement
	issued      time.Time
	expires     time.Time
}

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
	p, err := a.Prove(ctx, credential, requirement)
	if err != nil {
		return Proof{}, err
	}
	if err := Check(list, p, requirement, now); err != nil {
		return Proof{}, err
	}
	return p, nil
}
