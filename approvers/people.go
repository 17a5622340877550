package approvers

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// The reasons of an identity_required refusal.
const (
	// ReasonNoIdentity means the command does not say who made it in a way
	// the deployment accepts: no signed proof where the deployment has
	// person keys, no name where it has none.
	ReasonNoIdentity = "no_identity"
	// ReasonNoReason means the command gives no reason.
	ReasonNoReason = "no_reason"
)

// People is how a deployment vouches for who made a person's command
// (docs/security.md, "Who did it"): the keys of the people who may
// reconcile, resolve and cancel (a Key's Reviewer is the name recorded
// for the commands it signs), and whether every person's command must
// say who made it and why.
//
// With keys, a command that carries a signed command proof
// (events.CommandProof) by one of them is recorded verified, under the
// key's name; a proof by any other key, or one that does not state
// exactly the command, is refused proof_refused. A command without a
// proof is recorded under the name the client typed, unverified. With
// Require, a command without a verified identity (with keys) or without a
// name (without keys), and a reject, reconcile, resolve or cancel without
// a reason, is refused identity_required.
type People struct {
	Keys    []Key
	Require bool
	// Lifetime bounds how far in the future a command proof may expire
	// (DefaultLifetime when zero).
	Lifetime time.Duration
}

// Secure reports whether the deployment has person keys: a required
// identity is then a verified one.
func (p People) Secure() bool { return len(p.Keys) > 0 }

// Who is who made a person's command, as recorded.
type Who struct {
	// By is the name recorded: the key's name when verified, else the name
	// the client typed.
	By string
	events.Identity
	// Proof is the command proof to record, when verified.
	Proof *events.CommandProof
}

// Command checks who makes the command s, at now: signed, when not nil, is
// its command proof; by the name the client typed. It returns who to
// record, or a *weft.Error: proof_refused (not_authenticated for a key
// not in Keys; proof.CheckCommand's reasons; lifetime_exceeded) or
// identity_required (Require: no_identity, no_reason).
func (p People) Command(s proof.CommandSubject, by string, signed *events.CommandProof, now time.Time) (Who, error) {
	if signed == nil {
		if err := p.Required(by, false, s.Reason, true); err != nil {
			return Who{}, err
		}
		return Who{By: by}, nil
	}
	var k Key
	found := false
	for _, c := range p.Keys {
		if c.Public == signed.Key {
			k, found = c, true
			break
		}
	}
	if !found {
		return Who{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonNotAuthenticated,
			Message: fmt.Sprintf("key %s is not one of the deployment's person keys", signed.Key)}
	}
	if err := proof.CheckCommand(*signed, s, now); err != nil {
		var pe *proof.Error
		if errors.As(err, &pe) {
			return Who{}, &weft.Error{Code: weft.CodeProofRefused, Reason: pe.Reason, Message: pe.Message}
		}
		return Who{}, err
	}
	lifetime := p.Lifetime
	if lifetime <= 0 {
		lifetime = DefaultLifetime
	}
	if signed.Expires.After(now.Add(lifetime)) {
		return Who{}, &weft.Error{Code: weft.CodeProofRefused, Reason: ReasonLifetimeExceeded,
			Message: fmt.Sprintf("the proof expires at %s, more than %s from now", signed.Expires.UTC().Format(time.RFC3339), lifetime)}
	}
	if err := p.Required(k.Public, true, s.Reason, true); err != nil {
		return Who{}, err
	}
	cp := *signed
	return Who{By: k.Name(), Identity: events.Identity{Verified: true, Key: k.Public}, Proof: &cp}, nil
}

// Required checks a command against Require: who (the name recorded),
// verified (whether the deployment vouches for it), reason and whether
// the command takes a reason (approve does not). It returns nil without
// Require.
func (p People) Required(who string, verified bool, reason string, takesReason bool) error {
	if !p.Require {
		return nil
	}
	if who == "" || (p.Secure() && !verified) {
		msg := "this deployment requires every person's command to name who made it (--by)"
		if p.Secure() {
			msg = "this deployment requires every person's command to carry a signed proof by a person key (--signing-key)"
		}
		return &weft.Error{Code: weft.CodeIdentityRequired, Reason: ReasonNoIdentity, Message: msg}
	}
	if takesReason && reason == "" {
		return &weft.Error{Code: weft.CodeIdentityRequired, Reason: ReasonNoReason, Message: "this deployment requires every person's command to give a reason (--reason)"}
	}
	return nil
}

// ReadKeys reads a deployment's person keys file: one key a line, its
// public nkey ("U…") and the name recorded for the commands it signs (the
// rest of the line; empty: the key itself); blank lines and lines
// starting with # are skipped.
func ReadKeys(path string) ([]Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("approvers: keys: %w", err)
	}
	var keys []Key
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pub, name, _ := strings.Cut(line, " ")
		if _, err := proof.PublicKey(pub); err != nil {
			return nil, fmt.Errorf("approvers: keys: %s line %d: %q: %v", path, i+1, pub, err)
		}
		keys = append(keys, Key{Public: pub, Reviewer: strings.TrimSpace(name)})
	}
	return keys, nil
}
