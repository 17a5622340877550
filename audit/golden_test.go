package audit_test

import (
	"bytes"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
)

// The keys of testdata/signed-reject-reason.jsonl: the runner's head key
// (nkey user of raw seed 32 × 0x07) and alice's approver key (32 × 0x01).
const (
	goldenRunnerKey = "UDVEU3DD4KOFECV66VIHWEZOYX4ZKR3WV27L464SIIPOU2IUI3JCYSJF"
	goldenAliceKey  = "UCFIRY65OQE7DFP5KLNS2PF2LVZMUZYJX4OZIEQ36N2IQANUB5XVZ45L"
)

// TestSecuritySignedReject_GoldenExport (docs/protocol/20-events.md, the
// v3 digest; docs/security.md, "Signed heads"): a history recorded by a
// runner, kept as bytes, in which alice rejected a payment with a proof
// that states its reason. It verifies with --trust of the runner's key,
// the proof covering the reason. With the reason edited, the chain
// recomputed and the heads re-signed with the runner's own key (a thief
// who holds the head key), it fails on the proof: the head key does not
// sign for alice (docs/security.md, "A stolen runner key").
func TestSecuritySignedReject_GoldenExport(t *testing.T) {
	envs := audittest.ReadExport(t, "testdata/signed-reject-reason.jsonl")
	rep := audit.Verify(envs, audit.WithTrust(goldenRunnerKey))
	if !rep.OK() || len(rep.Proofs) != 1 {
		t.Fatalf("the golden export: %+v, proofs %+v", rep.Problem, rep.Proofs)
	}
	if pc := rep.Proofs[0]; !pc.Verified || pc.Answer != events.AnswerReject || pc.ReasonUnsigned || pc.Key != goldenAliceKey {
		t.Fatalf("the reject's proof check %+v: want alice's proof verified, its reason signed", pc)
	}
	edited, n := audittest.Replace(envs, events.NameApprovalAnswered, `"reason":"the invoice is a duplicate","reviewer"`, `"reason":"paid by card","reviewer"`)
	if n != 1 {
		t.Fatalf("edited %d answers, want 1", n)
	}
	runnerKey, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	edited = audittest.Resign(edited, runnerKey, "runner-a")
	if rep := audit.Verify(edited, audit.WithTrust(goldenRunnerKey)); rep.OK() || rep.Problem.Kind != audit.KindProof {
		t.Fatalf("the reason edited, the heads re-signed with the runner's key: %+v, want a proof problem", rep.Problem)
	}
}
