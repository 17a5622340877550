package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// The repair path
// (docs/adr/0011-quarantine-and-repair-of-malformed-messages.md) end to end on
// a real server with a
// projector: a malformed message on pay-42's subject quarantines it
// (runs --status quarantined lists it, show says so with the sequence,
// audit verify reports it and exits 4); weft repair show prints the
// message and what is wrong with it; drop refuses another sequence and a
// missing reason; drop with the right one voids the message, the run is
// served again (its view suspended as before), and audit verify passes and
// lists the repair.
func TestCLIRepairShowAndDropAQuarantinedRun(t *testing.T) {
	s := setup(t)
	t.Setenv("NATS_URL", s.URL)
	ack, err := s.JS.Publish(context.Background(), "weft.ev.pay-42.events", []byte("<html>oops</html>"))
	if err != nil {
		t.Fatal(err)
	}
	seq := strconv.FormatUint(ack.Sequence, 10)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, out, _ := cli(t, "runs", "--status", "quarantined")
		if strings.Contains(out, "pay-42") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never listed quarantined: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errs := cli(t, "show", "pay-42")
	if code != 0 {
		t.Fatalf("show: %d %s", code, errs)
	}
	contains(t, "show", out, "status     quarantined", "stream sequence "+seq, "weft repair show pay-42", "1/c1")
	if code, _, errs := cli(t, "audit", "verify", "pay-42"); code != exitAudit || !strings.Contains(errs, "quarantined") || !strings.Contains(errs, seq) {
		t.Fatalf("audit verify of the quarantined run: %d %s", code, errs)
	}
	code, out, errs = cli(t, "repair", "show", "pay-42")
	if code != 0 {
		t.Fatalf("repair show: %d %s", code, errs)
	}
	contains(t, "repair show", out, "stream sequence "+seq, "not a log message", "<html>oops</html>", "subject: weft.ev.pay-42.events", "weft repair drop pay-42 --seq "+seq)

	if code, _, errs := cli(t, "repair", "drop", "pay-42", "--seq", strconv.FormatUint(ack.Sequence-1, 10), "--reason", "x"); code != exitFailed || !strings.Contains(errs, "invalid_request") {
		t.Fatalf("drop of another message: %d %s", code, errs)
	}
	if code, _, _ := cli(t, "repair", "drop", "pay-42", "--seq", seq); code != exitUsage {
		t.Fatalf("drop without a reason: %d", code)
	}
	code, out, errs = cli(t, "repair", "drop", "pay-42", "--seq", seq, "--reason", "pasted into the wrong terminal", "--by", "alice")
	if code != 0 {
		t.Fatalf("drop: %d %s", code, errs)
	}
	contains(t, "drop", out, "voided the message at stream sequence "+seq, "by alice (unverified)", "no longer quarantined")

	for {
		_, out, _ := cli(t, "show", "pay-42")
		if strings.Contains(out, "status     suspended") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never served again: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, out, errs = cli(t, "audit", "verify", "pay-42")
	if code != 0 || !strings.Contains(out, "ok: run pay-42, 11 events") {
		t.Fatalf("verify after repair: %d %s %s", code, out, errs)
	}
	contains(t, "verify's repair note", errs, "repaired", "stream sequence "+seq, "voided by alice (unverified)", "pasted into the wrong terminal")
	if code, out, _ := cli(t, "repair", "show", "pay-42"); code != 0 || !strings.Contains(out, "not quarantined") || !strings.Contains(out, "voided: sequence "+seq) || !strings.Contains(out, "by alice (unverified)") {
		t.Fatalf("repair show after the repair: %d %s", code, out)
	}
}

// weft repair --help says what a quarantine is, what show and drop do and
// who may drop.
func TestRepairHelpSaysWhatAndWho(t *testing.T) {
	var b strings.Builder
	err := run(context.Background(), []string{"repair", "--help"}, &b, &b)
	if exitCode(err) != exitOK {
		t.Fatalf("repair --help: %v", err)
	}
	contains(t, "repair --help", b.String(), "quarantined", "weft repair show <run>", "--seq", "--reason", "void record", "runner's credentials", "weft audit verify")
}

// TestSecurityWhoDidIt_RepairDropSigned (docs/security.md, "Who did it"):
// `weft repair drop --signing-key` signs the void (the run, the sequence,
// the SHA-256 of the voided body, the reason) and refuses without --by
// (never $USER shown verified); the proof covers the key, not the typed
// name, so repair drop and `weft audit verify` show the void signed by
// the key, the name typed, not checked against people's keys; with
// --people naming the key alice verify passes and names alice, the typed
// name shown as typed (not a false alarm), and with --people naming
// another key it fails untrusted (exit 4). A proof signed for another
// reason is refused proof_refused and voids nothing.
func TestSecurityWhoDidIt_RepairDropSigned(t *testing.T) {
	s := setup(t)
	t.Setenv("NATS_URL", s.URL)
	ack, err := s.JS.Publish(context.Background(), "weft.ev.pay-42.events", []byte("<html>oops</html>"))
	if err != nil {
		t.Fatal(err)
	}
	seq := strconv.FormatUint(ack.Sequence, 10)
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "alice.nk")
	if err := os.WriteFile(keyFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, out, _ := cli(t, "runs", "--status", "quarantined")
		if strings.Contains(out, "pay-42") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never listed quarantined: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	sum := sha256.Sum256([]byte("<html>oops</html>"))
	other, err := proof.NewCommand(proof.VoidSubject("pay-42", ack.Sequence, hex.EncodeToString(sum[:]), "another reason"), pub, time.Now().Add(time.Minute))
	if err == nil {
		other, err = proof.SignCommand(other, kp.Sign)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log.VoidSigned(context.Background(), "pay-42", ack.Sequence, "pasted into the wrong terminal", "alice", &other, time.Now()); !errors.Is(err, &weft.Error{Code: weft.CodeProofRefused, Reason: proof.ReasonOtherReason}) {
		t.Fatalf("a void signed for another reason: %v, want proof_refused(other_reason)", err)
	}

	if code, out, errs := cli(t, "repair", "drop", "pay-42", "--seq", seq, "--reason", "pasted into the wrong terminal", "--signing-key", keyFile); code != exitUsage || !strings.Contains(errs, "--by") {
		t.Fatalf("signed drop without --by: %d %s %s, want %d asking for --by", code, out, errs, exitUsage)
	}
	if voids, err := s.Log.Voids(context.Background(), "pay-42"); err != nil || len(voids) != 0 {
		t.Fatalf("a refused drop recorded %v %v", voids, err)
	}
	code, out, errs := cli(t, "repair", "drop", "pay-42", "--seq", seq, "--reason", "pasted into the wrong terminal", "--by", "ops", "--signing-key", keyFile)
	if code != 0 {
		t.Fatalf("signed drop: %d %s %s", code, out, errs)
	}
	unchecked := `with a proof signed by key ` + pub + ` (the name "ops" is typed; not checked against people's keys: give --people)`
	contains(t, "signed drop", out, "signing: void run pay-42", "key "+pub, unchecked)
	if strings.Contains(out, "verified") {
		t.Errorf("signed drop: a typed name is shown verified:\n%s", out)
	}

	code, _, errs = cli(t, "audit", "verify", "pay-42")
	if code != 0 {
		t.Fatalf("verify after the signed repair: %d %s", code, errs)
	}
	contains(t, "verify's repair note", errs, "stream sequence "+seq, "voided "+unchecked)
	code, out, errs = cli(t, "repair", "show", "pay-42")
	if code != 0 {
		t.Fatalf("repair show after the signed repair: %d %s", code, errs)
	}
	contains(t, "repair show", out, "voided: sequence "+seq, unchecked+": the signed proof verifies")
	if code, out, errs := cli(t, "audit", "verify", "pay-42", "--json"); code != 0 || !strings.Contains(out, `"voids": [`) || !strings.Contains(out, `"seq": `+seq+`,`) || !strings.Contains(out, `"key": "`+pub+`"`) {
		t.Fatalf("verify --json does not report the void: %d %s %s", code, out, errs)
	}
	people := filepath.Join(dir, "people")
	if err := os.WriteFile(people, []byte(pub+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "audit", "verify", "pay-42", "--people", people)
	if code != 0 {
		t.Fatalf("verify --people naming the key alice: %d %s %s", code, out, errs)
	}
	contains(t, "verify --people", errs, `voided by alice (verified, key `+pub+`, a person's key you trust; typed as "ops")`)
	stranger, _ := nkeys.CreateUser()
	strangerPub, _ := stranger.PublicKey()
	if err := os.WriteFile(people, []byte(strangerPub+" bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli(t, "audit", "verify", "pay-42", "--people", people); code != exitAudit || !strings.Contains(errs, `untrusted: run pay-42: the void of the message at stream sequence `+seq) || !strings.Contains(errs, "a key you do not name as a person's") {
		t.Fatalf("verify --people naming another key: %d %s", code, errs)
	}

	// A void record written by hand, claiming the proof signed for another
	// reason: repair show says it does not verify.
	forged, err := json.Marshal(map[string]any{"schema": eventlog.MessageSchema, "void": eventlog.Void{Seq: ack.Sequence, SHA256: hex.EncodeToString(sum[:]), Bytes: len("<html>oops</html>"),
		Subject: "weft.ev.pay-42.events", Problem: "forged", Reason: "pasted into the wrong terminal", By: "mallory",
		Identity: events.Identity{Verified: true, Key: pub}, Proof: &other, Recorded: time.Now().UTC()}})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(eventlog.Subject("pay-42"))
	m.Data = forged
	m.Header.Set(eventlog.HeaderRun, "pay-42")
	m.Header.Set(eventlog.HeaderVoid, seq)
	if _, err := s.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	code, out, errs = cli(t, "repair", "show", "pay-42")
	if code != exitAudit || !strings.Contains(errs, "proof: run pay-42: the void of the message at stream sequence") {
		t.Fatalf("repair show with a forged void record: exit %d, want %d (as audit verify), %s", code, exitAudit, errs)
	}
	contains(t, "repair show of a forged record", out, `by "mallory": its signed proof DOES NOT VERIFY`, "other_reason")
	if strings.Count(out, ": the signed proof verifies") != 1 {
		t.Errorf("repair show: want only the real void verified:\n%s", out)
	}
}
