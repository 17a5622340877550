package approvers_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/proof"
)

// clock is a fake clock that only moves when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

var (
	finance   = policy.Requirement{Name: "finance", Version: 1}
	financeV2 = policy.Requirement{Name: "finance", Version: 2}
	start     = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

// sso accepts the tokens it knows; only ana may approve finance v2.
func sso(_ context.Context, credential string, req policy.Requirement) (string, error) {
	users := map[string]string{"tok-ana": "ana@example.com", "tok-bob": "bob@example.com"}
	switch credential {
	case "tok-down":
		return "", approvers.Unavailable("identity provider down")
	case "tok-err":
		return "", errors.New("socket closed")
	case "tok-panic":
		panic("bug")
	}
	user, ok := users[credential]
	if !ok {
		return "", approvers.NotAuthenticated("unknown token")
	}
	if req == financeV2 && user != "ana@example.com" {
		return "", approvers.NotAuthorized(user + " may not approve finance v2")
	}
	return user, nil
}

func TestProve(t *testing.T) {
	c := &clock{t: start}
	a := approvers.New("finance-sso", sso, approvers.WithClock(c.now))
	tests := []struct {
		credential string
		req        policy.Requirement
		code       weft.Code
		reason     string
		reviewer   string
	}{
		{"tok-ana", finance, "", "", "ana@example.com"},
		{"tok-ana", financeV2, "", "", "ana@example.com"},
		{"tok-bob", financeV2, weft.CodeProofRefused, approvers.ReasonNotAuthorized, ""},
		{"tok-eve", finance, weft.CodeProofRefused, approvers.ReasonNotAuthenticated, ""},
		{"tok-down", finance, weft.CodeUnavailable, approvers.ReasonUnavailable, ""},
		{"tok-err", finance, weft.CodeUnavailable, approvers.ReasonUnavailable, ""},
		{"tok-panic", finance, weft.CodeUnavailable, approvers.ReasonUnavailable, ""},
	}
	for _, tt := range tests {
		p, err := a.Prove(context.Background(), tt.credential, tt.req)
		if tt.code == "" {
			if err != nil || p.Reviewer() != tt.reviewer || p.Approver() != "finance-sso" || p.Requirement() != tt.req ||
				!p.Issued().Equal(start) || !p.Expires().Equal(start.Add(60*time.Second)) || p.IsZero() {
				t.Errorf("Prove(%s) = %+v, %v", tt.credential, p, err)
			}
			continue
		}
		var we *weft.Error
		if !errors.As(err, &we) || we.Code != tt.code || we.Reason != tt.reason || !p.IsZero() {
			t.Errorf("Prove(%s) error %v, want %s(%s)", tt.credential, err, tt.code, tt.reason)
		}
	}
}

func TestCheck(t *testing.T) {
	c := &clock{t: start}
	mine := approvers.New("finance-sso", sso, approvers.WithClock(c.now), approvers.WithLifetime(30*time.Second))
	other := approvers.Trusting("someone-else", approvers.WithClock(c.now))
	proof, err := mine.Prove(context.Background(), "tok-ana", finance)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Prove(context.Background(), "ana", finance)
	agentApprovers := []*approvers.Approver{mine}
	tests := []struct {
		name      string
		approvers []*approvers.Approver
		proof     approvers.Proof
		req       policy.Requirement
		now       time.Time
		reason    string
	}{
		{"valid", agentApprovers, proof, finance, start, ""},
		{"valid just before expiry", agentApprovers, proof, finance, start.Add(30*time.Second - time.Nanosecond), ""},
		{"no approvers", nil, proof, finance, start, approvers.ReasonNoApprovers},
		{"other approvers", agentApprovers, foreign, finance, start, approvers.ReasonOtherApprovers},
		{"zero proof", agentApprovers, approvers.Proof{}, finance, start, approvers.ReasonOtherApprovers},
		{"other requirement version", agentApprovers, proof, financeV2, start, approvers.ReasonOtherRequirement},
		{"other requirement name", agentApprovers, proof, policy.Requirement{Name: "legal", Version: 1}, start, approvers.ReasonOtherRequirement},
		{"expired at its lifetime", agentApprovers, proof, finance, start.Add(30 * time.Second), approvers.ReasonProofExpired},
		{"expired later", agentApprovers, proof, finance, start.Add(time.Hour), approvers.ReasonProofExpired},
		{"no approvers wins over the rest", nil, foreign, financeV2, start.Add(time.Hour), approvers.ReasonNoApprovers},
		{"other approvers wins over requirement", agentApprovers, foreign, financeV2, start.Add(time.Hour), approvers.ReasonOtherApprovers},
		{"requirement wins over expiry", agentApprovers, proof, financeV2, start.Add(time.Hour), approvers.ReasonOtherRequirement},
	}
	for _, tt := range tests {
		err := approvers.Check(tt.approvers, tt.proof, tt.req, tt.now)
		if tt.reason == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: tt.reason}) {
			t.Errorf("%s: %v, want proof_refused(%s)", tt.name, err, tt.reason)
		}
	}
}

