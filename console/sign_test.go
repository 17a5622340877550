package console_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// signAgainID is the command id of the form to send again with the proof
// pasted, on a page without the script.
var signAgainID = regexp.MustCompile(`(?s)id="sign-again".*?name="command_id" value="([^"]+)"`)

// TestSecurityWhoDidIt_ConsolePastedProof (docs/security.md, "Who did
// it"; docs/console.md): on weft dev --secure --require-identity, a page
// without its script cancels a run verified. The form with a typed name
// is refused identity_required (no_identity), and the page says why and
// shows the exact weft command that prints the proof, with a form to
// paste it into under a new command id; a pasted proof for another
// reason is refused proof_refused (other_reason), nothing recorded; the
// proof that command prints (cmd/weft's signCommand: proof.NewCommand,
// proof.SignCommand with the key) pasted cancels the run, recorded under
// the key's name, verified, with its key — never the typed name.
func TestSecurityWhoDidIt_ConsolePastedProof(t *testing.T) {
	s := secureStack(t)
	kp, pub := s.approverKey(t)
	s.start(t, "paste-7", "pay invoice INV-7", "suspended")
	form := url.Values{"command_id": {"console-paste-1"}, "run": {"paste-7"}, "reason": {"duplicate order"}, "by": {"mallory"}, "return": {"/runs/paste-7"}}

	resp, body := s.post(t, "/act/cancel", form, nil)
	page := html.UnescapeString(body)
	for _, want := range []string{
		`<code class="code">identity_required</code>`, `<code class="reason">no_identity</code>`,
		"Sign it with your key",
		"weft cancel paste-7 --reason 'duplicate order' --signing-key YOUR_KEY.nk --print-proof",
		`name="proof"`,
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("status %d: the refused page does not say %q:\n%s", resp.StatusCode, want, page)
		}
	}
	m := signAgainID.FindStringSubmatch(body)
	if m == nil || m[1] == "console-paste-1" {
		t.Fatalf("the form to send again has command id %v, want a new one (the refusal is kept for the first)", m)
	}
	form.Set("command_id", m[1])

	sign := func(reason string) string {
		p, err := proof.NewCommand(proof.CommandSubject{Command: proof.CommandCancel, Run: "paste-7", Reason: reason}, pub, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if p, err = proof.SignCommand(p, kp.Sign); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(p)
		return string(b)
	}
	form.Set("proof", sign("duplicate"))
	_, body = s.post(t, "/act/cancel", form, nil)
	if !strings.Contains(body, `<code class="code">proof_refused</code>`) || !strings.Contains(body, `<code class="reason">other_reason</code>`) {
		t.Fatalf("a proof for another reason: the page does not show proof_refused (other_reason):\n%s", body)
	}
	if n := len(s.history(t, "paste-7", events.NameCancelRequested)); n != 0 {
		t.Fatalf("%d cancellations recorded, want 0", n)
	}

	form.Set("command_id", "console-paste-3")
	form.Set("proof", "not a proof")
	if _, a := s.post(t, "/act/cancel", form, map[string]string{"Accept": "application/json"}); !strings.Contains(a, `"ok":false`) || strings.Contains(a, `"code"`) || !strings.Contains(a, "could not be read") {
		t.Fatalf("an unreadable proof answered %s, want not sent", a)
	}

	form.Set("proof", sign("duplicate order"))
	resp, body = s.post(t, "/act/cancel", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Cancelled. Signed with key "+pub+".") {
		t.Fatalf("status %d: the pasted proof did not cancel:\n%s", resp.StatusCode, body)
	}
	v := s.waitStatus(t, "paste-7", "finished")
	if c := v.Cancelled; c == nil || !c.Verified || c.Key != pub || c.By != "demo approver" || c.Reason != "duplicate order" {
		t.Fatalf("cancelled %+v, want verified by demo approver with key %s", c, pub)
	}
}

// TestSecurityWhoDidIt_ConsoleSigningStatement: "Show the signing
// command" (the field prepare) sends nothing and answers what the proof
// must state — the command, run, action, the content's canonical bytes,
// the reason — and the weft command that prints it, quoted for a shell.
func TestSecurityWhoDidIt_ConsoleSigningStatement(t *testing.T) {
	s := secureStack(t)
	form := url.Values{"command_id": {"console-stmt-1"}, "run": {"stmt-7"}, "action": {"2/call_2_1"}, "stored": {"true"}, "kind": {"error"},
		"error": {"the bank's answer: <rejected>"}, "reason": {"bank ticket 7"}, "prepare": {"command"}, "return": {"/"}}
	resp, a := s.post(t, "/act/reconcile", form, map[string]string{"Accept": "application/json"})
	var ans struct {
		OK     bool   `json:"ok"`
		Code   string `json:"code"`
		NextID string `json:"next_command_id"`
		Sign   struct {
			Command, Run, Action, Content, Reason, Weft string
			Now                                         int64
			Lifetime                                    int
		} `json:"sign"`
	}
	if err := json.Unmarshal([]byte(a), &ans); err != nil {
		t.Fatal(err)
	}
	st := ans.Sign
	if resp.StatusCode != http.StatusOK || ans.OK || ans.Code != "" || ans.NextID != "" {
		t.Fatalf("status %d, answer %s: want the statement, nothing sent, the command id kept", resp.StatusCode, a)
	}
	if st.Command != proof.CommandReconcileStored || st.Run != "stmt-7" || st.Action != "2/call_2_1" || st.Reason != "bank ticket 7" ||
		st.Content != `{"error":"the bank's answer: \u003crejected\u003e"}` {
		t.Errorf("statement %+v", st)
	}
	if want := `weft reconcile stmt-7 2/call_2_1 --error 'the bank'\''s answer: <rejected>' --stored --reason 'bank ticket 7' --signing-key YOUR_KEY.nk --print-proof`; st.Weft != want {
		t.Errorf("weft command\n%s\nwant\n%s", st.Weft, want)
	}
	if d := time.Since(time.UnixMilli(st.Now)); d < 0 || d > time.Minute {
		t.Errorf("now %d is not the console's clock", st.Now)
	}
	if st.Lifetime != 30 {
		t.Errorf("lifetime %d s, want 30 (well within the person keys' default of 60 s)", st.Lifetime)
	}
	form.Set("kind", "output")
	form.Set("out_mode", "raw")
	form.Set("out_json", `{ "id": "PAY-7",  "status": "sent" }`)
	form.Set("stored", "false")
	_, a = s.post(t, "/act/reconcile", form, map[string]string{"Accept": "application/json"})
	if err := json.Unmarshal([]byte(a), &ans); err != nil {
		t.Fatal(err)
	}
	if want := `weft reconcile stmt-7 2/call_2_1 --output '{"id":"PAY-7","status":"sent"}' --reason 'bank ticket 7' --signing-key YOUR_KEY.nk --print-proof`; ans.Sign.Weft != want || ans.Sign.Command != proof.CommandReconcile {
		t.Errorf("weft command\n%s\nwant\n%s", ans.Sign.Weft, want)
	}
}
