package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/audittest"
)

// TestSecurityWhoDidIt_VerifyFileProofRemoved (docs/security.md "Who did
// it" and "Signed heads"; docs/cli.md, exit 4): on a real server — weft
// dev --secure --require-identity, whose runner signs heads with its key —
// a reconciliation signed with the deployment's person key is exported
// with its command proof; `weft audit verify --file --trust KEY` passes
// the untouched export and fails, exit 4 and naming the event, the export
// whose proof was removed from the reconciled event: as it was (the hash
// chain breaks there), with the chain recomputed (the head the runner
// signed after the reconciliation no longer matches), and with the heads
// re-signed by a stranger's key (untrusted; and without --trust the proof
// check itself fails it, `proof`: the event claims a verified identity and
// records no proof). Each lists the reconciliation unverified.
func TestSecurityWhoDidIt_VerifyFileProofRemoved(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("NATS_CREDS", "")
	t.Setenv("WEFT_MODEL", "")
	data := t.TempDir()
	out, url := startDevCLI(t, "dev", "--secure", "--require-identity", "--listen", "0", "--data", data)
	m := devHeadKey.FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("weft dev --secure did not print its head key:\n%s", out)
	}
	key := m[1]
	roles := filepath.Join(data, "roles")
	t.Setenv("NATS_URL", url)
	t.Setenv("NATS_CREDS", filepath.Join(roles, "operator.creds"))

	if code, o, errs := cli(t, "start", "payment-desk", "pay invoice INV-13", "--run", "pr-13"); code != 0 {
		t.Fatalf("start: %d %s %s", code, o, errs)
	}
	waitShow(t, "pr-13", "effect uncertain: 2/call_2_1")
	if code, o, errs := cli(t, "reconcile", "pr-13", "2/call_2_1", "--error", "the bank rejected it", "--reason", "bank ticket 7", "--signing-key", filepath.Join(roles, "approver.nk")); code != 0 {
		t.Fatalf("signed reconcile: %d %s %s", code, o, errs)
	}
	waitShow(t, "pr-13", "status     finished: ")
	dir := t.TempDir()
	file := filepath.Join(dir, "pr-13.jsonl")
	if code, _, errs := cli(t, "audit", "export", "pr-13", "-o", file); code != 0 || !strings.Contains(errs, "signed heads by key "+key) {
		t.Fatalf("export: %d %s", code, errs)
	}
	code, o, errs := cli(t, "audit", "verify", "--file", file, "--trust", key)
	if code != 0 || !strings.Contains(o, "ok: run pr-13") || !strings.Contains(o, "reconcile 2/call_2_1 (error) by demo approver (verified, key U") {
		t.Fatalf("verify the untouched export: exit %d\n%s%s", code, o, errs)
	}

	envs := readExport(t, file)
	bare := make([]events.Envelope, len(envs))
	copy(bare, envs)
	var reconciled uint64
	for i, env := range bare {
		if env.Type != events.NameReconciled {
			continue
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(env.Payload, &fields); err != nil {
			t.Fatal(err)
		}
		if _, ok := fields["proof"]; !ok {
			t.Fatalf("the exported reconciliation carries no proof: %s", env.Payload)
		}
		delete(fields, "proof")
		b, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		bare[i].Payload, reconciled = b, env.Version
	}
	if reconciled == 0 {
		t.Fatal("the export holds no reconciliation")
	}
	// The head the runner signed after the reconciliation's message.
	var signed uint64
	for _, env := range envs {
		if env.Type == events.NameHeadSigned && env.Version > reconciled && signed == 0 {
			signed = env.Version
		}
	}
	stranger, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	resigned := audittest.Resign(audittest.Rechain(bare), stranger, "runner-x")
	for _, tc := range []struct {
		name  string
		envs  []events.Envelope
		trust []string
		want  string
	}{
		{"proof removed", bare, []string{"--trust", key}, fmt.Sprintf("chain: event %d (", reconciled)},
		{"proof removed, chain recomputed", audittest.Rechain(bare), []string{"--trust", key}, fmt.Sprintf("signature: event %d signs head %d:", signed, signed-1)},
		// The proof check itself catches it, whatever the heads say: the
		// event claims a verified identity and records no proof.
		{"proof removed, chain recomputed, heads re-signed, no key named", resigned, nil, fmt.Sprintf("proof: event %d (", reconciled)},
		{"proof removed, chain recomputed, heads re-signed", resigned, []string{"--trust", key}, fmt.Sprintf("untrusted: event %d: head %d is signed by", signed, signed-1)},
	} {
		edited := writeExport(t, filepath.Join(dir, "edited.jsonl"), tc.envs)
		code, o, errs := cli(t, append([]string{"audit", "verify", "--file", edited}, tc.trust...)...)
		if code != exitAudit || !strings.Contains(errs, tc.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s%s", tc.name, code, exitAudit, tc.want, o, errs)
		}
		if !strings.Contains(o, fmt.Sprintf("event %d: reconcile 2/call_2_1 (error) by demo approver (unverified)", reconciled)) {
			t.Errorf("%s: who: does not show the reconciliation unverified:\n%s", tc.name, o)
		}
	}
}
