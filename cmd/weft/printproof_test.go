package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// TestSecurityWhoDidIt_PrintProof (docs/security.md, "Who did it"):
// --print-proof prints the signed command proof of exactly the command
// the line states — its content as the command would send it, its reason,
// the key's public key — and sends nothing (no server is needed): the
// console's form without its script takes the proof pasted.
func TestSecurityWhoDidIt_PrintProof(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	key := filepath.Join(t.TempDir(), "alice.nk")
	if err := os.WriteFile(key, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		s    proof.CommandSubject
	}{
		{[]string{"reconcile", "pp-1", "2/call_2_1", "--output", `{"id":"PAY-1", "status":"sent"}`, "--stored", "--reason", "bank ticket 7"},
			proof.CommandSubject{Command: proof.CommandReconcileStored, Run: "pp-1", Action: "2/call_2_1", Content: json.RawMessage(`{"id":"PAY-1","status":"sent"}`), Reason: "bank ticket 7"}},
		{[]string{"resolve", "pp-1", "2/call_2_1", "--error", "never received"},
			proof.CommandSubject{Command: proof.CommandResolve, Run: "pp-1", Action: "2/call_2_1", Content: json.RawMessage(`{"error":"never received"}`)}},
		{[]string{"cancel", "pp-1", "--reason", "duplicate"}, proof.CommandSubject{Command: proof.CommandCancel, Run: "pp-1", Reason: "duplicate"}},
		{[]string{"pause", "pp-1", "--reason", "vendor"}, proof.CommandSubject{Command: proof.CommandPause, Run: "pp-1", Reason: "vendor"}},
		{[]string{"resume", "pp-1"}, proof.CommandSubject{Command: proof.CommandResume, Run: "pp-1"}},
	} {
		args := append([]string{"--nats", "nats://127.0.0.1:1"}, c.args...)
		args = append(args, "--signing-key", key, "--print-proof")
		code, out, errs := cli(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
		var p events.CommandProof
		if err := json.Unmarshal([]byte(out), &p); err != nil || strings.Count(out, "\n") != 1 {
			t.Fatalf("%v: stdout is not one proof: %q (%v)", c.args, out, err)
		}
		if p.Key != pub {
			t.Errorf("%v: key %s, want %s", c.args, p.Key, pub)
		}
		if err := proof.CheckCommand(p, c.s, time.Now()); err != nil {
			t.Errorf("%v: the printed proof does not state the command: %v", c.args, err)
		}
	}
	if code, _, errs := cli(t, "cancel", "pp-1", "--print-proof"); code != 2 || !strings.Contains(errs, "--print-proof needs --signing-key") {
		t.Errorf("--print-proof without a key: exit %d %s, want a bad command line", code, errs)
	}
}
