package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/proof"
	"github.com/weftrun/weft/retention"
)

// heldRun is a finished run (run) on its own server (NATS_URL set) with
// three legal holds placed as the runner places them (the person keys'
// check, approvers.People.Command, then retention.Place/ReleaseHold):
// h1 signed by alice and released signed by bob, h2 placed under a typed
// name and active. It returns the server, alice's and bob's public keys,
// and a --people file naming both (docs/security.md, "Who did it",
// "Retention and legal hold").
func heldRun(t *testing.T, run string) (s *natstest.Server, alicePub, bobPub, peopleFile string) {
	t.Helper()
	s = natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	appendRunAt(t, s.Log, run, time.Now().Add(-time.Hour).Truncate(time.Second), answered("a")...)
	alice, _ := nkeys.CreateUser()
	alicePub, _ = alice.PublicKey()
	bob, _ := nkeys.CreateUser()
	bobPub, _ = bob.PublicKey()
	people := approvers.People{Keys: []approvers.Key{{Public: alicePub, Reviewer: "alice"}, {Public: bobPub, Reviewer: "bob"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now()
	sign := func(kp nkeys.KeyPair, pub string, subject proof.CommandSubject) approvers.Who {
		p, err := proof.NewCommand(subject, pub, now.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if p, err = proof.SignCommand(p, kp.Sign); err != nil {
			t.Fatal(err)
		}
		who, err := people.Command(subject, "", &p, now)
		if err != nil {
			t.Fatal(err)
		}
		return who
	}
	if _, err := retention.Place(ctx, s.JS, "c-h1", run, sign(alice, alicePub, proof.HoldSubject(run, "dispute D-17")), "dispute D-17", now); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.ReleaseHold(ctx, s.JS, "c-r1", run, "h1", sign(bob, bobPub, proof.ReleaseHoldSubject(run, "h1", "D-17 settled")), "D-17 settled", now); err != nil {
		t.Fatal(err)
	}
	if _, err := retention.Place(ctx, s.JS, "c-h2", run, approvers.Who{By: "legal: r.ortiz"}, "subpoena S-4", now); err != nil {
		t.Fatal(err)
	}
	peopleFile = filepath.Join(t.TempDir(), "people")
	if err := os.WriteFile(peopleFile, []byte(alicePub+" alice\n"+bobPub+" bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return s, alicePub, bobPub, peopleFile
}

// editHold rewrites what weft_holds keeps for run (its value, a JSON
// object {"run":…,"holds":[…]}) with edit applied to hold i, as whoever
// may write the bucket (the runner and custodian roles) can.
func editHold(t *testing.T, s *natstest.Server, run string, i int, edit func(h map[string]any)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := s.JS.KeyValue(ctx, retention.HoldsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		t.Fatal(err)
	}
	edit(v["holds"].([]any)[i].(map[string]any))
	b, _ := json.Marshal(v)
	if _, err := kv.Put(ctx, run, b); err != nil {
		t.Fatal(err)
	}
}

// editHoldLine rewrites the export file path with edit applied to its
// hold line of hold id, and returns the new file's path.
func editHoldLine(t *testing.T, path, id string, edit func(h map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	n := 0
	for i, l := range lines {
		var line map[string]any
		if json.Unmarshal([]byte(l), &line) != nil {
			t.Fatal(l)
		}
		h, ok := line["hold"].(map[string]any)
		if !ok || h["id"] != id {
			continue
		}
		edit(h)
		nb, _ := json.Marshal(line)
		lines[i] = string(nb)
		n++
	}
	if n != 1 {
		t.Fatalf("the export %s has %d hold lines of %s, want 1", path, n, id)
	}
	out := path + "." + id + ".edited"
	if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

func released(h map[string]any) map[string]any { return h["released"].(map[string]any) }

// TestSecurityWhoDidIt_AuditVerifyNamesWhoHeld (docs/security.md, "Who
// did it", "Retention and legal hold"; docs/adr/0040 §3): `weft audit
// verify RUN` re-checks the signed proof of each legal hold and release
// kept in weft_holds and prints who placed and released each: alice's
// signed hold and bob's signed release verified with their keys, the
// typed name unverified; with --people naming both, their keys are "a
// person's key you trust"; `weft audit export` writes the holds as hold
// lines, and `verify --file` of the export prints the same. On the old
// code verify printed no holder and the export held no hold.
func TestSecurityWhoDidIt_AuditVerifyNamesWhoHeld(t *testing.T) {
	const run = "held-1"
	_, alicePub, bobPub, peopleFile := heldRun(t, run)
	wantLines := []string{
		"hold h1: placed by alice (verified, key " + alicePub,
		": dispute D-17 (released)",
		"hold h1: released by bob (verified, key " + bobPub,
		"hold h2: placed by legal: r.ortiz (unverified) at ",
		": subpoena S-4 (active)",
		"ok: run " + run,
	}
	code, out, errs := cli(t, "audit", "verify", run)
	for _, w := range wantLines {
		if code != 0 || !strings.Contains(out, w) {
			t.Fatalf("live verify: exit %d, want 0 and %q:\n%s%s", code, w, out, errs)
		}
	}
	if !strings.Contains(out, "note: hold h1: the placement by alice is signed by key "+alicePub+": not checked against people's keys") {
		t.Errorf("live verify without --people does not say alice's key is unchecked:\n%s", out)
	}
	code, out, errs = cli(t, "audit", "verify", run, "--people", peopleFile, "--json")
	var rep struct {
		Holds []struct {
			ID     string `json:"id"`
			Active bool   `json:"active"`
			Placed struct {
				By, Key, Command  string
				Verified, Trusted bool
			} `json:"placed"`
			Released *struct {
				By, Key           string
				Verified, Trusted bool
			} `json:"released"`
		} `json:"holds"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || len(rep.Holds) != 2 {
		t.Fatalf("live verify --people --json: exit %d (%v)\n%s%s", code, err, out, errs)
	}
	if h := rep.Holds[0]; h.ID != "h1" || h.Active || h.Placed.By != "alice" || !h.Placed.Verified || !h.Placed.Trusted || h.Placed.Command != proof.CommandHold ||
		h.Released == nil || h.Released.By != "bob" || !h.Released.Verified || !h.Released.Trusted || h.Released.Key != bobPub {
		t.Errorf("h1 in the report: %+v, want placed by alice and released by bob, verified and trusted", h)
	}
	if h := rep.Holds[1]; h.ID != "h2" || !h.Active || h.Placed.By != "legal: r.ortiz" || h.Placed.Verified || h.Released != nil {
		t.Errorf("h2 in the report: %+v, want active, placed by the typed name unverified", h)
	}

	file := filepath.Join(t.TempDir(), run+".jsonl")
	if code, out, errs := cli(t, "audit", "export", run, "-o", file); code != 0 || !strings.Contains(errs, "and 2 legal hold(s)") {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	code, out, errs = cli(t, "audit", "verify", "--file", file, "--people", peopleFile)
	for _, w := range append(wantLines, "by alice (verified, key "+alicePub+", a person's key you trust)") {
		if code != 0 || !strings.Contains(out, w) {
			t.Fatalf("verify --file of the export: exit %d, want 0 and %q:\n%s%s", code, w, out, errs)
		}
	}
}

// TestSecurityWhoDidIt_AuditVerifyCatchesAnEditedHold (docs/security.md,
// "Who did it", "Retention and legal hold": weft_holds is not the signed
// log, and whoever may write it may edit it): each edit of what weft_holds
// keeps for a signed hold or release, made after the export, fails `weft
// audit verify RUN` with proof (exit 4) naming the hold, and the same edit
// of the exported file fails `verify --file`: the reason, the key (the
// record's and the proof's: the signature no longer verifies), a release's
// reason, and a hold's proof copied onto another hold (proof_used). The
// holder's name, which the proof does not cover, fails untrusted when the
// auditor names the people's keys (--people), and verifies without
// (it then says the key was not checked against people's keys). A hold
// whose proof and identity were removed whole reads unverified and
// verifies; one whose proof was removed but that still says verified
// fails proof. On the old code each edit verified.
func TestSecurityWhoDidIt_AuditVerifyCatchesAnEditedHold(t *testing.T) {
	const run = "held-2"
	s, _, _, peopleFile := heldRun(t, run)
	mallory, _ := nkeys.CreateUser()
	malloryPub, _ := mallory.PublicKey()
	clean := filepath.Join(t.TempDir(), run+".jsonl")
	if code, out, errs := cli(t, "audit", "export", run, "-o", clean); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	ctx := context.Background()
	kv, err := s.JS.KeyValue(ctx, retention.HoldsBucket)
	if err != nil {
		t.Fatal(err)
	}
	orig, err := kv.Get(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	restore := func() {
		if _, err := kv.Put(ctx, run, orig.Value()); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		name   string
		hold   string // the hold edited
		edit   func(h map[string]any)
		people bool   // verify with --people
		kind   string // "" verifies
		want   string // in the problem (or, verifying, in the output)
	}{
		{"reason", "h1", func(h map[string]any) { h["reason"] = "routine" }, false, "proof",
			"the placement of legal hold h1 by \"alice\" does not verify: other_reason: the proof states the reason \"dispute D-17\", the command \"routine\""},
		{"key", "h1", func(h map[string]any) { h["key"] = malloryPub; h["proof"].(map[string]any)["key"] = malloryPub }, false, "proof",
			"the placement of legal hold h1 by \"alice\" does not verify"},
		{"recorded key only", "h1", func(h map[string]any) { h["key"] = malloryPub }, false, "proof",
			"is not the proof's key"},
		{"release reason", "h1", func(h map[string]any) { released(h)["reason"] = "never mind" }, false, "proof",
			"the release of legal hold h1 by \"bob\" does not verify: other_reason: the proof states the reason \"D-17 settled\""},
		{"proof copied to another hold", "h2", func(h map[string]any) {
			h["by"], h["verified"], h["reason"] = "alice", true, "dispute D-17"
		}, false, "proof", "proof_used"},
		{"name, with people", "h1", func(h map[string]any) { h["by"] = "mallory" }, true, "untrusted",
			"is recorded by \"mallory\", but you name key"},
		{"name, without people", "h1", func(h map[string]any) { h["by"] = "mallory" }, false, "",
			"note: hold h1: the placement by mallory is signed by key"},
		{"proof removed whole", "h1", func(h map[string]any) { delete(h, "proof"); delete(h, "verified"); delete(h, "key") }, true, "",
			"hold h1: placed by alice (unverified)"},
		{"proof removed, verified kept", "h1", func(h map[string]any) { delete(h, "proof") }, false, "proof",
			"carries no signed proof"},
	}
	// The copy needs h1's proof on h2: read it from the clean value.
	var stored struct {
		Holds []map[string]any `json:"holds"`
	}
	if err := json.Unmarshal(orig.Value(), &stored); err != nil {
		t.Fatal(err)
	}
	h1 := stored.Holds[0]
	for i := range cases {
		if cases[i].name == "proof copied to another hold" {
			edit := cases[i].edit
			cases[i].edit = func(h map[string]any) { edit(h); h["key"], h["proof"] = h1["key"], h1["proof"] }
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			idx := map[string]int{"h1": 0, "h2": 1}[tc.hold]
			args := func(more ...string) []string {
				if tc.people {
					more = append(more, "--people", peopleFile)
				}
				return append([]string{"audit", "verify"}, more...)
			}
			check := func(what string, code int, out, errs string) {
				t.Helper()
				if tc.kind == "" {
					if code != 0 || !strings.Contains(out, tc.want) {
						t.Fatalf("%s: exit %d, want 0 and %q:\n%s%s", what, code, tc.want, out, errs)
					}
					return
				}
				if code != exitAudit || !strings.Contains(errs, "audit: "+tc.kind+": run "+run+": ") || !strings.Contains(errs, tc.want) {
					t.Fatalf("%s: exit %d, want %d, %s and %q:\n%s%s", what, code, exitAudit, tc.kind, tc.want, out, errs)
				}
			}
			editHold(t, s, run, idx, tc.edit)
			defer restore()
			code, out, errs := cli(t, args(run)...)
			check("live", code, out, errs)
			edited := editHoldLine(t, clean, tc.hold, tc.edit)
			code, out, errs = cli(t, args("--file", edited)...)
			check("--file", code, out, errs)
		})
	}
	// Untouched again, both verify.
	if code, out, errs := cli(t, "audit", "verify", run, "--people", peopleFile); code != 0 {
		t.Fatalf("restored: exit %d\n%s%s", code, out, errs)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", clean, "--people", peopleFile); code != 0 {
		t.Fatalf("the clean export: exit %d\n%s%s", code, out, errs)
	}
}

// TestAuditVerifyFileWithoutHoldLines (docs/cli.md, audit export and
// verify; docs/security.md, "Retention and legal hold"): an export written
// before exports carried holds (no hold line) still verifies, and reports
// no hold; a hold line of a schema this weft does not know is refused
// (parse, exit 4) rather than read as schema 1, and says so even when its
// hold has a field schema 1's lacks (before, that line read as "not an
// event envelope").
func TestAuditVerifyFileWithoutHoldLines(t *testing.T) {
	const run = "held-3"
	heldRun(t, run)
	dir := t.TempDir()
	file := filepath.Join(dir, run+".jsonl")
	if code, out, errs := cli(t, "audit", "export", run, "-o", file); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var old, later []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(l, `"hold":{`) && strings.HasPrefix(l, `{"run":`) {
			// Schema 2 as a later weft would write it: with a field schema
			// 1's hold lacks, still refused as a later schema.
			l = strings.Replace(l, `"hold":{`, `"hold":{"expires":"2027-01-01T00:00:00Z",`, 1)
			later = append(later, strings.Replace(l, `"schema":1`, `"schema":2`, 1))
			continue
		}
		old = append(old, l)
		later = append(later, l)
	}
	if len(old) != 4 || len(later) != 6 {
		t.Fatalf("the export has %d event lines and %d lines, want 4 and 6:\n%s", len(old), len(later), b)
	}
	oldFile := filepath.Join(dir, "old.jsonl")
	if err := os.WriteFile(oldFile, []byte(strings.Join(old, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", oldFile); code != 0 || !strings.Contains(out, "ok: run "+run) || strings.Contains(out, "hold ") {
		t.Fatalf("an export without hold lines: exit %d, want 0 and no hold:\n%s%s", code, out, errs)
	}
	laterFile := filepath.Join(dir, "later.jsonl")
	if err := os.WriteFile(laterFile, []byte(strings.Join(later, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := cli(t, "audit", "verify", "--file", laterFile); code != exitAudit || !strings.Contains(errs, "parse: line 5 is a legal hold line of run \""+run+"\" in schema 2") {
		t.Fatalf("a hold line of schema 2: exit %d, want %d and parse:\n%s%s", code, exitAudit, out, errs)
	}
}

// TestAuditVerifyHoldsThatDoNotDecodeAreUnknown (docs/cli.md, audit
// verify; docs/security.md, "Retention and legal hold"): a weft_holds value
// that does not decode (corrupted, or edited by whoever may write the
// bucket) is reported in the report, `holds_unknown` and a note line, not
// only on stderr, and the export says so in its holds_unread line: neither
// reads as a run without holds. Before, it was a stderr note alone, and
// the export held no hold line.
func TestAuditVerifyHoldsThatDoNotDecodeAreUnknown(t *testing.T) {
	const run = "held-9"
	s, _, _, _ := heldRun(t, run)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := s.JS.KeyValue(ctx, retention.HoldsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, run, []byte(`{"run":"held-9","holds":[{`)); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, "audit", "verify", "--json", run)
	var rep audit.Report
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil || rep.HoldsUnknown == "" || len(rep.Holds) != 0 {
		t.Fatalf("verify of a run whose holds do not decode: exit %d, %v, holds_unknown %q, want 0 and a reason\n%s%s", code, err, rep.HoldsUnknown, out, errs)
	}
	code, out, errs = cli(t, "audit", "verify", run)
	if code != 0 || !strings.Contains(out, "note: the run's legal holds are unknown (") {
		t.Fatalf("verify: exit %d, want 0 and a note that the holds are unknown\n%s%s", code, out, errs)
	}
	file := filepath.Join(t.TempDir(), run+".jsonl")
	if code, out, errs := cli(t, "audit", "export", run, "-o", file); code != 0 {
		t.Fatalf("export: exit %d\n%s%s", code, out, errs)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `{"run":"held-9","schema":1,"holds_unread":"`) {
		t.Fatalf("the export has no holds_unread line:\n%s", b)
	}
}
