package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/audit"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
	"github.com/weftrun/weft/internal/natstest"
)

var devHeadKey = regexp.MustCompile(`signed by this store's runner key (U[A-Z0-9]+)`)

// TestAuditVerifyFileSignedHeads (docs/security.md, "Signed heads";
// docs/cli.md, exit 4): weft dev signs a run's heads with its runner key
// and prints it; `weft audit export` names the key; `weft audit verify
// --file` passes the untouched export with --trust KEY, --trust-file and
// --head VERSION:HASH from the live log, and fails, exit 4 and naming the
// event, an export whose reviewer was renamed with the chain recomputed,
// whose last event was dropped, or whose rewrite was re-signed by a
// stranger's key. Without --trust it says that anyone could have signed.
func TestAuditVerifyFileSignedHeads(t *testing.T) {
	s := natstest.Start(t)
	t.Setenv("NATS_URL", s.URL)
	t.Setenv("WEFT_MODEL", "")
	out, _ := startDevCLI(t, "dev", "--nats", s.URL)
	m := devHeadKey.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("weft dev did not print its head key:\n%s", out)
	}
	key := m[1]

	cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "sg-7")
	waitShow(t, "sg-7", "awaiting_approval")
	if code, o, errs := cli(t, "approve", "sg-7", "2/call_2_1", "--approver", "desk", "--credential", "alice"); code != 0 {
		t.Fatalf("approve: %d %s %s", code, o, errs)
	}
	waitShow(t, "sg-7", "status     finished: completed")
	_, head := audittest.WaitEndHead(t, s.Log, "sg-7")
	dir := t.TempDir()
	file := filepath.Join(dir, "sg-7.jsonl")
	if code, _, errs := cli(t, "audit", "export", "sg-7", "-o", file); code != 0 || !strings.Contains(errs, "signed heads by key "+key) {
		t.Fatalf("export: %d %s", code, errs)
	}
	trustFile := filepath.Join(dir, "trusted")
	if err := os.WriteFile(trustFile, []byte("# the runners of the demo\n"+key+" weft-dev\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Untouched: passes with the key, the trust file and the log's head.
	for _, args := range [][]string{
		{"--trust", key},
		{"--trust-file", trustFile},
		{"--head", fmt.Sprintf("%d:%s", head.Version, head.Hash)},
	} {
		code, o, errs := cli(t, append([]string{"audit", "verify", "--file", file}, args...)...)
		if code != 0 || !strings.Contains(o, "ok: run sg-7") {
			t.Fatalf("verify %v of the untouched export: %d %s %s", args, code, o, errs)
		}
		if args[0] != "--head" && !strings.Contains(o, "by trusted key "+key) {
			t.Fatalf("verify %v does not name the trusted key:\n%s", args, o)
		}
	}

	envs := readExport(t, file)
	renamed, n := audittest.Replace(envs, events.NameApprovalAnswered, `"reviewer":"alice"`, `"reviewer":"mallory"`)
	if n != 1 {
		t.Fatalf("renamed %d answers, want 1", n)
	}
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	var signedAfterAnswer uint64
	for _, env := range envs {
		if env.Type == events.NameHeadSigned && signedAfterAnswer == 0 {
			signedAfterAnswer = env.Version
		}
	}
	last := envs[len(envs)-1].Version
	for _, tc := range []struct {
		name string
		envs []events.Envelope
		want string
	}{
		{"reviewer renamed, chain recomputed", renamed, fmt.Sprintf("signature: event %d signs head %d", signedAfterAnswer, signedAfterAnswer-1)},
		{"end head dropped", envs[:len(envs)-1], fmt.Sprintf("unsigned: the run ended, but the history ends at version %d", last-1)},
		{"cut back to the answer's head", envs[:signedAfterAnswer], fmt.Sprintf("unsigned: the history ends at version %d with a signed head, but the run has not ended", signedAfterAnswer)},
		{"rewrite re-signed by a stranger", audittest.Resign(renamed, stranger, "runner-x"), fmt.Sprintf("untrusted: event %d: head %d is signed by", signedAfterAnswer, signedAfterAnswer-1)},
	} {
		edited := writeExport(t, filepath.Join(dir, "edited.jsonl"), tc.envs)
		code, o, errs := cli(t, "audit", "verify", "--file", edited, "--trust", key)
		if code != exitAudit || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s%s", tc.name, code, exitAudit, tc.want, o, errs)
		}
	}
	// A live run's export is accepted with --unfinished, which says what
	// nobody vouches for.
	cut := writeExport(t, filepath.Join(dir, "cut.jsonl"), envs[:signedAfterAnswer+1])
	if code, o, errs := cli(t, "audit", "verify", "--file", cut, "--trust", key, "--unfinished"); code != 0 || !strings.Contains(o, fmt.Sprintf("note: events %d to %d follow the last signed head (event %d)", signedAfterAnswer+1, signedAfterAnswer+1, signedAfterAnswer)) {
		t.Errorf("cut with --unfinished: exit %d\n%s%s", code, o, errs)
	}
	// --head alone fails events after the head it names, unless
	// --unfinished accepts them (and says so).
	named := envs[signedAfterAnswer-1]
	if code, _, errs := cli(t, "audit", "verify", "--file", file, "--head", fmt.Sprintf("%d:%s", named.Version, named.Hash())); code != exitAudit || !strings.Contains(errs, fmt.Sprintf("head: events %d to %d follow the head %d:", named.Version+1, last, named.Version)) {
		t.Errorf("events after the named head: exit %d %s", code, errs)
	}
	if code, o, errs := cli(t, "audit", "verify", "--file", file, "--head", fmt.Sprintf("%d:%s", named.Version, named.Hash()), "--unfinished"); code != 0 || !strings.Contains(o, fmt.Sprintf("note: events %d to %d follow the head you named", named.Version+1, last)) {
		t.Errorf("events after the named head, --unfinished: exit %d\n%s%s", code, o, errs)
	}
	// A head from the live log catches the rewrite without any key.
	edited := writeExport(t, filepath.Join(dir, "edited.jsonl"), renamed)
	if code, _, errs := cli(t, "audit", "verify", "--file", edited, "--head", fmt.Sprintf("%d:%s", head.Version, head.Hash)); code != exitAudit || !strings.Contains(errs, "head: event") {
		t.Errorf("renamed with --head: exit %d %s", code, errs)
	}
	// Without a key named, a re-signed rewrite's signatures hold but
	// prove nothing, and verify says so.
	resigned := writeExport(t, filepath.Join(dir, "resigned.jsonl"), audittest.Resign(renamed, stranger, "runner-x"))
	if code, o, _ := cli(t, "audit", "verify", "--file", resigned); code != 0 || !strings.Contains(o, "no key was named: anyone can sign") {
		t.Errorf("verify without --trust: exit %d\n%s", code, o)
	}
}

func readExport(t *testing.T, path string) []events.Envelope {
	t.Helper()
	// ReadRuns: `audit export` writes a run's void records and legal holds
	// (or a holds_unread line, for credentials that may not read them)
	// after its events.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	runs, err := audit.ReadRuns(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		return nil
	}
	if len(runs) > 1 {
		t.Fatalf("%s holds %d runs, want one", path, len(runs))
	}
	return runs[0].Events
}

func writeExport(t *testing.T, path string, envs []events.Envelope) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := audit.Export(f, envs); err != nil {
		t.Fatal(err)
	}
	return path
}
