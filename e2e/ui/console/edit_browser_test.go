package console_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/projections"
)

// TestSemantics4_ConsoleApprovesNarrowerArguments (docs/semantics.md §4,
// "Approving narrower arguments"; docs/console.md): on weft dev --secure,
// the approval card's “Approve with changes” starts from the model's
// arguments and shows the weft approve --args command; an edit the tool's
// codec refuses (a currency outside its enum) is refused invalid_content,
// nothing is recorded and the card stays; the 1200 EUR payment approved
// as 90 EUR is signed in the browser with the v2 digest (the approved
// arguments' hash, of their canonical bytes as the runner hashes them), the log records the model's and the approved
// arguments, the body runs with 90, and the run page marks the approved
// arguments.
func TestSemantics4_ConsoleApprovesNarrowerArguments(t *testing.T) {
	s := secureStack(t)
	raw, err := os.ReadFile(filepath.Join(s.Roles, demo.ApproverKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimSpace(string(raw))
	_, pub := s.ApproverKey(t)
	const asked = `{"invoice":"INV-7","payee":"ACME Ltd","amount":1200,"currency":"EUR"}`
	// The payee edited too, with characters the canonical form escapes
	// (<, >, &) and others it keeps (é, U+2014): the page hashes the bytes
	// the runner hashes.
	const approved = `{"invoice":"INV-7","payee":"ACME \u003cEU\u003e \u0026 Café — Ltd","amount":90,"currency":"EUR"}`

	s.Start(t, "edit-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("approval", "edit-7", "2/call_2_1")
	args := card + ` textarea[name=arguments]`
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card+` [data-signing-key]`)))
	var prefilled json.RawMessage = []byte(get(t, ctx, "the editable arguments", chromedp.Value(chromedp.CSS(args))))
	if c, err := json.Marshal(prefilled); err != nil || string(c) != asked {
		t.Fatalf("“Approve with changes” starts from %s, want the model's %s", prefilled, asked)
	}
	want := "weft approve edit-7 2/call_2_1 --revision 1 --approver " + demo.SignedApprover + " --signing-key YOUR_KEY.nk --args '" + asked + "'"
	// (textContent: the disclosure is closed)
	if cmd := js[string](t, ctx, `document.querySelector("`+card+` [data-weft-approve]").textContent`); cmd != want {
		t.Errorf("the card shows %q, want %q", cmd, want)
	}
	setArgs := func(v string) {
		js[bool](t, ctx, `(() => { document.querySelector("`+args+`").value = `+jsString(v)+`; return true })()`)
	}

	do(t, ctx, "open “Approve with changes”", chromedp.Click(chromedp.CSS(card+` [data-edit-arguments] summary`)))
	setArgs(strings.Replace(asked, `"EUR"`, `"USD"`, 1))
	do(t, ctx, "approve an edit the codec refuses",
		typeIn(card+` [data-signing-key]`, seed),
		chromedp.Click(chromedp.CSS(card+` button[value=approve]`)),
		waitJS(`!!document.querySelector("`+card+` [data-result] code.code")`))
	if c := get(t, ctx, "code", chromedp.Text(chromedp.CSS(card+` [data-result] code.code`))); c != "invalid_content" {
		t.Fatalf("an edit outside the tool's schema shows %q, want invalid_content", c)
	}
	if n := len(s.History(t, "edit-7", events.NameApprovalAnswered)); n != 0 {
		t.Fatalf("%d answers recorded after a refused edit, want 0", n)
	}
	if !js[bool](t, ctx, `!!document.querySelector("`+card+` button[value=approve]")`) {
		t.Fatal("the card left the page after a refused edit")
	}

	// Indented, as a person edits it: the page signs the compacted bytes.
	setArgs("{\n  \"invoice\": \"INV-7\",\n  \"payee\": \"ACME <EU> & Café — Ltd\",\n  \"amount\": 90,\n  \"currency\": \"EUR\"\n}")
	saveShot(t, "approve-with-changes-card.png", get(t, ctx, "edit screenshot", chromedp.Screenshot(chromedp.CSS(card))))
	do(t, ctx, "approve 90 EUR signed",
		typeIn(card+` [data-signing-key]`, seed),
		chromedp.Click(chromedp.CSS(card+` button[value=approve]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Approved with changes")`))
	if msg := get(t, ctx, "answer", chromedp.Text(chromedp.CSS(card+` [data-result]`))); !strings.Contains(msg, "Approved with changes") || !strings.Contains(msg, "Signed with key "+pub) {
		t.Errorf("the card says %q", msg)
	}

	v := s.WaitStatus(t, "edit-7", "finished")
	a := action(t, v, "2/call_2_1")
	if a.State != projections.StateSucceeded || string(a.Arguments) != asked || string(a.Approved) != approved ||
		len(a.Approvals) != 1 || a.Approvals[0].Proof == nil || !a.Approvals[0].Proof.Verified || a.Approvals[0].Proof.Key != pub {
		b, _ := json.Marshal(a)
		t.Fatalf("action %s, want succeeded with the model's arguments and the approved 90 EUR, verified", b)
	}
	answered := s.History(t, "edit-7", events.NameApprovalAnswered)
	if len(answered) != 1 {
		t.Fatalf("%d answers recorded, want 1", len(answered))
	}
	var ans events.ApprovalAnswered
	if err := json.Unmarshal(answered[0].Payload, &ans); err != nil {
		t.Fatal(err)
	}
	if string(ans.Arguments) != approved || ans.Proof == nil || ans.Proof.Approved == "" {
		t.Fatalf("the log records the answer %s, want the approved arguments and a proof stating their hash", answered[0].Payload)
	}

	row := `li[data-action="2/call_2_1"]`
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/edit-7"), chromedp.WaitVisible(chromedp.CSS(row+` [data-approved-arguments]`)))
	if text := get(t, ctx, "approved arguments", chromedp.Text(chromedp.CSS(row+` [data-approved-arguments]`))); !strings.Contains(text, "Approved with changes") || !strings.Contains(text, "90") {
		t.Errorf("the run page marks the approved arguments as %q", text)
	}
	if problems := js[string](t, ctx, a11y); problems != "" {
		t.Errorf("the run page: %s", problems)
	}
	saveShot(t, "approve-with-changes.png", get(t, ctx, "approved arguments screenshot", chromedp.Screenshot(chromedp.CSS(row))))
}
