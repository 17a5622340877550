package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/proof"
)

// serveSigned runs the payment desk with host.Run on a test server, its
// only approver "keys" taking proofs signed by alice (an nkey) or by
// browser (a plain ed25519 key, as a WebCrypto key signs), and returns a
// client.
func serveSigned(t *testing.T, alice, browser string) *client.Client {
	t.Helper()
	_, c := serveSignedOn(t, alice, browser)
	return c
}

// serveSignedOn is serveSigned that returns the test server too.
func serveSignedOn(t *testing.T, alice, browser string) (*natstest.Server, *client.Client) {
	t.Helper()
	desk, err := agent.New(demo.AgentName, demo.ScriptedModel(), demo.Tools(), demo.Policy(), agent.WithApprovers(
		approvers.Signed("keys", []approvers.Key{{Public: alice, Reviewer: "alice@bank"}, {Public: browser, Reviewer: "bob@bank"}}),
	)).Build()
	if err != nil {
		t.Fatal(err)
	}
	return serveAgent(t, desk)
}

// signingKeys are the test's two approver keys, from fixed seeds: alice's
// nkey and a plain ed25519 key (as a browser's WebCrypto key signs), each
// with its public user key.
func signingKeys(t *testing.T) (alice nkeys.KeyPair, aliceKey string, browser ed25519.PrivateKey, browserKey string) {
	t.Helper()
	alice, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	aliceKey, _ = alice.PublicKey()
	browser = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize))
	if browserKey, err = proof.UserKey(browser.Public().(ed25519.PublicKey)); err != nil {
		t.Fatal(err)
	}
	return alice, aliceKey, browser, browserKey
}