func TestDefaultLifetimeAndTrusting(t *testing.T) {
	c := &clock{t: start}
	a := approvers.Trusting("demo", approvers.WithClock(c.now), approvers.WithLifetime(-1))
	if a.Lifetime() != approvers.DefaultLifetime || approvers.DefaultLifetime != 60*time.Second {
		t.Errorf("lifetime %v", a.Lifetime())
	}
	p, err := a.Prove(context.Background(), "ana", finance)
	if err != nil || p.Reviewer() != "ana" {
		t.Fatalf("Trusting: %+v %v", p, err)
	}
	c.advance(59 * time.Second)
	if err := approvers.Check([]*approvers.Approver{a}, p, finance, c.now()); err != nil {
		t.Errorf("at 59s: %v", err)
	}
	c.advance(time.Second)
	if err := approvers.Check([]*approvers.Approver{a}, p, finance, c.now()); !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: approvers.ReasonProofExpired}) {
		t.Errorf("at 60s: %v", err)
	}
	if _, err := a.Prove(context.Background(), "", finance); !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: approvers.ReasonNotAuthenticated}) {
		t.Errorf("empty credential: %v", err)
	}
	if got, ok := approvers.Find([]*approvers.Approver{nil, a}, "demo"); !ok || got != a {
		t.Error("Find failed")
	}
}

// Example proves an approval and checks it as the runtime does.
func Example() {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	finance := approvers.New("finance-sso",
		func(_ context.Context, credential string, req policy.Requirement) (string, error) {
			if credential != "tok-ana" {
				return "", approvers.NotAuthenticated("unknown token")
			}
			return "ana@example.com", nil
		},
		approvers.WithClock(func() time.Time { return now }))
	req := policy.Requirement{Name: "payments_over_1000", Version: 1}

	proof, err := finance.Prove(context.Background(), "tok-ana", req)
	fmt.Println(proof.Reviewer(), proof.Approver(), err)
	fmt.Println(approvers.Check([]*approvers.Approver{finance}, proof, req, now.Add(10*time.Second)))
	fmt.Println(approvers.Check([]*approvers.Approver{finance}, proof, req, now.Add(61*time.Second)))
	_, err = finance.Prove(context.Background(), "tok-eve", req)
	fmt.Println(err)
	// Output:
	// ana@example.com finance-sso <nil>
	// <nil>
	// proof_refused(proof_expired): the proof expired at 2026-01-02T03:05:05Z
	// proof_refused(not_authenticated): unknown token
}

