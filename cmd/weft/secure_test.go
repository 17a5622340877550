package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDevSecure: weft dev --secure starts the embedded server
// with the roles and prints each role's credentials file; with the
// operator's, weft starts a run and approves it with a signed proof (the
// agent's only approver takes signed proofs), weft show names the key and
// says the proof verifies, and weft audit verify re-checks it; the
// reader's credentials cannot approve (permission_denied, exit 7), and without
// credentials nothing connects. A hold and a restart signed with the person
// key are recorded verified, and hold list, show and audit verify say so.
func TestDevSecure(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CREDS", "")
	t.Setenv("WEFT_MODEL", "")
	data := t.TempDir()
	out, url := startDevCLI(t, "dev", "--secure", "--listen", "0", "--data", data)
	dir := filepath.Join(data, "roles")
	operator, reader, key := filepath.Join(dir, "operator.creds"), filepath.Join(dir, "reader.creds"), filepath.Join(dir, "approver.nk")
	for _, want := range []string{"in secure mode", operator, reader, filepath.Join(dir, "runner.creds"), filepath.Join(dir, "projector.creds"), key, "--signing-key " + key} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("weft dev --secure does not print %q:\n%s", want, out)
		}
	}
	t.Setenv("NATS_URL", url)

	// No credentials: the server lets nobody in.
	if code, o, errs := cli(t, "--nats", url, "runs", "--timeout", "3s"); code != exitUnavailable {
		t.Fatalf("runs without credentials: exit %d, want %d\n%s%s", code, exitUnavailable, o, errs)
	}

	t.Setenv("NATS_CREDS", operator)
	if code, o, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "pay-7"); code != 0 {
		t.Fatalf("start as the operator: %d %s %s", code, o, errs)
	}
	waitShow(t, "pay-7", "waiting for approval")

	// The reader may not approve: the server refuses its publish, and the
	// CLI says so at once — permission_denied, exit 7, naming the subject
	// and the role that may — rather than waiting out its deadline (a
	// minute here: a wait would end in exit 6, no answer).
	if code, o, errs := cli(t, "approve", "pay-7", "2/call_2_1", "--approver", "keys", "--signing-key", key, "--creds", reader, "--timeout", "1m", "--no-retry"); code != exitDenied || !strings.Contains(errs, "permission_denied") || !strings.Contains(errs, "weft.api.approve") || !strings.Contains(errs, "role operator") {
		t.Fatalf("approve as the reader: exit %d, want %d (permission_denied, at once)\n%s%s", code, exitDenied, o, errs)
	}
	// Start and cancel are the operator's too: refused at once, naming
	// the subject and the role (the same api.Request path, through
	// package client).
	for _, c := range []struct {
		subject string
		args    []string
	}{
		{"weft.api.start", []string{"start", "payment-desk", "pay invoice INV-8", "--run", "pay-8"}},
		{"weft.api.cancel", []string{"cancel", "pay-7", "--reason", "no", "--by", "reader"}},
	} {
		args := append(c.args, "--creds", reader, "--timeout", "1m", "--no-retry")
		if code, o, errs := cli(t, args...); code != exitDenied || !strings.Contains(errs, "permission_denied") || !strings.Contains(errs, c.subject+"; the credentials of role operator may") {
			t.Fatalf("%s as the reader: exit %d, want %d (permission_denied naming %s and role operator, at once)\n%s%s", c.args[0], code, exitDenied, c.subject, o, errs)
		}
	}
	waitShow(t, "pay-7", "waiting for approval")
	// The demo's trusting approver is not there in secure mode.
	if code, o, errs := cli(t, "approve", "pay-7", "2/call_2_1", "--approver", "desk", "--credential", "alice"); code != exitFailed || !strings.Contains(errs, "proof_refused") {
		t.Fatalf("approve with the trusting approver: exit %d\n%s%s", code, o, errs)
	}
	code, o, errs := cli(t, "approve", "pay-7", "2/call_2_1", "--approver", "keys", "--signing-key", key)
	if code != 0 || !strings.Contains(errs, "signing: approve run pay-7 action 2/call_2_1 revision 1 (finance v1): send_payment") {
		t.Fatalf("signed approve: %d %s %s", code, o, errs)
	}
	show := waitShow(t, "pay-7", "finished: completed")
	if !strings.Contains(show, "2/call_2_1 revision 1: approve by demo approver (verified, key U") || !strings.Contains(show, "verified by approver keys; signed by key U") || !strings.Contains(show, "the proof verifies") {
		t.Fatalf("show does not name the key and the verified proof:\n%s", show)
	}
	if code, o, errs := cli(t, "audit", "verify", "pay-7"); code != 0 || !strings.Contains(o, "proof: event") || !strings.Contains(o, ": verifies") {
		t.Fatalf("audit verify: %d %s %s", code, o, errs)
	}
	// The custodian's legal hold goes through the command API
	// (weft.api.hold), which dev's runner serves; the operator's is not
	// allowed, naming the role that may.
	custodian := filepath.Join(dir, "custodian.creds")
	if code, o, errs := cli(t, "hold", "pay-7", "--reason", "dispute D-17", "--by", "legal", "--creds", custodian); code != 0 || !strings.Contains(o, "held pay-7 (hold h1) by legal (unverified): dispute D-17") {
		t.Fatalf("hold as the custodian: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := cli(t, "hold", "pay-7", "--reason", "dispute D-17", "--by", "ops"); code != exitDenied || !strings.Contains(errs, "weft.api.hold") || !strings.Contains(errs, "role custodian") {
		t.Fatalf("hold as the operator: exit %d, want %d\n%s%s", code, exitDenied, o, errs)
	}
	// Signed with the person key (docs/security.md, "Who did it"): the
	// hold and a restart record the key's person, verified, with the key;
	// show and audit verify name them.
	if code, o, errs := cli(t, "hold", "pay-7", "--reason", "subpoena S-3", "--signing-key", key, "--creds", custodian); code != 0 || !strings.Contains(o, "held pay-7 (hold h2) by demo approver (verified, key U") {
		t.Fatalf("signed hold: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := cli(t, "hold", "list", "--creds", custodian); code != 0 || !strings.Contains(o, "demo approver (verified, key U") || !strings.Contains(o, "legal (unverified)") {
		t.Fatalf("hold list: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := cli(t, "restart", "pay-7", "--from-turn", "1", "--run", "pay-7r", "--reason", "tool fixed", "--by", "mallory", "--signing-key", key); code != 0 || !strings.Contains(errs, "signing: restart run pay-7") {
		t.Fatalf("signed restart: exit %d\n%s%s", code, o, errs)
	}
	if show := waitShow(t, "pay-7r", "restarted  by demo approver (verified, key U"); !strings.Contains(show, ": tool fixed") || strings.Contains(show, "mallory") {
		t.Fatalf("show of the restart does not name the key's person and the reason:\n%s", show)
	}
	if code, o, errs := cli(t, "audit", "verify", "pay-7r"); code != 0 || !strings.Contains(o, "restart from pay-7 turn 1 by demo approver (verified, key U") {
		t.Fatalf("audit verify of the restart: %d %s %s", code, o, errs)
	}
}

// TestRolesCommand: weft roles init writes the authority and each role's
// creds file (a worker's per --worker queue), issue adds one more, show
// prints a role's subjects, key writes a signing key and prints its public
// key; a malformed queue is a bad command line.
func TestRolesCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "secure")
	code, out, errs := cli(t, "roles", "init", "--dir", dir, "--worker", "payment-desk@1/send_payment")
	if code != 0 {
		t.Fatalf("init: %d %s %s", code, out, errs)
	}
	for _, f := range []string{"auth.conf", "operator.nk", "account.nk", "runner.creds", "projector.creds", "operator.creds", "reader.creds", "worker-payment-desk@1@send_payment.creds"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("init wrote no %s: %v\n%s", f, err, out)
		}
	}
	if code, out, errs := cli(t, "roles", "issue", "worker", "payment-desk@2.0/send_payment", "--dir", dir, "--expires", "1h"); code != 0 || !strings.Contains(out, "worker-payment-desk@2~0@send_payment.creds") {
		t.Fatalf("issue: %d %s %s", code, out, errs)
	}
	if code, out, _ := cli(t, "roles", "show", "worker", "payment-desk@1/send_payment"); code != 0 || !strings.Contains(out, "  weft.api.report.payment-desk.1.send_payment\n") || strings.Contains(out, "weft.ev.") {
		t.Fatalf("show worker: %d\n%s", code, out)
	}
	key := filepath.Join(t.TempDir(), "alice.nk")
	if code, out, errs := cli(t, "roles", "key", key); code != 0 || !strings.Contains(out, "public key U") {
		t.Fatalf("key: %d %s %s", code, out, errs)
	}
	if code, _, _ := cli(t, "roles", "key", key); code != exitLocal {
		t.Errorf("key over an existing file: exit %d, want %d", code, exitLocal)
	}
	if code, _, errs := cli(t, "roles", "issue", "worker", "send_payment", "--dir", dir); code != exitUsage {
		t.Errorf("issue worker without a queue: exit %d %s", code, errs)
	}
	if code, out, errs := cli(t, "roles", "revoke", filepath.Join(dir, "reader.creds"), "--dir", dir); code != 0 || !strings.Contains(out, "revoked user U") {
		t.Fatalf("revoke: %d %s %s", code, out, errs)
	}
}

