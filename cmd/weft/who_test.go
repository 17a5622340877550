package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/projections/projtest"
)

// whoExport is projtest.WhoRun signed by kp, as the envelopes of an export.
func whoExport(t *testing.T, run string, kp nkeys.KeyPair) []events.Event {
	t.Helper()
	pub, _ := kp.PublicKey()
	evs, err := projtest.WhoRun(run, pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// chained encodes evs as run's history, chained.
func chained(t *testing.T, run string, evs []events.Event) []events.Envelope {
	t.Helper()
	var envs []events.Envelope
	for i, e := range evs {
		env, err := events.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		env.ID, env.Run, env.Version, env.Recorded = run+"-"+string(rune('a'+i)), run, uint64(i+1), t0.Add(time.Duration(i)*time.Second)
		envs = append(envs, env)
	}
	return audittest.Rechain(envs)
}

// TestSecurityWhoDidIt_VerifyFileEditedCommands (docs/security.md, "Who
// did it"): weft audit verify --file passes an untouched export whose
// people signed every command, naming each verified with its key; it fails
// an export whose signed reconcile was edited (chain recomputed), naming
// the event; and an answer whose proof was signed for another run is not
// printed as verified, in the same report that fails its proof.
func TestSecurityWhoDidIt_VerifyFileEditedCommands(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	evs := whoExport(t, "w-1", kp)
	dir := t.TempDir()
	file := writeExport(t, filepath.Join(dir, "w-1.jsonl"), chained(t, "w-1", evs))
	code, out, errs := cli(t, "audit", "verify", "--file", file)
	if code != 0 || !strings.Contains(out, "ok: run w-1") {
		t.Fatalf("untouched: %d %s %s", code, out, errs)
	}
	for _, want := range []string{
		"event 7: approve 1/p by alice (verified, key " + pub + ")",
		"event 11: reconcile 1/p (unconfirmed) by alice (verified, key " + pub + `), reason "the bank is checking"`,
		"event 13: resolve 1/p (output) by alice (verified, key " + pub + ")",
		"event 14: cancel by alice (verified, key " + pub + ")",
		"proof: event 11, reconcile of action 1/p by alice, key " + pub + ": verifies",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("untouched: no %q in\n%s", want, out)
		}
	}

	edited, n := audittest.Replace(readExport(t, file), events.NameReconciled, "checking with the bank", "never sent it, ok")
	if n != 1 {
		t.Fatalf("edited %d reconciliations, want 1", n)
	}
	code, out, errs = cli(t, "audit", "verify", "--file", writeExport(t, filepath.Join(dir, "edited.jsonl"), edited))
	if code != exitAudit || !strings.Contains(errs, "proof: event 11 (w-1-k, reconciled)") || !strings.Contains(errs, "other_content") ||
		!strings.Contains(out, "event 11: reconcile 1/p (unconfirmed) by alice (unverified)") {
		t.Fatalf("edited reconcile: %d\n%s\n%s", code, out, errs)
	}

	pasted := append([]events.Event{}, evs...)
	a := pasted[projtest.WhoApproved].(events.ApprovalAnswered)
	a.Proof = whoExport(t, "w-2", kp)[projtest.WhoApproved].(events.ApprovalAnswered).Proof
	pasted[projtest.WhoApproved] = a
	code, out, errs = cli(t, "audit", "verify", "--file", writeExport(t, filepath.Join(dir, "pasted.jsonl"), chained(t, "w-1", pasted)))
	if code != exitAudit || !strings.Contains(errs, "proof: event 7 (w-1-g, approval_answered)") || !strings.Contains(errs, "other_run") ||
		!strings.Contains(out, "event 7: approve 1/p by alice (unverified)") {
		t.Fatalf("pasted answer proof: %d\n%s\n%s", code, out, errs)
	}
}
