package runner_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/tools"
)

func userKey(t *testing.T, b byte) (nkeys.KeyPair, string) {
	t.Helper()
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return kp, pub
}

// signFor signs a proof of answer for action a's pending request in s,
// expiring at expires, with edit applied to the subject before signing
// (to sign for something else than what is pending).
func signFor(t *testing.T, kp nkeys.KeyPair, s aggregate.State, a aggregate.Action, answer string, expires time.Time, edit func(*proof.Subject)) *events.ApprovalProof {
	t.Helper()
	pub, _ := kp.PublicKey()
	sub := proof.Subject{Run: s.Run(), Action: a.ID, Revision: a.Request.Revision, Requirement: a.Request.Requirement, Tool: a.Tool, Arguments: a.Arguments, Answer: answer}
	if edit != nil {
		edit(&sub)
	}
	p, err := proof.New(sub, pub, expires)
	if err != nil {
		t.Fatal(err)
	}
	p, err = proof.Sign(p, kp.Sign)
	if err != nil {
		t.Fatal(err)
	}
	return &p
}

func refusedReason(t *testing.T, err error, reason string) {
	t.Helper()
	var we *weft.Error
	if !errors.As(err, &we) || we.Code != weft.CodeProofRefused || we.Reason != reason {
		t.Fatalf("answer: %v, want proof_refused(%s)", err, reason)
	}
}