// TestSecurityWhoDidIt_DevSecureRequired (docs/security.md "Who did it";
// docs/semantics.md §10 reconciliation, §7 cancellation): weft dev --secure
// --require-identity, with the JWT roles; as the operator, a reconcile
// without a signed proof is refused identity_required, one signed by a key
// the deployment does not list proof_refused(not_authenticated), one
// signed with the approver key (the demo's person key) without a reason
// identity_required(no_reason); signed and with a reason it is recorded
// verified under the key's name — weft show and weft audit verify say
// "by demo approver (verified, key U…)"; a signed cancel is verified too.
func TestSecurityWhoDidIt_DevSecureRequired(t *testing.T) {
	key, stranger := devSecureRequired(t)
	for _, run := range []string{"pay-13", "pay-7"} {
		input := map[string]string{"pay-13": "pay invoice INV-13", "pay-7": "pay invoice INV-7"}[run]
		if code, o, errs := cli(t, "start", "payment-desk", input, "--run", run); code != 0 {
			t.Fatalf("start %s: %d %s %s", run, code, o, errs)
		}
	}
	waitShow(t, "pay-13", "uncertain")
	reconcile := func(extra ...string) (int, string, string) {
		return cli(t, append([]string{"reconcile", "pay-13", "2/call_2_1", "--error", "the bank rejected it", "--by", "mallory"}, extra...)...)
	}
	if code, o, errs := reconcile("--reason", "bank ticket 7"); code != exitFailed || !strings.Contains(errs, "identity_required(no_identity)") {
		t.Fatalf("reconcile with a typed name only: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := reconcile("--reason", "bank ticket 7", "--signing-key", stranger); code != exitFailed || !strings.Contains(errs, "proof_refused(not_authenticated)") {
		t.Fatalf("reconcile signed by a stranger: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := reconcile("--signing-key", key); code != exitFailed || !strings.Contains(errs, "identity_required(no_reason)") {
		t.Fatalf("reconcile without a reason: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := reconcile("--reason", "bank ticket 7", "--signing-key", key); code != 0 || !strings.Contains(errs, "signing: reconcile run pay-13 action 2/call_2_1") {
		t.Fatalf("signed reconcile: exit %d\n%s%s", code, o, errs)
	}
	show := waitShow(t, "pay-13", "reconciled by demo approver (verified, key U")
	if strings.Contains(show, "mallory") || !strings.Contains(show, `reason "bank ticket 7"`) {
		t.Fatalf("show names the typed name or not the reason:\n%s", show)
	}
	waitShow(t, "pay-7", "waiting for approval")
	if code, o, errs := cli(t, "cancel", "pay-7", "--reason", "duplicate", "--signing-key", key); code != 0 {
		t.Fatalf("signed cancel: exit %d\n%s%s", code, o, errs)
	}
	waitShow(t, "pay-7", "cancelled by demo approver (verified, key U")
	code, o, errs := cli(t, "audit", "verify", "pay-7")
	if code != 0 || !strings.Contains(o, "who:") || !strings.Contains(o, `cancel by demo approver (verified, key U`) {
		t.Fatalf("audit verify: %d %s %s", code, o, errs)
	}
}

// TestSecurityWhoDidIt_DevSecurePauseAndResume (docs/security.md "Who did
// it"; docs/semantics.md §13): weft dev --secure --require-identity, as the
// operator, weft pause is refused identity_required without --signing-key
// and proof_refused(not_authenticated) signed by a key the deployment does
// not list; signed with the demo's person key it pauses the run and weft
// show says "paused since … by demo approver (verified, key U…)"; a signed
// resume resumes it, and weft audit verify re-checks both proofs and lists
// them verified.
func TestSecurityWhoDidIt_DevSecurePauseAndResume(t *testing.T) {
	key, stranger := devSecureRequired(t)
	if code, o, errs := cli(t, "start", "payment-desk", "pay invoice INV-7", "--run", "pay-7"); code != 0 {
		t.Fatalf("start: %d %s %s", code, o, errs)
	}
	waitShow(t, "pay-7", "waiting for approval")
	pause := func(extra ...string) (int, string, string) {
		return cli(t, append([]string{"pause", "pay-7", "--reason", "checking the vendor", "--by", "mallory"}, extra...)...)
	}
	if code, o, errs := pause(); code != exitFailed || !strings.Contains(errs, "identity_required(no_identity)") {
		t.Fatalf("pause with a typed name only: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := pause("--signing-key", stranger); code != exitFailed || !strings.Contains(errs, "proof_refused(not_authenticated)") {
		t.Fatalf("pause signed by a stranger: exit %d\n%s%s", code, o, errs)
	}
	if code, o, errs := pause("--signing-key", key); code != 0 || !strings.Contains(errs, "signing: pause run pay-7") {
		t.Fatalf("signed pause: exit %d\n%s%s", code, o, errs)
	}
	show := waitShow(t, "pay-7", "by demo approver (verified, key U")
	if !strings.Contains(show, "paused     since ") || strings.Contains(show, "mallory") {
		t.Fatalf("show does not say who paused, verified, or names the typed name:\n%s", show)
	}
	if code, o, errs := cli(t, "resume", "pay-7", "--reason", "vendor confirmed", "--signing-key", key); code != 0 {
		t.Fatalf("signed resume: exit %d\n%s%s", code, o, errs)
	}
	code, o, errs := cli(t, "audit", "verify", "pay-7")
	if code != 0 || !strings.Contains(o, "pause by demo approver (verified, key U") || !strings.Contains(o, "resume by demo approver (verified, key U") {
		t.Fatalf("audit verify: %d %s %s", code, o, errs)
	}
}

// devSecureRequired runs `weft dev --secure --require-identity` and points
// the CLI at it as the operator; it returns the person key of the
// deployment (its approver key) and a key of no one's.
func devSecureRequired(t *testing.T) (key, stranger string) {
	t.Helper()
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CREDS", "")
	t.Setenv("WEFT_MODEL", "")
	data := t.TempDir()
	_, url := startDevCLI(t, "dev", "--secure", "--require-identity", "--listen", "0", "--data", data)
	dir := filepath.Join(data, "roles")
	key = filepath.Join(dir, "approver.nk")
	stranger = filepath.Join(t.TempDir(), "mallory.nk")
	if code, o, errs := cli(t, "roles", "key", stranger); code != 0 {
		t.Fatalf("roles key: %d %s %s", code, o, errs)
	}
	t.Setenv("NATS_URL", url)
	t.Setenv("NATS_CREDS", filepath.Join(dir, "operator.creds"))
	return key, stranger
}

var securePrintedCode = regexp.MustCompile(`\(([a-z_]+), exit (\d+)\)`)

// TestDevSecurePrintedStepsWorkVerbatim (docs/security.md, the roles;
// demo): every step weft dev --secure prints under "Try it" works verbatim,
// run in the printed order, with the printed outcome: exit 0 unless its
// comment names another, such as the reader's approve, refused with
// permission_denied and exit 7 while the approval is still pending (after
// the operator's approve it would fail the CLI's own lookup instead,
// wrong_reference and exit 1, and show nothing about the reader's role).
func TestDevSecurePrintedStepsWorkVerbatim(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CREDS", "")
	t.Setenv("WEFT_MODEL", "")
	out, _ := startDevCLI(t, "dev", "--secure", "--listen", "0", "--data", t.TempDir())
	text := out.String()
	_, block, ok := strings.Cut(text, "Try it (another terminal):\n\n")
	if ok {
		block, _, ok = strings.Cut(block, "\n\n")
	}
	if !ok {
		t.Fatalf("weft dev --secure prints no steps:\n%s", text)
	}
	lines := strings.Split(block, "\n")
	var weftCmd string // how the steps call weft: the word(s) before " start "
	for _, l := range lines {
		if before, _, ok := strings.Cut(strings.TrimSpace(l), " start "); ok {
			weftCmd = before
			break
		}
	}
	if weftCmd == "" {
		t.Fatalf("no start step:\n%s", block)
	}
	denied := false
	for _, l := range lines {
		step := strings.TrimSpace(l)
		cmdText, comment, _ := strings.Cut(step, "   # ")
		cmdText = strings.TrimSpace(cmdText)
		if vars, ok := strings.CutPrefix(cmdText, "export "); ok {
			for _, kv := range strings.Fields(vars) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			continue
		}
		env := map[string]string{}
		for !strings.HasPrefix(cmdText, weftCmd+" ") {
			kv, rest, ok := strings.Cut(cmdText, " ")
			k, v, isVar := strings.Cut(kv, "=")
			if !ok || !isVar {
				t.Fatalf("step %q: neither VAR=value nor %s", step, weftCmd)
			}
			env[k], cmdText = v, rest
		}
		args := shellWords(t, strings.TrimPrefix(cmdText, weftCmd+" "))
		wantCode, wantErr := 0, ""
		if m := securePrintedCode.FindStringSubmatch(comment); m != nil {
			wantErr = m[1]
			wantCode, _ = strconv.Atoi(m[2])
		}
		code, o, errs := cliEnv(t, env, args...)
		if code != wantCode || !strings.Contains(errs, wantErr) {
			t.Fatalf("step %q: exit %d, want %d %s\n%s%s", step, code, wantCode, wantErr, o, errs)
		}
		if wantErr == "permission_denied" {
			denied = true
		}
	}
	if !denied {
		t.Fatalf("no printed step shows a refused role (permission_denied):\n%s", block)
	}
}

// cliEnv runs the CLI as cli does with the environment variables env set
// for this command only (a step's VAR=value prefix).
func cliEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	old := map[string]*string{}
	for k, v := range env {
		if was, ok := os.LookupEnv(k); ok {
			old[k] = &was
		} else {
			old[k] = nil
		}
		if err := os.Setenv(k, v); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for k, v := range old {
			if v == nil {
				_ = os.Unsetenv(k)
			} else {
				_ = os.Setenv(k, *v)
			}
		}
	}()
	return cli(t, args...)
}

// shellWords splits a printed command line into its words as a POSIX
// shell does for the steps' quoting: words separated by spaces, "…"
// quoting a word with spaces.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}
