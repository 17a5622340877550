package audit_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/proof"
)

// signedProof is a command proof of s signed by kp, and kp's public key.
func signedProof(t *testing.T, kp nkeys.KeyPair, s proof.CommandSubject) (*events.CommandProof, string) {
	t.Helper()
	pub, _ := kp.PublicKey()
	p, err := proof.NewCommand(s, pub, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	return &p, pub
}

// twoHolds are run's holds as weft_holds keeps them: h1 placed by alice
// and released by bob, both signed; h2 placed signed by alice too.
func twoHolds(t *testing.T, run string) []audit.Hold {
	alice, _ := nkeys.CreateUser()
	bob, _ := nkeys.CreateUser()
	p1, a := signedProof(t, alice, proof.HoldSubject(run, "dispute D-17"))
	r1, b := signedProof(t, bob, proof.ReleaseHoldSubject(run, "h1", "settled"))
	p2, _ := signedProof(t, alice, proof.HoldSubject(run, "subpoena S-4"))
	return []audit.Hold{
		{Run: run, ID: "h1", By: "alice", Identity: events.Identity{Verified: true, Key: a}, Proof: p1, Reason: "dispute D-17", At: t0,
			Released: &audit.HoldRelease{By: "bob", Identity: events.Identity{Verified: true, Key: b}, Proof: r1, Reason: "settled", At: t0.Add(time.Hour)}},
		{Run: run, ID: "h2", By: "alice", Identity: events.Identity{Verified: true, Key: a}, Proof: p2, Reason: "subpoena S-4", At: t0.Add(2 * time.Hour)},
	}
}

// TestCheckHoldsReleaseProofNamesItsHold (docs/security.md, "Who did it";
// docs/adr/0040 §4: a signed release names its hold): CheckHolds verifies
// both holds and the release; a release's proof moved onto another hold
// fails proof (other_action) naming that hold, as does a release that
// claims verified with no proof; a release recorded with a typed name is
// unverified, not a problem.
func TestCheckHoldsReleaseProofNamesItsHold(t *testing.T) {
	holds := twoHolds(t, "pay-1")
	checks, p := audit.CheckHolds("pay-1", holds)
	if p != nil || len(checks) != 2 || !checks[0].Placed.Verified || checks[0].Released == nil || !checks[0].Released.Verified || checks[0].Active || !checks[1].Active {
		t.Fatalf("untouched: %+v, %v", checks, p)
	}
	moved := twoHolds(t, "pay-1")
	moved[1].Released, moved[0].Released = moved[0].Released, nil
	if _, p := audit.CheckHolds("pay-1", moved); p == nil || p.Kind != audit.KindProof || !strings.Contains(p.Message, "release of legal hold h2") || !strings.Contains(p.Message, proof.ReasonOtherAction) {
		t.Fatalf("h1's release moved onto h2: %v, want proof, other_action, naming h2", p)
	}
	claimed := twoHolds(t, "pay-1")
	claimed[0].Released.Proof = nil
	if _, p := audit.CheckHolds("pay-1", claimed); p == nil || p.Kind != audit.KindProof || !strings.Contains(p.Message, "carries no signed proof") {
		t.Fatalf("a release verified without its proof: %v, want proof", p)
	}
	typed := twoHolds(t, "pay-1")
	typed[0].Released.Proof, typed[0].Released.Identity = nil, events.Identity{}
	if checks, p := audit.CheckHolds("pay-1", typed); p != nil || checks[0].Released.Verified {
		t.Fatalf("a release under a typed name: %+v, %v, want unverified and no problem", checks[0].Released, p)
	}
	if _, p := audit.CheckHolds("pay-2", holds); p == nil {
		t.Fatal("pay-1's holds checked as pay-2's: no problem")
	}
}

// TestRangeManifestCoversHolds (docs/security.md, "What an auditor
// keeps"): a range's manifest counts each run's hold lines and digests
// them, so a hold line dropped from the file fails the manifest check
// (and, with the manifest rewritten to match, its digest); a manifest
// written before exports carried holds, of a file with none, still
// checks.
func TestRangeManifestCoversHolds(t *testing.T) {
	envs, err := audittest.Chain("pay-1", t0, paymentRun())
	if err != nil {
		t.Fatal(err)
	}
	holds := twoHolds(t, "pay-1")
	var buf bytes.Buffer
	rg := audit.Range{Since: t0, Until: t0.Add(time.Hour)}
	audit.WriteRange(&buf, rg)
	if err := audit.ExportRun(&buf, envs, nil, holds, ""); err != nil {
		t.Fatal(err)
	}
	digest, _ := audit.WriteManifest(&buf, audit.Manifest{Range: rg, Runs: []audit.ManifestRun{audit.ManifestOf(envs, nil, holds, "")}})
	f, err := audit.ReadFile(bytes.NewReader(buf.Bytes()))
	if err != nil || len(f.Runs) != 1 || len(f.Runs[0].Holds) != 2 || f.Runs[0].Holds[0].Released == nil {
		t.Fatalf("read back: %v, %+v", err, f.Runs)
	}
	if p := audit.CheckManifest(f); p != nil {
		t.Fatal(p)
	}
	if p := audit.CheckManifestDigest(f, digest); p != nil {
		t.Fatal(p)
	}
	// The file without h2's line.
	lines := strings.SplitAfter(buf.String(), "\n")
	var dropped strings.Builder
	for _, l := range lines {
		if !strings.Contains(l, `"id":"h2"`) {
			dropped.WriteString(l)
		}
	}
	f, err = audit.ReadFile(strings.NewReader(dropped.String()))
	if err != nil {
		t.Fatal(err)
	}
	if p := audit.CheckManifest(f); p == nil || p.Kind != audit.KindManifest || !strings.Contains(p.Message, "1 legal hold(s) in the file, listed 2") {
		t.Fatalf("a hold line dropped: %v, want manifest", p)
	}
	// The old golden export (no hold line) under a manifest without holds.
	old := audittest.ReadExport(t, "testdata/signed-reject-reason.jsonl")
	buf.Reset()
	audit.WriteRange(&buf, rg)
	b, err := os.ReadFile("testdata/signed-reject-reason.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	buf.Write(b)
	audit.WriteManifest(&buf, audit.Manifest{Range: rg, Runs: []audit.ManifestRun{{Run: old[0].Run, Version: old[len(old)-1].Version, Head: old[len(old)-1].Hash()}}})
	f, err = audit.ReadFile(bytes.NewReader(buf.Bytes()))
	if err != nil || len(f.Runs) != 1 || len(f.Runs[0].Holds) != 0 {
		t.Fatalf("the golden export in a range: %v, %+v", err, f.Runs)
	}
	if p := audit.CheckManifest(f); p != nil {
		t.Fatal(p)
	}
	if rep := audit.Verify(f.Runs[0].Events, audit.WithTrust(goldenRunnerKey)); !rep.OK() {
		t.Fatal(rep.Problem)
	}
	// A hold line of another run right after these events.
	var p *audit.Problem
	buf.Reset()
	if err := audit.ExportRun(&buf, envs, nil, holds[:1], ""); err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(buf.String(), `{"run":"pay-1","schema":1,"hold"`, `{"run":"pay-9","schema":1,"hold"`, 1)
	if _, err := audit.ReadRuns(strings.NewReader(moved)); !errors.As(err, &p) || p.Kind != audit.KindSequence || p.Line != len(envs)+1 {
		t.Fatalf("another run's hold line: %v, want sequence at line %d", err, len(envs)+1)
	}
}

// TestHoldsUnreadIsNotNoHold (docs/cli.md, audit export; docs/security.md,
// "Retention and legal hold"): an export that could not read a run's legal
// holds says so in a holds_unread line, which reads back as HoldsUnread,
// not as a run without holds; in a range the manifest lists it, so a
// holds_unread line dropped (the file then reads as "no hold") fails the
// manifest. A hold line without a schema is refused as such (parse), not
// told to use a newer weft. Before, such an export was byte for byte a run
// without holds.
func TestHoldsUnreadIsNotNoHold(t *testing.T) {
	envs, err := audittest.Chain("pay-1", t0, paymentRun())
	if err != nil {
		t.Fatal(err)
	}
	const why = "permission_denied: Permissions Violation for Publish to $JS.API.STREAM.INFO.KV_weft_holds"
	var buf bytes.Buffer
	rg := audit.Range{Since: t0, Until: t0.Add(time.Hour)}
	audit.WriteRange(&buf, rg)
	if err := audit.ExportRun(&buf, envs, nil, nil, why); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `{"run":"pay-1","schema":1,"holds_unread":"permission_denied: `) {
		t.Fatalf("no holds_unread line:\n%s", buf.String())
	}
	audit.WriteManifest(&buf, audit.Manifest{Range: rg, Runs: []audit.ManifestRun{audit.ManifestOf(envs, nil, nil, why)}})
	f, err := audit.ReadFile(bytes.NewReader(buf.Bytes()))
	if err != nil || len(f.Runs) != 1 || f.Runs[0].HoldsUnread != why || len(f.Runs[0].Holds) != 0 {
		t.Fatalf("read back: %v, %+v", err, f.Runs)
	}
	if p := audit.CheckManifest(f); p != nil {
		t.Fatal(p)
	}
	var dropped strings.Builder
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if !strings.Contains(l, `"holds_unread":"permission_denied`) || strings.Contains(l, `"manifest"`) {
			dropped.WriteString(l)
		}
	}
	f, err = audit.ReadFile(strings.NewReader(dropped.String()))
	if err != nil {
		t.Fatal(err)
	}
	if p := audit.CheckManifest(f); p == nil || p.Kind != audit.KindManifest || !strings.Contains(p.Message, "holds unread") {
		t.Fatalf("the holds_unread line dropped: %v, want manifest", p)
	}
	// Events after the holds_unread line: its run's lines are over.
	buf.Reset()
	if err := audit.ExportRun(&buf, envs[:1], nil, nil, why); err != nil {
		t.Fatal(err)
	}
	b, _ := envsJSON(envs[1:2])
	var p *audit.Problem
	if _, err := audit.ReadRuns(strings.NewReader(buf.String() + b)); !errors.As(err, &p) || p.Kind != audit.KindSequence {
		t.Fatalf("an event after the holds_unread line: %v, want sequence", err)
	}
	// A hold line without a schema.
	line := `{"run":"pay-1","hold":{"run":"pay-1","id":"h1","by":"legal","reason":"r","at":"2026-01-01T00:00:00Z"}}` + "\n"
	buf.Reset()
	if err := audit.ExportRun(&buf, envs, nil, nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := audit.ReadRuns(strings.NewReader(buf.String() + line)); !errors.As(err, &p) || p.Kind != audit.KindParse || !strings.Contains(p.Message, "without a schema") {
		t.Fatalf("a hold line without a schema: %v, want parse, without a schema", err)
	}
}

// envsJSON is envs as export lines.
func envsJSON(envs []events.Envelope) (string, error) {
	var b bytes.Buffer
	err := audit.Export(&b, envs)
	return b.String(), err
}
