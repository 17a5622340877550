package console_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/proof"
)

// signAgainID is the command id of the form to send again with the proof
// pasted, on a page without the script.
var signAgainID = regexp.MustCompile(`(?s)id="sign-again".*?name="command_id" value="([^"]+)"`)

// signAgainField is a hidden field (name, value) of a form.
var signAgainField = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

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
	kp, pub := s.ApproverKey(t)
	s.Start(t, "paste-7", "pay invoice INV-7", "suspended")
	// "extra" stands for a field a form may gain: the form to send again
	// carries every field sent, whatever its name.
	form := url.Values{"command_id": {"console-paste-1"}, "run": {"paste-7"}, "reason": {"duplicate order"}, "by": {"mallory"}, "return": {"/runs/paste-7"}, "extra": {"kept"}}

	resp, body := s.post(t, "/act/cancel", form, nil)
	page := html.UnescapeString(body)
	for _, want := range []string{
		`<code class="code">identity_required</code>`, `<code class="reason">no_identity</code>`,
		"Sign it with your key",
		"weft cancel paste-7 --reason 'duplicate order' --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof",
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
	again := url.Values{}
	signAgain, _, _ := strings.Cut(body[strings.Index(body, `id="sign-again"`):], "</form>")
	for _, f := range signAgainField.FindAllStringSubmatch(signAgain, -1) {
		again.Set(html.UnescapeString(f[1]), html.UnescapeString(f[2]))
	}
	if again.Encode() != form.Encode() {
		t.Fatalf("the form to send again carries %v, want %v", again, form)
	}

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
	if n := len(s.History(t, "paste-7", events.NameCancelRequested)); n != 0 {
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
	v := s.WaitStatus(t, "paste-7", "finished")
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
	if want := `weft reconcile stmt-7 2/call_2_1 --error 'the bank'\''s answer: <rejected>' --stored --reason 'bank ticket 7' --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof`; st.Weft != want {
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
	if want := `weft reconcile stmt-7 2/call_2_1 --output '{"id":"PAY-7","status":"sent"}' --reason 'bank ticket 7' --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof`; ans.Sign.Weft != want || ans.Sign.Command != proof.CommandReconcile {
		t.Errorf("weft command\n%s\nwant\n%s", ans.Sign.Weft, want)
	}
}

// TestSecurityWhoDidIt_ConsolePrintedCommandSigns (docs/security.md, "Who
// did it"; docs/console.md): the weft command the console shows for a
// person's command signs exactly what the console sends. For each form —
// a reconcile as a failure (--error), as unconfirmed (--unconfirmed),
// as raw output that only --output reproduces byte for byte
// ({"error":"caf\u00e9"}: --error 'café' would sign other content), and
// the resolution of the open question — the test runs the line the
// statement shows, with the key file, through the weft binary (its
// --print-proof), pastes what it printed into the form and sends it: the
// command is recorded, signed with the key.
func TestSecurityWhoDidIt_ConsolePrintedCommandSigns(t *testing.T) {
	s := secureStack(t)
	_, pub := s.ApproverKey(t)
	bin := weftBinary(t)
	key := filepath.Join(s.Roles, demo.ApproverKeyFile)
	accept := map[string]string{"Accept": "application/json"}
	// signAndSend asks the console for the statement of form, runs the
	// command it shows and sends form with the printed proof pasted.
	signAndSend := func(path string, form url.Values, wantFlag string) {
		t.Helper()
		form.Set("prepare", "command")
		_, a := s.post(t, path, form, accept)
		var ans struct {
			Sign struct{ Weft string } `json:"sign"`
		}
		if err := json.Unmarshal([]byte(a), &ans); err != nil || ans.Sign.Weft == "" {
			t.Fatalf("%s: no statement: %s (%v)", form.Get("command_id"), a, err)
		}
		line := ans.Sign.Weft
		cmd := exec.Command("sh", "-c", strings.Replace(line, "YOUR_KEY.nk", "'"+key+"'", 1))
		cmd.Env = []string{"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %s: %v\n%s", form.Get("command_id"), line, err, stderr.String())
		}
		form.Del("prepare")
		form.Set("proof", strings.TrimSpace(string(out)))
		if _, a = s.post(t, path, form, accept); !strings.Contains(a, `"ok":true`) || !strings.Contains(a, "Signed with key "+pub+".") {
			t.Fatalf("%s: the proof %s printed was not accepted: %s", form.Get("command_id"), line, a)
		}
		if !strings.Contains(line, " "+wantFlag+" ") {
			t.Errorf("%s: the command %q does not use %s", form.Get("command_id"), line, wantFlag)
		}
	}
	reconcile := func(run, id string, fields ...string) url.Values {
		f := url.Values{"command_id": {id}, "run": {run}, "action": {"2/call_2_1"}, "reason": {"bank ticket 7"}, "return": {"/"}}
		for i := 0; i+1 < len(fields); i += 2 {
			f.Set(fields[i], fields[i+1])
		}
		return f
	}

	s.Start(t, "pc-err", "pay invoice INV-13", "suspended")
	signAndSend("/act/reconcile", reconcile("pc-err", "console-pc-1", "kind", "error", "error", "the bank's answer: <rejected> café"), "--error")
	s.Start(t, "pc-raw", "pay invoice INV-13", "suspended")
	signAndSend("/act/reconcile", reconcile("pc-raw", "console-pc-2", "kind", "output", "out_mode", "raw", "out_json", `{"error":"caf\u00e9"}`), "--output")
	s.Start(t, "pc-q", "pay invoice INV-13", "suspended")
	signAndSend("/act/reconcile", reconcile("pc-q", "console-pc-3", "kind", "unconfirmed", "note", "asking the bank"), "--unconfirmed")
	s.WaitStatus(t, "pc-q", "finished")
	signAndSend("/act/resolve", reconcile("pc-q", "console-pc-4", "kind", "error", "error", "never received"), "--error")

	for run, want := range map[string]string{"pc-err": `{"error":"the bank's answer: \u003crejected\u003e café"}`, "pc-raw": `{"error":"caf\u00e9"}`, "pc-q": `{"unconfirmed":"asking the bank"}`} {
		a := action(t, s.WaitStatus(t, run, "finished"), "2/call_2_1")
		if a.Result != want {
			t.Errorf("%s: result %s, want %s", run, a.Result, want)
		}
		if run == "pc-q" {
			if q := a.Question; q == nil || q.Resolution == nil || q.Resolution.Result != `{"error":"never received"}` || !q.Resolution.Verified {
				t.Errorf("pc-q: question %+v, want resolved as never received, verified", q)
			}
		}
	}
}

// signingInput is an input of a page that holds a signing key: the seed
// typed, or the key file chosen.
var signingInput = regexp.MustCompile(`<input[^>]*\bdata-signing-(?:key|file)\b[^>]*>`)

// TestSecurityWhoDidIt_ConsoleKeyFieldsHaveNoName (docs/security.md, "Who
// did it"; docs/console.md): on weft dev --secure --require-identity, no
// input that holds a signing key — on the approval and uncertain cards of
// the inbox, and on a run page's cancel, pause and resume forms — has a
// name, so no form the page sends (FormData, or the form without its
// script) ever carries a seed or a key file.
func TestSecurityWhoDidIt_ConsoleKeyFieldsHaveNoName(t *testing.T) {
	s := secureStack(t)
	s.Start(t, "nn-7", "pay invoice INV-7", "suspended")
	s.Start(t, "nn-13", "pay invoice INV-13", "suspended")
	for _, path := range []string{"/", "/runs/nn-7", "/runs/nn-13"} {
		_, body := s.Get(t, path)
		inputs := signingInput.FindAllString(body, -1)
		if len(inputs) == 0 {
			t.Fatalf("%s has no signing key input", path)
		}
		for _, in := range inputs {
			if regexp.MustCompile(`\sname=`).MatchString(in) {
				t.Errorf("%s: a signing key input has a name: %s", path, in)
			}
		}
	}
}

// TestSecurityWhoDidIt_ConsoleNoReasonNoStatement (docs/security.md, "Who
// did it"): on weft dev --secure --require-identity, an unsigned form
// without a reason is refused identity_required (no_identity) and the
// page says a reason is required too — it shows no signing command and no
// form to paste a proof into, whose proof (with no reason) would only be
// refused no_reason.
func TestSecurityWhoDidIt_ConsoleNoReasonNoStatement(t *testing.T) {
	s := secureStack(t)
	s.Start(t, "nr-7", "pay invoice INV-7", "suspended")
	form := url.Values{"command_id": {"console-nr-1"}, "run": {"nr-7"}, "by": {"mallory"}, "return": {"/runs/nr-7"}}
	_, body := s.post(t, "/act/cancel", form, nil)
	page := html.UnescapeString(body)
	if !strings.Contains(page, `<code class="reason">no_identity</code>`) || !strings.Contains(page, "also requires a reason") {
		t.Fatalf("the refused page does not say a reason is required:\n%s", page)
	}
	// (the approval card's weft approve --args line names YOUR_KEY.nk too:
	// a signing statement's command is the one with --proof-ttl)
	if strings.Contains(page, "YOUR_KEY.nk --proof-ttl") || strings.Contains(page, `id="sign-again"`) {
		t.Fatalf("the refused page shows a signing command for a command without a reason:\n%s", page)
	}
}
