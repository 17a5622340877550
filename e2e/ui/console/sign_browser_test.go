package console_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/console"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/natsnode"
	"github.com/weftrun/weft/roles"
)

// TestSecurityWhoDidIt_ConsoleSignsInTheBrowser (docs/security.md, "Who
// did it"; docs/console.md): on weft dev --secure --require-identity, the
// run page's cancel form signs the command in the browser with the
// person's key. A typed name alone is refused identity_required
// (no_identity) and the page says why and shows the weft command that
// signs it; a key that is not a person key is refused proof_refused
// (not_authenticated); a seed with a changed character is not sent
// (its checksum); a statement altered on its way to the page (the
// reason) gets a proof the runner refuses, proof_refused (other_reason);
// the person key, chosen as a file, cancels the run, recorded verified
// under the key's name with its key, never the typed name. No request
// carries a seed, and the key's fields are emptied once a signed command
// is sent, refused or done.
func TestSecurityWhoDidIt_ConsoleSignsInTheBrowser(t *testing.T) {
	s := secureStack(t)
	keyFile := filepath.Join(s.Roles, demo.ApproverKeyFile)
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimSpace(string(raw))
	_, pub := s.ApproverKey(t)
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()
	// A seed with one character changed: its checksum fails.
	broken := []byte(seed)
	if broken[10] == 'A' {
		broken[10] = 'B'
	} else {
		broken[10] = 'A'
	}

	s.Start(t, "bsig-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	const form = "#run-cancel form"
	const code = form + ` [data-result] code.code`
	result := func(want string) chromedp.Action[chromedp.Void] {
		return waitJS(`(document.querySelector("` + form + ` [data-result]")||{}).textContent.includes(` + jsString(want) + `)`)
	}
	setKey := func(v string) {
		js[bool](t, ctx, `(() => { document.querySelector("#c-signing-key").value = `+jsString(v)+`; return true })()`)
	}
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/bsig-7"), chromedp.WaitVisible(chromedp.CSS(form+` button.danger`)))
	js[bool](t, ctx, recordPosts)

	do(t, ctx, "cancel with a typed name",
		typeIn(`#c-reason`, "duplicate order"), typeIn(`#c-by`, "mallory"),
		chromedp.Click(chromedp.CSS(form+` button.danger`)),
		waitJS(`!!document.querySelector("`+code+`")`))
	if c, r := get(t, ctx, "code", chromedp.Text(chromedp.CSS(code))), get(t, ctx, "reason", chromedp.Text(chromedp.CSS(form+` [data-result] code.reason`))); c != "identity_required" || r != "no_identity" {
		t.Fatalf("a typed name shows %q (%q), want identity_required (no_identity)", c, r)
	}
	if cmd := get(t, ctx, "weft command", chromedp.Text(chromedp.CSS(form+` [data-result] [data-weft-command]`))); cmd != "weft cancel bsig-7 --reason 'duplicate order' --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof" {
		t.Errorf("the refusal shows the command %q", cmd)
	}
	if !js[bool](t, ctx, `document.querySelector("`+form+` details.signing").open`) {
		t.Error("the refusal does not open “Sign with your key”")
	}
	saveShot(t, "cancel-signing.png", get(t, ctx, "signing screenshot", chromedp.Screenshot(chromedp.CSS("#run-cancel"))))

	setKey(string(strangerSeed))
	do(t, ctx, "cancel with a key that is not a person key", chromedp.Click(chromedp.CSS(form+` button.danger`)),
		waitJS(`(document.querySelector("`+code+`")||{}).textContent === "proof_refused"`))
	if r := get(t, ctx, "reason", chromedp.Text(chromedp.CSS(form+` [data-result] code.reason`))); r != "not_authenticated" {
		t.Fatalf("a stranger's key shows proof_refused (%q), want not_authenticated", r)
	}
	if v := get(t, ctx, "key field", chromedp.Value(chromedp.CSS(`#c-signing-key`))); v != "" {
		t.Error("the seed stays in its field after a refusal")
	}

	setKey(string(broken))
	do(t, ctx, "cancel with a broken seed", chromedp.Click(chromedp.CSS(form+` button.danger`)), result("checksum is wrong"))

	// The statement altered on its way to the page: the proof states
	// another reason than the command sent.
	js[bool](t, ctx, `(() => {
  const f = window.fetch;
  window.fetch = (u, o) => f(u, o).then(r => {
    if (!String(o && o.body).includes("prepare=sign")) return r;
    return r.json().then(a => { a.sign.reason = "something else"; return new Response(JSON.stringify(a)); });
  });
  return true;
})()`)
	setKey(seed)
	do(t, ctx, "cancel with an altered statement", chromedp.Click(chromedp.CSS(form+` button.danger`)),
		waitJS(`(document.querySelector("`+form+` [data-result] code.reason")||{}).textContent === "other_reason"`))
	if c := get(t, ctx, "code", chromedp.Text(chromedp.CSS(code))); c != "proof_refused" {
		t.Fatalf("an altered statement shows %q, want proof_refused", c)
	}
	if n := len(s.History(t, "bsig-7", events.NameCancelRequested)); n != 0 {
		t.Fatalf("%d cancellations recorded, want 0", n)
	}
	// The seeds typed so far (the stranger's, the broken one, the person
	// key's) were in the password field when the forms were sent: no post
	// carries one. The typed name; the stranger's statement and proof;
	// the broken seed's statement (its proof is never made); the altered
	// statement and its proof: six posts.
	typed := js[[]string](t, ctx, `window.weftBodies`)
	if len(typed) != 6 {
		t.Fatalf("posts %q, want 6 (the typed name; a statement and its proof, a statement, a statement and its proof)", typed)
	}
	for _, b := range typed {
		for _, sd := range []string{seed, string(strangerSeed), string(broken)} {
			if strings.Contains(b, sd) {
				t.Fatalf("a typed seed was sent: %s", b)
			}
		}
	}

	// Back to the page's own fetch (recording posts); the key as a file.
	do(t, ctx, "reload", chromedp.Navigate(s.ConsoleURL+"/runs/bsig-7"), chromedp.WaitVisible(chromedp.CSS(form+` button.danger`)))
	js[bool](t, ctx, recordPosts)
	do(t, ctx, "cancel signed with the person key's file",
		typeIn(`#c-reason`, "duplicate order"), typeIn(`#c-by`, "mallory"),
		chromedp.SetUploadFiles(chromedp.CSS(`#c-signing-file`), []string{keyFile}),
		chromedp.Click(chromedp.CSS(form+` button.danger`)),
		result("Cancelled. Signed with key "+pub+"."))
	if v := js[bool](t, ctx, `document.querySelector("#c-signing-file").value === "" && document.querySelector("#c-signing-key").value === ""`); !v {
		t.Error("the key's fields are not emptied after the cancel")
	}
	bodies := js[[]string](t, ctx, `window.weftBodies`)
	if len(bodies) != 2 || !strings.Contains(bodies[0], "prepare=sign") || !strings.Contains(bodies[1], "proof=%7B") || strings.Contains(bodies[1], "prepare") {
		t.Fatalf("posts %q, want the statement asked, then the form with its proof", bodies)
	}
	for _, b := range bodies {
		if strings.Contains(b, seed) || strings.Contains(b, "SU") && strings.Contains(b, "signing") {
			t.Fatalf("a signing key was sent: %s", b)
		}
	}
	v := s.WaitStatus(t, "bsig-7", "finished")
	if c := v.Cancelled; c == nil || !c.Verified || c.Key != pub || c.By != "demo approver" || c.Reason != "duplicate order" {
		t.Fatalf("cancelled %+v, want verified by demo approver with key %s", c, pub)
	}
}

// TestSecurityWhoDidIt_ConsoleSignsAReconciliation: on weft dev --secure
// --require-identity, the inbox's uncertain card signs its reconciliation
// in the browser — the output typed into the fields generated from the
// tool's schema, with characters the canonical form escapes (<, >, &),
// hashed by the page as the runner hashes the content it is sent — and
// the run page names the key's person, verified, with the key.
func TestSecurityWhoDidIt_ConsoleSignsAReconciliation(t *testing.T) {
	s := secureStack(t)
	raw, err := os.ReadFile(filepath.Join(s.Roles, demo.ApproverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	_, pub := s.ApproverKey(t)
	s.Start(t, "bsig-13", "pay invoice INV-13", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("uncertain", "bsig-13", "2/call_2_1")
	do(t, ctx, "reconcile signed", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)),
		typeIn(card+` input[name="out.id"]`, "PAY-13"),
		typeIn(card+` input[name="out.status"]`, "sent <ok> & booked"),
		typeIn(card+` input[name=reason]`, "bank ticket 7"),
		chromedp.Click(chromedp.CSS(card+` details.signing summary`)),
		typeIn(card+` [data-signing-key]`, strings.TrimSpace(string(raw))),
		chromedp.Click(chromedp.CSS(card+` .buttons button.primary`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Recorded as the tool's output. Signed with key `+pub+`.")`))
	v := s.WaitStatus(t, "bsig-13", "finished")
	a := action(t, v, "2/call_2_1")
	if r := a.Reconciled; a.Result != `{"id":"PAY-13","status":"sent \u003cok\u003e \u0026 booked"}` || r == nil || !r.Verified || r.Key != pub || r.By != "demo approver" {
		t.Fatalf("action %s reconciled %+v, want the output, verified by demo approver with key %s", a.Result, r, pub)
	}
	line := `li[data-action="2/call_2_1"] .reconciled-line`
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/bsig-13"), chromedp.WaitVisible(chromedp.CSS(line)))
	if text := get(t, ctx, "the reconciled line", chromedp.Text(chromedp.CSS(line))); !strings.Contains(text, "by demo approver (verified)") || !strings.Contains(text, pub) {
		t.Errorf("the reconciled line says %q", text)
	}
}

// TestSecurityWhoDidIt_ConsoleSignsARestart (docs/security.md, "Who did
// it"; docs/semantics.md §14): on weft dev --secure --require-identity,
// the run page's Restart from a step is refused identity_required
// (no_identity) with a typed name, showing the weft restart command that
// signs it; signed in the browser with the person key it restarts the
// run, and the new run records the key's person, verified, with its key
// (never the typed name), which its page says.
func TestSecurityWhoDidIt_ConsoleSignsARestart(t *testing.T) {
	s := secureStack(t)
	raw, err := os.ReadFile(filepath.Join(s.Roles, demo.ApproverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	_, pub := s.ApproverKey(t)
	s.Start(t, "bsr-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	const form = "#restart-form"
	do(t, ctx, "restart with a typed name", chromedp.Navigate(s.ConsoleURL+"/runs/bsr-8"), chromedp.WaitVisible(chromedp.CSS(form+` button[type=submit]`)),
		chromedp.SetValue(chromedp.CSS(`#r-turn`), "1"),
		typeIn(`#r-run`, "bsr-8b"),
		typeIn(`#r-reason`, "tool fixed"),
		typeIn(`#r-by`, "mallory"),
		chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
		waitJS(`!!document.querySelector("`+form+` [data-result] code.code")`))
	if c, r := get(t, ctx, "code", chromedp.Text(chromedp.CSS(form+` [data-result] code.code`))), get(t, ctx, "reason", chromedp.Text(chromedp.CSS(form+` [data-result] code.reason`))); c != "identity_required" || r != "no_identity" {
		t.Fatalf("a typed name shows %q (%q), want identity_required (no_identity)", c, r)
	}
	if cmd := get(t, ctx, "weft command", chromedp.Text(chromedp.CSS(form+` [data-result] [data-weft-command]`))); cmd != "weft restart bsr-8 --from-turn 1 --run bsr-8b --reason 'tool fixed' --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof" {
		t.Errorf("the refusal shows the command %q", cmd)
	}
	do(t, ctx, "restart signed with the person key",
		typeIn(`#r-signing-key`, strings.TrimSpace(string(raw))),
		chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
		waitJS(`(document.querySelector("`+form+` [data-result]")||{}).textContent.includes("Restarted run bsr-8 from turn 1 as run bsr-8b, signed with key `+pub+`.")`))
	v := s.WaitStatus(t, "bsr-8b", "finished")
	if r := v.Restarted; r == nil || !r.Verified || r.Key != pub || r.By != "demo approver" || r.Reason != "tool fixed" {
		t.Fatalf("restarted %+v, want verified by demo approver with key %s", v.Restarted, pub)
	}
	do(t, ctx, "the new run's page", chromedp.Navigate(s.ConsoleURL+"/runs/bsr-8b"), chromedp.WaitVisible(chromedp.CSS(`#run-restarted-by`)))
	if text := get(t, ctx, "restarted by", chromedp.Text(chromedp.CSS(`#run-restarted-by`))); text != "by demo approver (verified): “tool fixed”" {
		t.Errorf("the new run's page says it was restarted %q", text)
	}
}

// TestSecurityWhoDidIt_ConsoleSignsAHold (docs/security.md, "Who did it";
// "Retention and legal hold"): on weft dev --secure --require-identity,
// the run page's Place a legal hold and its Release are refused
// identity_required (no_identity) with a typed name, showing the weft
// hold command that signs each; signed in the browser with the person key
// they place and release the hold, recorded in weft_holds under the key's
// person, verified, with its key (never the typed name), which the page's
// list of holds says. The console is the custodian's: the operator's may
// not place holds.
func TestSecurityWhoDidIt_ConsoleSignsAHold(t *testing.T) {
	s := secureStack(t)
	consoleURL, custodian := s.custodianConsole(t)
	keeper := &stack{&consolestack.Stack{NC: custodian}}
	raw, err := os.ReadFile(filepath.Join(s.Roles, demo.ApproverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimSpace(string(raw))
	_, pub := s.ApproverKey(t)
	s.Start(t, "bsh-9", "pay invoice INV-9", "finished")
	ctx := tab(t)
	refused := func(form, wantCmd string) {
		t.Helper()
		if c, r := get(t, ctx, "code", chromedp.Text(chromedp.CSS(form+` [data-result] code.code`))), get(t, ctx, "reason", chromedp.Text(chromedp.CSS(form+` [data-result] code.reason`))); c != "identity_required" || r != "no_identity" {
			t.Fatalf("a typed name shows %q (%q), want identity_required (no_identity)", c, r)
		}
		if cmd := get(t, ctx, "weft command", chromedp.Text(chromedp.CSS(form+` [data-result] [data-weft-command]`))); cmd != wantCmd {
			t.Errorf("the refusal shows the command %q, want %q", cmd, wantCmd)
		}
	}

	const hold = "#hold-form"
	do(t, ctx, "hold with a typed name", chromedp.Navigate(consoleURL+"/runs/bsh-9"), chromedp.WaitVisible(chromedp.CSS(hold+` button[type=submit]`)),
		typeIn(`#h-reason`, "litigation L-9"),
		typeIn(`#h-by`, "mallory"),
		chromedp.Click(chromedp.CSS(hold+` button[type=submit]`)),
		waitJS(`!!document.querySelector("`+hold+` [data-result] code.code")`))
	refused(hold, "weft hold bsh-9 --reason 'litigation L-9' --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof")
	do(t, ctx, "hold signed with the person key",
		typeIn(`#h-signing-key`, seed),
		chromedp.Click(chromedp.CSS(hold+` button[type=submit]`)),
		waitJS(`(document.querySelector("`+hold+` [data-result]")||{}).textContent.includes("Hold h1 placed on run bsh-9 by demo approver (verified, key `+pub+`)")`))
	if hs := keeper.holds(t, "bsh-9"); len(hs) != 1 || !hs[0].Active() || hs[0].By != "demo approver" || !hs[0].Verified || hs[0].Key != pub || hs[0].Proof == nil {
		t.Fatalf("weft_holds keeps %+v, want h1 active, by demo approver verified with key %s", hs, pub)
	}
	const row = `#holds li[data-hold=h1]`
	do(t, ctx, "the page lists it", chromedp.WaitVisible(chromedp.CSS(row+`[data-active=true]`)))
	if text := get(t, ctx, "hold", chromedp.Text(chromedp.CSS(row))); !strings.Contains(text, "placed by demo approver (verified)") {
		t.Errorf("the hold shows %q, want placed by demo approver (verified)", text)
	}

	do(t, ctx, "release with a typed name",
		typeIn(`#rh-h1-reason`, "settled"),
		typeIn(`#rh-h1-by`, "mallory"),
		chromedp.Click(chromedp.CSS(row+` button[type=submit]`)),
		waitJS(`!!document.querySelector("`+row+` [data-result] code.code")`))
	refused(row, "weft hold --release --hold h1 bsh-9 --reason settled --signing-key YOUR_KEY.nk --proof-ttl 45s --print-proof")
	do(t, ctx, "release signed with the person key",
		typeIn(`#rh-h1-signing-key`, seed),
		chromedp.Click(chromedp.CSS(row+` button[type=submit]`)),
		waitJS(`document.getElementById("notices").textContent.includes("Hold h1 of run bsh-9 released by demo approver (verified, key `+pub+`)")`))
	if hs := keeper.holds(t, "bsh-9"); len(hs) != 1 || hs[0].Active() || hs[0].Released.By != "demo approver" || !hs[0].Released.Verified || hs[0].Released.Key != pub || hs[0].Released.Proof == nil {
		t.Fatalf("weft_holds keeps %+v, want h1 released by demo approver verified with key %s", hs, pub)
	}
	do(t, ctx, "the page lists it released", chromedp.WaitVisible(chromedp.CSS(row+`[data-active=false]`)))
	if text := get(t, ctx, "released hold", chromedp.Text(chromedp.CSS(row))); !strings.Contains(text, "released by demo approver (verified)") {
		t.Errorf("the released hold shows %q, want released by demo approver (verified)", text)
	}
}

// custodianConsole serves, until the test ends, a console connected to
// the secure stack as its custodian: the operator's console may neither
// place holds nor read weft_holds (docs/console.md, "Legal holds"), the
// custodian may. It returns the console's URL and the custodian's
// connection.
func (s *stack) custodianConsole(t *testing.T) (string, *nats.Conn) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	node, err := natsnode.Start(ctx, natsnode.WithURL(s.NATSURL), natsnode.WithCredsFile(filepath.Join(s.Roles, roles.CredsFile(roles.Custodian, api.Queue{}))))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	con, err := console.New(node.Conn(), console.WithApprover(demo.Approver))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	ln, u, err := console.Listen("127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- con.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = node.Close(context.Background())
	})
	return u, node.Conn()
}