// TestSignedApprovalProofs (docs/semantics.md §4 "approve with a
// proof"): an approver of signed proofs accepts an answer only with a proof
// by one of its keys over exactly the pending request and the call — a
// proof for other arguments, another action, another revision, an expired
// one, an altered one, a key it does not trust or trusts for another
// requirement are refused with their reasons and change nothing; the valid
// one is recorded with the answer and runs the body once; replaying it is
// refused proof_used; and the log so recorded re-verifies offline, while an
// altered call — even with the hash chain rewritten — does not.
func TestSignedApprovalProofs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	b := &bodies{}
	alice, alicePub := userKey(t, 1)
	_, bobPub := userKey(t, 2)
	mallory, _ := userKey(t, 3)
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok"), payCall(700, "ok")), model.Answer("paid"))
	ag, err := agent.New("desk", m, []tools.Tool{b.tool()}, policy.Func(approvalAbove), agent.WithApprovers(
		approvers.Trusting("desk"),
		approvers.Signed("keys", []approvers.Key{
			{Public: alicePub, Reviewer: "alice@bank", Requirements: []string{"finance"}},
			{Public: bobPub, Reviewer: "bob@bank", Requirements: []string{"ops"}},
		}, approvers.WithLifetime(5*time.Minute)),
	)).Build()
	if err != nil {
		t.Fatal(err)
	}
	h.startRunner([]*agent.Agent{ag})
	c := ctx(t)
	if _, err := h.client.Start(c, api.StartRequest{Run: "sp", Agent: "desk", Input: "pay twice"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("sp", "two approval requests", func(s aggregate.State) bool { return len(aggregate.Status(s).Approvals) == 2 })
	st := aggregate.Status(s)
	a1, _ := s.Action(st.Approvals[0])
	a2, _ := s.Action(st.Approvals[1])
	exp := time.Now().Add(time.Minute)
	approve := func(id string, a aggregate.Action, p *events.ApprovalProof) error {
		_, err := h.client.Approve(c, api.ApproveRequest{CommandID: id, Run: "sp", Action: a.ID, Revision: a.Request.Revision, Approver: "keys", Proof: p})
		return err
	}
	version := s.Version()

	// Refused, nothing recorded.
	refusedReason(t, approve("args", a1, signFor(t, alice, s, a1, events.AnswerApprove, exp, func(x *proof.Subject) { x.Arguments = a2.Arguments })), proof.ReasonOtherArguments)
	refusedReason(t, approve("action", a1, signFor(t, alice, s, a2, events.AnswerApprove, exp, nil)), proof.ReasonOtherAction)
	refusedReason(t, approve("revision", a1, signFor(t, alice, s, a1, events.AnswerApprove, exp, func(x *proof.Subject) { x.Revision++ })), proof.ReasonOtherRevision)
	refusedReason(t, approve("tool", a1, signFor(t, alice, s, a1, events.AnswerApprove, exp, func(x *proof.Subject) { x.Tool = "refund" })), proof.ReasonOtherTool)
	refusedReason(t, approve("answer", a1, signFor(t, alice, s, a1, events.AnswerReject, exp, nil)), proof.ReasonOtherAnswer)
	refusedReason(t, approve("expired", a1, signFor(t, alice, s, a1, events.AnswerApprove, time.Now().Add(-time.Second), nil)), proof.ReasonProofExpired)
	refusedReason(t, approve("lifetime", a1, signFor(t, alice, s, a1, events.AnswerApprove, time.Now().Add(time.Hour), nil)), approvers.ReasonLifetimeExceeded)
	forged := signFor(t, alice, s, a1, events.AnswerApprove, exp, nil)
	forged.Expires = forged.Expires.Add(time.Minute) // stretched after signing
	refusedReason(t, approve("altered", a1, forged), proof.ReasonBadSignature)
	impostor := signFor(t, mallory, s, a1, events.AnswerApprove, exp, nil)
	impostor.Key = alicePub // claims alice's key, signed by mallory's
	refusedReason(t, approve("impostor", a1, impostor), proof.ReasonBadSignature)
	refusedReason(t, approve("untrusted", a1, signFor(t, mallory, s, a1, events.AnswerApprove, exp, nil)), approvers.ReasonNotAuthenticated)
	_, err = h.client.Approve(c, api.ApproveRequest{CommandID: "bare", Run: "sp", Action: a1.ID, Revision: a1.Request.Revision, Approver: "keys", Credential: "alice"})
	refusedReason(t, err, approvers.ReasonNotAuthenticated)
	if got := h.state("sp").Version(); got != version {
		t.Fatalf("refused proofs changed the run: version %d, was %d", got, version)
	}

	// The valid proof: recorded with the answer, the body runs once.
	good := signFor(t, alice, s, a1, events.AnswerApprove, exp, nil)
	if err := approve("good", a1, good); err != nil {
		t.Fatalf("a valid proof: %v", err)
	}
	s = h.state("sp")
	got, _ := s.Action(a1.ID)
	if len(got.Answers) != 1 || got.Answers[0].Reviewer != "alice@bank" || got.Answers[0].Verifier != "keys" || got.Answers[0].Proof == nil || *got.Answers[0].Proof != *good {
		t.Fatalf("recorded answer %+v, want alice@bank by keys with the proof", got.Answers)
	}
	// Replayed: refused as a replay, before anything else.
	refusedReason(t, approve("replay", a1, good), approvers.ReasonProofUsed)
	_, err = h.client.Reject(c, api.RejectRequest{CommandID: "replay-reject", Run: "sp", Action: a2.ID, Revision: a2.Request.Revision, Approver: "keys", Proof: good, Reason: "no"})
	refusedReason(t, err, approvers.ReasonProofUsed)

	// The second action: rejected with a signed rejection by alice; bob's
	// key may not answer finance at all.
	refusedReason(t, approve("bob", a2, signFor(t, userKeyPair(t, 2), s, a2, events.AnswerApprove, exp, nil)), approvers.ReasonNotAuthorized)
	// The rejection's proof states its reason (docs/security.md): the
	// runtime checks the reason sent against it, so a reason edited on
	// the way is refused other_reason, and the one signed is accepted.
	rej := signFor(t, alice, s, a2, events.AnswerReject, exp, func(sub *proof.Subject) { sub.Reason = "not this one" })
	_, err = h.client.Reject(c, api.RejectRequest{CommandID: "reject-edited", Run: "sp", Action: a2.ID, Revision: a2.Request.Revision, Approver: "keys", Proof: rej, Reason: "approved by the board"})
	refusedReason(t, err, proof.ReasonOtherReason)
	if _, err := h.client.Reject(c, api.RejectRequest{CommandID: "reject", Run: "sp", Action: a2.ID, Revision: a2.Request.Revision, Approver: "keys", Proof: rej, Reason: "not this one"}); err != nil {
		t.Fatalf("a signed rejection stating its reason: %v", err)
	}
	s = h.waitStatus("sp", aggregate.StatusFinished)
	if n := b.starts.Load(); n != 1 {
		t.Fatalf("body started %d times, want 1", n)
	}

	// The log re-verifies offline, proofs included; altering the approved
	// call's arguments afterwards — rewriting the chain so that it holds —
	// is caught by the proof.
	envs, _, err := h.srv.Log.Load(c, "sp")
	if err != nil {
		t.Fatal(err)
	}
	rep := audit.Verify(envs)
	if !rep.OK() {
		t.Fatalf("audit of the recorded run: %+v", rep.Problem)
	}
	if len(rep.Proofs) != 2 || !rep.Proofs[0].Verified || rep.Proofs[0].Key != alicePub || !rep.Proofs[1].Verified {
		t.Fatalf("audit proofs %+v, want two verified by alice's key", rep.Proofs)
	}
	tampered := tamperArguments(t, envs, a1.ID, `"amount":500`, `"amount":50000`)
	rep = audit.Verify(tampered)
	if rep.OK() || rep.Problem.Kind != audit.KindProof {
		t.Fatalf("audit of a log whose approved arguments were altered and rechained: %+v, want a proof problem", rep.Problem)
	}
	// The run view names the key and says whether the proof verifies.
	for _, c := range []struct {
		envs     []events.Envelope
		verified bool
	}{{envs, true}, {tampered, false}} {
		view := projections.Fold(recorded(t, c.envs))
		for _, av := range view.Actions {
			if av.ID != a1.ID {
				continue
			}
			if len(av.Approvals) != 1 || av.Approvals[0].Proof == nil || av.Approvals[0].Proof.Key != alicePub || av.Approvals[0].Proof.Verified != c.verified {
				t.Fatalf("view of %s (verified %v wanted): %+v", a1.ID, c.verified, av.Approvals)
			}
		}
	}
}

func recorded(t *testing.T, envs []events.Envelope) []events.Recorded {
	t.Helper()
	recs := make([]events.Recorded, 0, len(envs))
	for _, env := range envs {
		ev, err := env.Event()
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, events.Recorded{Run: env.Run, Version: env.Version, At: env.Recorded, Event: ev})
	}
	return recs
}

func userKeyPair(t *testing.T, b byte) nkeys.KeyPair {
	kp, _ := userKey(t, b)
	return kp
}

// tamperArguments replaces old by new in the events that record action's
// call, then rewrites every later prev so that the hash chain holds again
// (what someone with write access to an exported history can do).
func tamperArguments(t *testing.T, envs []events.Envelope, action, old, new string) []events.Envelope {
	t.Helper()
	out := make([]events.Envelope, len(envs))
	copy(out, envs)
	changed := false
	for i := range out {
		if i > 0 {
			out[i].Prev = out[i-1].Hash()
		}
		if bytes.Contains(out[i].Payload, []byte(old)) && (out[i].Type == "model_replied" || out[i].Type == "call_validated") {
			out[i].Payload = json.RawMessage(bytes.ReplaceAll(out[i].Payload, []byte(old), []byte(new)))
			changed = true
		}
	}
	if !changed {
		t.Fatalf("nothing of %s's call matched %s", action, old)
	}
	return out
}