func TestAuthorize(t *testing.T) {
	c := &clock{t: start}
	mine := approvers.New("finance-sso", sso, approvers.WithClock(c.now))
	list := []*approvers.Approver{mine}
	ctx := context.Background()
	tests := []struct {
		name     string
		list     []*approvers.Approver
		approver string
		cred     string
		now      time.Time
		code     weft.Code
		reason   string
	}{
		{"ok", list, "finance-sso", "tok-ana", start, "", ""},
		{"no approvers", nil, "finance-sso", "tok-ana", start, weft.CodeProofRefused, approvers.ReasonNoApprovers},
		{"unknown approver", list, "other", "tok-ana", start, weft.CodeProofRefused, approvers.ReasonOtherApprovers},
		{"bad credential", list, "finance-sso", "tok-eve", start, weft.CodeProofRefused, approvers.ReasonNotAuthenticated},
		{"approver down", list, "finance-sso", "tok-down", start, weft.CodeUnavailable, approvers.ReasonUnavailable},
		{"checked late", list, "finance-sso", "tok-ana", start.Add(time.Minute), weft.CodeProofRefused, approvers.ReasonProofExpired},
	}
	for _, tt := range tests {
		p, err := approvers.Authorize(ctx, tt.list, tt.approver, tt.cred, finance, tt.now)
		if tt.code == "" {
			if err != nil || p.Reviewer() != "ana@example.com" || p.Approver() != "finance-sso" {
				t.Errorf("%s: %+v %v", tt.name, p, err)
			}
			continue
		}
		if !errors.Is(err, &weft.Error{Code: tt.code, Reason: tt.reason}) {
			t.Errorf("%s: %v, want %s(%s)", tt.name, err, tt.code, tt.reason)
		}
	}
}

// TestAuthorizeAnswerKinds: a Signed approver takes signed proofs only and
// names the key's reviewer; an approver with a verify function refuses a
// signed proof; Authorize refuses a credential for a Signed approver.
func TestAuthorizeAnswerKinds(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	signed := approvers.Signed("keys", []approvers.Key{{Public: pub, Reviewer: "alice@bank"}})
	list := []*approvers.Approver{approvers.Trusting("desk"), signed}
	subject := proof.Subject{Run: "r", Action: "1/a", Revision: 1, Requirement: events.Requirement{Name: "finance", Version: 1}, Tool: "pay", Arguments: []byte(`{"amount":5}`), Answer: events.AnswerApprove}
	p, _ := proof.New(subject, pub, now.Add(30*time.Second))
	p, _ = proof.Sign(p, kp.Sign)
	got, err := approvers.AuthorizeAnswer(context.Background(), list, approvers.Answer{Approver: "keys", Signed: &p}, subject, now)
	if err != nil || got.Reviewer() != "alice@bank" || got.Approver() != "keys" || got.Signed() == nil || *got.Signed() != p {
		t.Fatalf("signed: %+v %v", got, err)
	}
	for name, c := range map[string]struct {
		ans    approvers.Answer
		reason string
	}{
		"a credential for keys": {approvers.Answer{Approver: "keys", Credential: "alice"}, approvers.ReasonNotAuthenticated},
		"a proof for desk":      {approvers.Answer{Approver: "desk", Signed: &p}, approvers.ReasonNotAuthenticated},
		"no such approver":      {approvers.Answer{Approver: "bank", Signed: &p}, approvers.ReasonOtherApprovers},
	} {
		if _, err := approvers.AuthorizeAnswer(context.Background(), list, c.ans, subject, now); !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: c.reason}) {
			t.Errorf("%s: %v, want proof_refused(%s)", name, err, c.reason)
		}
	}
	if _, err := approvers.Authorize(context.Background(), list, "keys", "alice", policy.Requirement{Name: "finance", Version: 1}, now); !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: approvers.ReasonNotAuthenticated}) {
		t.Errorf("Authorize with a credential for a Signed approver: %v", err)
	}
}

// TestReadKeys (docs/security.md "Who did it"): a person keys file is one
// key a line with the name recorded for it; comments and blank lines are
// skipped, a key with no name is named by itself, and a line whose key is
// not a user nkey is an error naming the line.
func TestReadKeys(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	dir := t.TempDir()
	good := filepath.Join(dir, "people")
	if err := os.WriteFile(good, []byte("# the ops desk\n"+pub+" Carol Jones\n\n"+otherPub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := approvers.ReadKeys(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].Public != pub || keys[0].Reviewer != "Carol Jones" || keys[1].Public != otherPub || keys[1].Reviewer != "" {
		t.Fatalf("keys %+v", keys)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte(pub+" carol\nSUAAAA mallory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := approvers.ReadKeys(bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("a file with a seed for a key: %v, want an error naming line 2", err)
	}
}
