package audit_test

import (
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/internal/natstest"
)

// TestVerifyASealedEnd (docs/adr/0044; docs/security.md, "Signed heads"):
// a run whose end decision is sealed — its signed end head stored as the
// last event of the message that holds run_finished, not appended after
// it — verifies with its key trusted exactly as a run signed by a
// following append: the audit reads events, not messages. Editing the
// sealed decision (the outcome's answer), with the chain recomputed,
// fails at the signed head that covers it; without it recomputed, at the
// edited event.
func TestVerifyASealedEnd(t *testing.T) {
	s := natstest.Start(t)
	ctx := context.Background()
	kp, pub := headKey(t)
	seal := func(version uint64, hash string) (events.Event, error) {
		d := events.HeadDigest("pay-43", version, hash, pub)
		sig, err := kp.Sign(d[:])
		if err != nil {
			return nil, err
		}
		return events.HeadSigned{Version: version, Hash: hash, Key: pub, Signer: "runner-1", Signature: base64.RawURLEncoding.EncodeToString(sig), End: true}, nil
	}
	run := paymentRun()
	var head eventlog.Head
	var err error
	for i, e := range run[:len(run)-2] {
		if _, head, err = s.Log.Append(ctx, "pay-43", head, t0.Add(time.Duration(i)*time.Second), e); err != nil {
			t.Fatal(err)
		}
	}
	// The final answer and the run's end: one decision, sealed.
	if _, head, err = s.Log.AppendSealed(ctx, "pay-43", head, t0.Add(time.Minute), seal, run[len(run)-2:]...); err != nil {
		t.Fatal(err)
	}
	last, _, err := s.Log.Last(ctx, "pay-43")
	if err != nil {
		t.Fatal(err)
	}
	if len(last) != 3 || last[1].Type != events.NameRunFinished || last[2].Type != events.NameHeadSigned {
		t.Fatalf("the run's last message holds %d events: want the final answer, run_finished and its signed head", len(last))
	}
	envs, _, err := s.Log.Load(ctx, "pay-43")
	if err != nil {
		t.Fatal(err)
	}
	end := envs[len(envs)-1]
	rep := audit.Verify(envs, audit.WithTrust(pub))
	if !rep.OK() || rep.SignedThrough != end.Version || len(rep.Heads) != 1 || rep.Heads[0].Head != end.Version-1 {
		t.Fatalf("sealed end with --trust: %+v, heads %+v, signed through %d of %d", rep.Problem, rep.Heads, rep.SignedThrough, end.Version)
	}
	if rep := audit.Verify(envs, audit.WithHeadAt(head.Version, head.Hash)); !rep.OK() {
		t.Fatalf("sealed end with --head: %+v", rep.Problem)
	}

	edited, n := audittest.Replace(envs, events.NameRunFinished, `"paid"`, `"refunded"`)
	if n != 1 {
		t.Fatalf("edited %d run_finished, want 1", n)
	}
	if rep := audit.Verify(edited, audit.WithTrust(pub)); rep.OK() || rep.Problem.Kind != audit.KindSignature || rep.Problem.Version != end.Version {
		t.Fatalf("the sealed decision edited, chain recomputed: %+v, want %s at version %d", rep.Problem, audit.KindSignature, end.Version)
	}
	raw := append([]events.Envelope(nil), envs...)
	raw[len(raw)-2].Payload = edited[len(edited)-2].Payload
	if rep := audit.Verify(raw, audit.WithTrust(pub)); rep.OK() || rep.Problem.Kind != audit.KindChain || rep.Problem.Version != end.Version-1 {
		t.Fatalf("the sealed decision edited in place: %+v, want %s at version %d", rep.Problem, audit.KindChain, end.Version-1)
	}
}
