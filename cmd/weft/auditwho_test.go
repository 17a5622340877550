package main

import (
	"os"
	"path/filepath"
	"regexp"
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

// personRun is a run paused and resumed with proofs signed by person (as
// alice, or by, when not empty), cancelled by bob under a typed name and
// finished, with a head signed by runner after each person's command and
// at the end (docs/security.md, "Signed heads", "Who did it").
func personRun(t *testing.T, run string, runner, person nkeys.KeyPair, by string) []events.Envelope {
	t.Helper()
	pub, _ := person.PublicKey()
	paused, resumed, err := projtest.PauseAndResume(run, pub, person.Sign, t0.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if by != "" {
		paused.By = by
	}
	head := events.HeadSigned{}
	envs, err := audittest.Chain(run, t0, []events.Event{
		events.RunStarted{Agent: events.AgentRef{Name: "payment-desk", Version: "1"}, Input: "pay", Runner: "r1", Limits: events.Limits{MaxTurns: 8, MaxConcurrency: 4}},
		paused, head, resumed, head,
		events.CancelRequested{By: "bob", Reason: "customer left"}, head,
		events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCancelled}}, head,
	})
	if err != nil {
		t.Fatal(err)
	}
	return audittest.Resign(envs, runner, "runner-1")
}

// TestAuditVerifyFilePersonKeys (docs/security.md, "Who did it"; docs/cli.md,
// exit 4): with a trust file, `weft audit verify --file` requires every
// person's command recorded verified to be signed by a key the trust names
// as a person's, under the name it gives: the untouched export passes with
// a trust file naming the runner's head key and alice's person key, or
// with --trust and --people (the runners' person keys file), and names the
// cancel typed as bob unverified; with --trust alone (no person named) it
// passes too and says the pause's key was not checked against people's
// keys; it fails untrusted, exit 4, naming the event, when the trust file
// names a person but not alice, when the pause is signed by the runner's
// head key (even with --trust alone), and when the name recorded is not
// the trust's.
func TestAuditVerifyFilePersonKeys(t *testing.T) {
	runner, _ := nkeys.CreateUser()
	runnerPub, _ := runner.PublicKey()
	alice, _ := nkeys.CreateUser()
	alicePub, _ := alice.PublicKey()
	dir := t.TempDir()
	trustFile := filepath.Join(dir, "trusted")
	if err := os.WriteFile(trustFile, []byte("# runners\n"+runnerPub+" runner-1\n# people\nperson "+alicePub+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	peopleFile := filepath.Join(dir, "people")
	if err := os.WriteFile(peopleFile, []byte(alicePub+" alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clean := writeExport(t, filepath.Join(dir, "clean.jsonl"), personRun(t, "pk-1", runner, alice, ""))
	for _, args := range [][]string{{"--trust-file", trustFile}, {"--trust", runnerPub, "--people", peopleFile}} {
		code, o, errs := cli(t, append([]string{"audit", "verify", "--file", clean}, args...)...)
		if code != 0 || !strings.Contains(o, "ok: run pk-1") {
			t.Fatalf("untouched, %v: exit %d\n%s%s", args, code, o, errs)
		}
		for _, want := range []string{
			"proof: event 2, pause by alice, key " + alicePub + ": verifies, a person's key you trust",
			"event 2: pause by alice (verified, key " + alicePub + ")",
			"event 6: cancel by bob (unverified)",
		} {
			if !strings.Contains(o, want) {
				t.Errorf("untouched, %v: the output does not say %q:\n%s", args, want, o)
			}
		}
	}

	if code, o, errs := cli(t, "audit", "verify", "--file", clean, "--trust", runnerPub); code != 0 ||
		!strings.Contains(o, "note: event 2: the pause by alice is signed by key "+alicePub+": not checked against people's keys") ||
		strings.Contains(o, "a person's key you trust") {
		t.Fatalf("untouched, --trust alone: exit %d, want 0 with the pause's key listed as not checked\n%s%s", code, o, errs)
	}
	bobFile := filepath.Join(dir, "trusted-bob")
	bob, _ := nkeys.CreateUser()
	bobPub, _ := bob.PublicKey()
	if err := os.WriteFile(bobFile, []byte(runnerPub+"\nperson "+bobPub+" bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	runnerSigned := writeExport(t, filepath.Join(dir, "runner-signed.jsonl"), personRun(t, "pk-1", runner, runner, ""))
	renamed := writeExport(t, filepath.Join(dir, "renamed.jsonl"), personRun(t, "pk-1", runner, alice, "mallory"))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"alice not named a person", []string{"--file", clean, "--trust-file", bobFile}, "untrusted: event 2: the pause by alice (verified, key " + alicePub + ") is signed by " + alicePub + ", a key you do not name as a person's"},
		{"signed by the runner's head key", []string{"--file", runnerSigned, "--trust-file", trustFile}, "untrusted: event 2: the pause by alice (verified, key " + runnerPub + ") is signed by " + runnerPub + ", a runner's head key you trust, not a person's key"},
		{"signed by the runner's head key, --trust alone", []string{"--file", runnerSigned, "--trust", runnerPub}, "untrusted: event 2: the pause by alice (verified, key " + runnerPub + ") is signed by " + runnerPub + ", a runner's head key you trust, not a person's key"},
		{"name edited", []string{"--file", renamed, "--trust-file", trustFile}, `untrusted: event 2: the pause is recorded by "mallory", but you name key ` + alicePub + ` "alice"`},
	} {
		code, o, errs := cli(t, append([]string{"audit", "verify"}, tc.args...)...)
		if code != exitAudit || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s%s", tc.name, code, exitAudit, tc.want, o, errs)
		}
	}
}

// TestAuditVerifyFilePersonKeys_SeveralNames (docs/security.md, "Who did
// it"): a person's key the deployment names twice — "alice" in an
// approver's config, "Alice  Smith" (two spaces, as written) in the
// runners' person keys file — does not fail an honest history whose
// resume is recorded under one and its pause under the other: the trust
// file's person lines and repeated --people files each add a name, kept
// verbatim; a name neither gives still fails untrusted.
func TestAuditVerifyFilePersonKeys_SeveralNames(t *testing.T) {
	runner, _ := nkeys.CreateUser()
	runnerPub, _ := runner.PublicKey()
	alice, _ := nkeys.CreateUser()
	alicePub, _ := alice.PublicKey()
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	trustFile := write("trusted", runnerPub+" runner-1\nperson "+alicePub+" alice\nperson "+alicePub+"  Alice  Smith \n")
	approverKeys := write("approver-keys", alicePub+" alice\n")
	personKeys := write("person-keys", alicePub+" Alice  Smith\n")
	honest := writeExport(t, filepath.Join(dir, "honest.jsonl"), personRun(t, "pk-2", runner, alice, "Alice  Smith"))
	for _, args := range [][]string{
		{"--trust-file", trustFile},
		{"--trust", runnerPub, "--people", approverKeys, "--people", personKeys},
	} {
		if code, o, errs := cli(t, append([]string{"audit", "verify", "--file", honest}, args...)...); code != 0 || !strings.Contains(o, "verifies, a person's key you trust") {
			t.Errorf("honest, %v: exit %d, want 0\n%s%s", args, code, o, errs)
		}
	}
	edited := writeExport(t, filepath.Join(dir, "edited.jsonl"), personRun(t, "pk-2", runner, alice, "Alice Smith"))
	want := `untrusted: event 2: the pause is recorded by "Alice Smith", but you name key ` + alicePub + ` "alice" or "Alice  Smith"`
	if code, o, errs := cli(t, "audit", "verify", "--file", edited, "--trust-file", trustFile); code != exitAudit || !strings.Contains(errs, want) {
		t.Errorf("edited name: exit %d, want %d with %q\n%s%s", code, exitAudit, want, o, errs)
	}
}

var devPersonKey = regexp.MustCompile(`person (U[A-Z0-9]+) demo approver`)

// TestAuditVerifyFileDevSecurePeople (docs/security.md, "Who did it" and
// "Signed heads"; demo): every `weft audit verify` command weft dev
// --secure prints passes, verbatim, on the export of an untouched run
// whose approve was signed with its approver key: --trust with the head
// key alone (the approve's key listed as not checked against people's
// keys) and --trust-file with the printed trust file lines (the approver
// key a person's key you trust).
func TestAuditVerifyFileDevSecurePeople(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CREDS", "")
	t.Setenv("WEFT_MODEL", "")
	data := t.TempDir()
	out, url := startDevCLI(t, "dev", "--secure", "--listen", "0", "--data", data)
	head, person := devHeadKey.FindStringSubmatch(out.String()), devPersonKey.FindStringSubmatch(out.String())
	if head == nil || person == nil {
		t.Fatalf("weft dev --secure does not print its head key and the approver's person line:\n%s", out)
	}
	roles := filepath.Join(data, "roles")
	t.Setenv("NATS_URL", url)
	t.Setenv("NATS_CREDS", filepath.Join(roles, "operator.creds"))
	if code, o, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "ps-7"); code != 0 {
		t.Fatalf("start: %d %s %s", code, o, errs)
	}
	waitShow(t, "ps-7", "waiting for approval")
	if code, o, errs := cli(t, "approve", "ps-7", "2/call_2_1", "--approver", "keys", "--signing-key", filepath.Join(roles, "approver.nk")); code != 0 {
		t.Fatalf("signed approve: %d %s %s", code, o, errs)
	}
	waitShow(t, "ps-7", "finished: completed")
	dir := t.TempDir()
	file := filepath.Join(dir, "ps-7.jsonl")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _, errs := cli(t, "audit", "export", "ps-7", "-o", file); code != 0 {
			t.Fatalf("export: %d %s", code, errs)
		}
		envs := readExport(t, file)
		if n := len(envs); n >= 2 && envs[n-1].Type == events.NameHeadSigned && envs[n-2].Type == events.NameRunFinished {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run's export never ended with its signed end head")
		}
		time.Sleep(50 * time.Millisecond)
	}
	printed := devVerifyLine.FindAllStringSubmatch(out.String(), -1)
	lines := devTrustLine.FindAllStringSubmatch(out.String(), -1)
	if len(printed) != 2 || len(lines) != 2 {
		t.Fatalf("weft dev --secure prints %d verify commands and %d trust file lines, want 2 and 2:\n%s", len(printed), len(lines), out)
	}
	trustFile := filepath.Join(dir, "trusted")
	if err := os.WriteFile(trustFile, []byte(lines[0][1]+"\n"+lines[1][1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		"demo approver is signed by key " + person[1] + ": not checked against people's keys",
		"verifies, a person's key you trust",
	} {
		args := strings.Fields(printed[i][1])
		for j, a := range args {
			args[j] = strings.NewReplacer("<export.jsonl>", file, "FILE", trustFile).Replace(a)
		}
		if code, o, errs := cli(t, args...); code != 0 || !strings.Contains(o, want) || !strings.Contains(o, "ok: run ps-7") {
			t.Errorf("the printed %q: exit %d, want 0 saying %q\n%s%s", printed[i][0], code, want, o, errs)
		}
	}
}

// devVerifyLine is a `weft audit verify` command weft dev prints, without
// "weft"; devTrustLine a line of the trust file it prints.
var (
	devVerifyLine = regexp.MustCompile(`(?m)^  (?:.*[ /])?weft (audit verify --file .*)$`)
	devTrustLine  = regexp.MustCompile(`(?m)^    ((?:person )?U[A-Z0-9]+ .*)$`)
)