// From a pending approval (the approvals
// inbox's item, or the run view) the client builds exactly what a signed
// answer is for, signs it with an nkey (proof.SignAnswer) or has it signed by a
// key it never holds (proof.New, proof.Digest, plain ed25519, proof.UserKey),
// submits it with the command, and reads back whether the recorded proof
// verifies and whose key signed it; a proof sent twice is refused
// proof_used.
func TestClientSignedApprovals(t *testing.T) {
	alice, aliceKey, browser, browserKey := signingKeys(t)
	c := serveSigned(t, aliceKey, browserKey)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pending := func(v projections.RunView) bool { a, ok := v.Action("2/call_2_1"); return ok && a.Pending != nil }

	// Approved with an nkey, from the inbox's item.
	if _, err := c.Start(ctx, api.StartRequest{Run: "sp-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "sp-7", pending); err != nil {
		t.Fatal(err)
	}
	var items []projections.ApprovalItem
	for deadline := time.Now().Add(30 * time.Second); len(items) == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		items, _ = c.Approvals(ctx, projector.InboxRequest{Run: "sp-7"})
	}
	if len(items) != 1 {
		t.Fatalf("approvals inbox: %+v", items)
	}
	s := items[0].ProofSubject(events.AnswerApprove)
	fromView, err := c.ProofSubject(ctx, "sp-7", "2/call_2_1", 0, events.AnswerApprove)
	if err != nil || fromView.Run != s.Run || fromView.Action != s.Action || fromView.Revision != s.Revision ||
		fromView.Requirement != s.Requirement || fromView.Tool != s.Tool || !bytes.Equal(fromView.Arguments, s.Arguments) {
		t.Fatalf("the view's subject %+v (%v) is not the inbox item's %+v", fromView, err, s)
	}
	p, err := proof.SignAnswer(s, alice, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := api.ApproveRequest{CommandID: "a-1", Run: s.Run, Action: s.Action, Revision: s.Revision, Approver: "keys", Proof: &p}
	if _, err := c.Approve(ctx, req); err != nil {
		t.Fatalf("a signed approve: %v", err)
	}
	req.CommandID = "a-2"
	var we *weft.Error
	if _, err := c.Approve(ctx, req); !errors.As(err, &we) || we.Code != weft.CodeProofRefused || we.Reason != approvers.ReasonProofUsed {
		t.Fatalf("the same proof again: %v, want proof_refused(proof_used)", err)
	}
	v, err := c.Wait(ctx, "sp-7", client.Finished)
	if err != nil {
		t.Fatal(err)
	}
	checkProof(t, v, aliceKey, "alice@bank")

	// Rejected with a key the client never holds: it signs the digest.
	if _, err := c.Start(ctx, api.StartRequest{Run: "sp-9", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "sp-9", pending); err != nil {
		t.Fatal(err)
	}
	s, err = c.ProofSubject(ctx, "sp-9", "2/call_2_1", 0, events.AnswerReject)
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err = c.ProofSubject(ctx, "sp-9", "2/call_2_1", 0, events.AnswerReject) // the view catches up
	}
	if err != nil {
		t.Fatal(err)
	}
	p, err = proof.New(s, browserKey, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	d := proof.Digest(p)
	p.Signature = base64.RawURLEncoding.EncodeToString(ed25519.Sign(browser, d[:]))
	if _, err := c.Reject(ctx, api.RejectRequest{CommandID: "r-1", Run: s.Run, Action: s.Action, Revision: s.Revision, Approver: "keys", Proof: &p, Reason: "not today"}); err != nil {
		t.Fatalf("a signed reject: %v", err)
	}
	v, err = c.Wait(ctx, "sp-9", client.Finished)
	if err != nil {
		t.Fatal(err)
	}
	checkProof(t, v, browserKey, "bob@bank")
}

// checkProof checks that 2/call_2_1's answer in v was recorded with a
// proof by key that verifies, and names reviewer.
func checkProof(t *testing.T, v projections.RunView, key, reviewer string) {
	t.Helper()
	a, _ := v.Action("2/call_2_1")
	if len(a.Approvals) != 1 {
		t.Fatalf("%s: approvals %+v", v.Run, a.Approvals)
	}
	h := a.Approvals[0]
	if h.Reviewer != reviewer || h.Verifier != "keys" || h.Proof == nil || h.Proof.Key != key || !h.Proof.Verified || h.Proof.Reason != "" {
		t.Fatalf("%s: answer %+v proof %+v, want %s by keys, a verified proof by %s", v.Run, h, h.Proof, reviewer, key)
	}
}

// TestSemantics4_ClientApproveNarrower (docs/semantics.md §4, "Approving
// narrower arguments"): with the client, an approver narrows the demo's
// 1200 EUR payment to 50 EUR: a proof signed for the call as asked is
// refused with the edit (other_arguments); one whose subject carries the
// edit (ProofSubject.Approved) approves it, and the run view shows the
// model's arguments and the approved ones, the proof verifying.
func TestSemantics4_ClientApproveNarrower(t *testing.T) {
	alice, aliceKey, _, browserKey := signingKeys(t)
	c := serveSigned(t, aliceKey, browserKey)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.Start(ctx, api.StartRequest{Run: "sn-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "sn-7", func(v projections.RunView) bool { a, ok := v.Action("2/call_2_1"); return ok && a.Pending != nil }); err != nil {
		t.Fatal(err)
	}
	s, err := c.ProofSubject(ctx, "sn-7", "2/call_2_1", 0, events.AnswerApprove)
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err = c.ProofSubject(ctx, "sn-7", "2/call_2_1", 0, events.AnswerApprove) // the view catches up
	}
	if err != nil {
		t.Fatal(err)
	}
	lower := json.RawMessage(`{"invoice":"INV-7","payee":"ACME Ltd","amount":50,"currency":"EUR"}`)
	asAsked, err := proof.SignAnswer(s, alice, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := api.ApproveRequest{CommandID: "n-1", Run: s.Run, Action: s.Action, Revision: s.Revision, Approver: "keys", Proof: &asAsked, Arguments: lower}
	var we *weft.Error
	if _, err := c.Approve(ctx, req); !errors.As(err, &we) || we.Code != weft.CodeProofRefused || we.Reason != proof.ReasonOtherArguments {
		t.Fatalf("a proof of the call as asked with an edit: %v, want proof_refused(other_arguments)", err)
	}
	s.Approved = lower
	narrowed, err := proof.SignAnswer(s, alice, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req.CommandID, req.Proof = "n-2", &narrowed
	if _, err := c.Approve(ctx, req); err != nil {
		t.Fatalf("a narrowed approve: %v", err)
	}
	v, err := c.Wait(ctx, "sn-7", client.Finished)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := v.Action("2/call_2_1")
	if !bytes.Contains(a.Arguments, []byte(`"amount":1200`)) || !bytes.Equal(a.Approved, lower) {
		t.Fatalf("view: arguments %s, approved %s; want the model's 1200 and %s", a.Arguments, a.Approved, lower)
	}
	checkProof(t, v, aliceKey, "alice@bank")
}

// TestSecuritySignedReject_ClientSignsTheReason (docs/security.md, "Signed
// approval proofs"; docs/protocol/20-events.md, the v3 digest): a reject
// signed with the Go client (RejectSigned) states the reason it sends, so
// the recorded proof covers it and the audit does not list the reason
// unsigned; a proof stating another reason is refused other_reason.
func TestSecuritySignedReject_ClientSignsTheReason(t *testing.T) {
	alice, aliceKey, _, browserKey := signingKeys(t)
	srv, c := serveSignedOn(t, aliceKey, browserKey)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.Start(ctx, api.StartRequest{Run: "sr-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, "sr-7", func(v projections.RunView) bool { a, ok := v.Action("2/call_2_1"); return ok && a.Pending != nil }); err != nil {
		t.Fatal(err)
	}
	// The view catches up with the pending request.
	s, err := c.ProofSubject(ctx, "sr-7", "2/call_2_1", 0, events.AnswerReject)
	for deadline := time.Now().Add(30 * time.Second); err != nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s, err = c.ProofSubject(ctx, "sr-7", "2/call_2_1", 0, events.AnswerReject)
	}
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Answering(events.AnswerReject, "paid by card")
	if err != nil {
		t.Fatal(err)
	}
	other, err := proof.SignAnswer(rs, alice, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var we *weft.Error
	if _, err := c.Reject(ctx, api.RejectRequest{CommandID: "r-0", Run: s.Run, Action: s.Action, Revision: s.Revision, Approver: "keys", Proof: &other, Reason: "a duplicate"}); !errors.As(err, &we) || we.Reason != proof.ReasonOtherReason {
		t.Fatalf("a proof of another reason: %v, want proof_refused(other_reason)", err)
	}
	req := api.RejectRequest{CommandID: "r-1", Run: "sr-7", Action: "2/call_2_1", Approver: "keys", Reason: "a duplicate"}
	if _, err := c.RejectSigned(ctx, req, alice, time.Now().Add(30*time.Second)); err != nil {
		t.Fatalf("a signed reject: %v", err)
	}
	v, err := c.Wait(ctx, "sr-7", client.Finished)
	if err != nil {
		t.Fatal(err)
	}
	checkProof(t, v, aliceKey, "alice@bank")
	envs, _, err := srv.Log.Load(ctx, "sr-7")
	if err != nil {
		t.Fatal(err)
	}
	rep := audit.Verify(envs)
	if !rep.OK() || len(rep.Proofs) != 1 {
		t.Fatalf("audit: %+v, proofs %+v", rep.Problem, rep.Proofs)
	}
	if pc := rep.Proofs[0]; !pc.Verified || pc.Answer != events.AnswerReject || pc.ReasonUnsigned {
		t.Fatalf("the reject's proof check %+v: want verified, its reason signed", pc)
	}
}
