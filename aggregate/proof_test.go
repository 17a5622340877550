package aggregate

import (
	"errors"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// TestSignedProofConsumedOnceAndJudgedAtTheDecisionTime (docs/semantics.md §4):
// the answer records the signed proof it was given with; a
// proof the run recorded is refused proof_used — first, even when it is
// presented for a later request of the action — and a proof is refused
// proof_expired when the decision's time (the time the answer would be
// recorded at) is not before its expiry; a refusal emits nothing.
func TestSignedProofConsumedOnceAndJudgedAtTheDecisionTime(t *testing.T) {
	s := mustFold(t, defaultLimits(), "c1")
	fin := events.Requirement{Name: "finance", Version: 1}
	evs, err := Decide(s, ResolveCalls{Turn: 1, Calls: []Resolution{
		{CallID: "c1", Validation: events.CallValid, Policy: PolicyResult{Decision: events.PolicyRequireApproval, Requirement: fin}, Tool: events.ToolConfig{MaxAttempts: 1}},
	}}, epoch)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(evs []events.Event, at time.Time) {
		for _, e := range evs {
			s = Evolve(s, events.Recorded{Run: "r1", Version: s.Version() + 1, At: at, Event: e})
		}
	}
	apply(evs, epoch)
	subject := proof.Subject{Run: "r1", Action: "1/c1", Revision: 1, Requirement: fin, Tool: "t", Arguments: []byte(`{}`), Answer: events.AnswerApprove}
	p, err := proof.New(subject, "UKEY", epoch.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	p.Signature = "sig"

	// Expired by the decision's time: refused, nothing emitted.
	for _, at := range []time.Time{epoch.Add(time.Minute), epoch.Add(2 * time.Minute)} {
		evs, err := Decide(s, Approve{Action: "1/c1", Revision: 1, Proof: &p, Policy: PolicyResult{Decision: events.PolicyAllow}}, at)
		if we := asError(err); we == nil || we.Code != weft.CodeProofRefused || we.Reason != proof.ReasonProofExpired || len(evs) != 0 {
			t.Fatalf("at %s: %v %v, want proof_refused(proof_expired) and nothing", at, evs, err)
		}
	}
	// Accepted just before: recorded with the answer. The re-run policy
	// asks for another requirement, so the action gets a new request.
	at := epoch.Add(time.Minute - time.Nanosecond)
	evs, err = Decide(s, Approve{Action: "1/c1", Revision: 1, Reviewer: "alice", Verifier: "keys", Proof: &p,
		Policy: PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 2}}}, at)
	if err != nil {
		t.Fatal(err)
	}
	ans, ok := evs[0].(events.ApprovalAnswered)
	if !ok || ans.Proof == nil || *ans.Proof != p || ans.Reviewer != "alice" || ans.Verifier != "keys" {
		t.Fatalf("first event %+v, want approval_answered with the proof", evs[0])
	}
	apply(evs, at)
	if a, _ := s.Action("1/c1"); a.Request.Revision != 2 || !a.Request.Pending() {
		t.Fatalf("request %+v, want revision 2 pending", a.Request)
	}
	// Replayed, for the new request or as a rejection: proof_used.
	for _, c := range []Command{
		Approve{Action: "1/c1", Revision: 2, Proof: &p, Policy: PolicyResult{Decision: events.PolicyAllow}},
		Approve{Action: "1/c1", Revision: 1, Proof: &p, Policy: PolicyResult{Decision: events.PolicyAllow}},
		Reject{Action: "1/c1", Revision: 2, Reason: "no", Proof: &p},
	} {
		evs, err := Decide(s, c, at)
		if we := asError(err); we == nil || we.Code != weft.CodeProofRefused || we.Reason != proof.ReasonProofUsed || len(evs) != 0 {
			t.Fatalf("%T replayed: %v %v, want proof_refused(proof_used) and nothing", c, evs, err)
		}
	}
	if _, rev, used := ProofUsed(s, &p); !used || rev != 1 {
		t.Fatalf("ProofUsed = %d %v", rev, used)
	}
}

func asError(err error) *weft.Error {
	var we *weft.Error
	if errors.As(err, &we) {
		return we
	}
	return nil
}
