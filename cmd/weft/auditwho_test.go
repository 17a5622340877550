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

// pausedTwice is a run paused, resumed and, when replay, paused again with
// the first pause's command proof, signed by kp (docs/security.md, "Who
// did it").
func pausedTwice(t *testing.T, run string, kp nkeys.KeyPair, replay bool) []events.Envelope {
	t.Helper()
	pub, _ := kp.PublicKey()
	paused, resumed, err := projtest.PauseAndResume(run, pub, kp.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	evs := []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay", Runner: "r1", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		paused, resumed,
	}
	if replay {
		evs = append(evs, paused)
	}
	envs, err := audittest.Chain(run, t0, evs)
	if err != nil {
		t.Fatal(err)
	}
	return envs
}

// TestAuditVerifyFileCommandProofUsedTwice (docs/security.md, "Who did
// it": a command proof is consumed once; docs/cli.md, exit 4): `weft
// audit verify --file` of an export that records the same signed pause
// proof twice fails, exit 4, with proof and the run, the event, the key
// and the event that used it first; the export without the replay passes.
func TestAuditVerifyFileCommandProofUsedTwice(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	dir := t.TempDir()
	clean := writeExport(t, filepath.Join(dir, "clean.jsonl"), pausedTwice(t, "re-1", kp, false))
	if code, o, errs := cli(t, "audit", "verify", "--file", clean); code != 0 || !strings.Contains(o, "ok: run re-1") {
		t.Fatalf("untouched: exit %d\n%s%s", code, o, errs)
	}
	replayed := writeExport(t, filepath.Join(dir, "replayed.jsonl"), pausedTwice(t, "re-1", kp, true))
	code, o, errs := cli(t, "audit", "verify", "--file", replayed)
	want := "proof: run re-1 event 4 (re-1-4, run_paused): the pause by alice reuses the command proof (key " + pub
	if code != exitAudit || !strings.Contains(errs, want) || !strings.Contains(errs, "already recorded with event 2") {
		t.Fatalf("replayed: exit %d, want %d with %q:\n%s%s", code, exitAudit, want, o, errs)
	}
	if !strings.Contains(o, "proof: event 4, pause by alice, key "+pub+": DOES NOT VERIFY: proof_used") {
		t.Errorf("verify does not list the reused proof:\n%s", o)
	}
}
