package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/projections"
)

// The browser tests drive the console of one `weft dev` stack in headless
// Chromium: what a person does, with what a person sees.

// noOverflow fails when the page is wider than the viewport, naming the
// elements that stick out.
const noOverflow = `(() => {
  const w = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth <= w) return "";
  const out = [];
  document.querySelectorAll("body *").forEach(e => {
    const r = e.getBoundingClientRect();
    if (r.right > w + 1 && out.length < 5) out.push(e.tagName + (e.id ? "#" + e.id : "") + "." + e.className + " right=" + Math.round(r.right));
  });
  return "page " + document.documentElement.scrollWidth + "px wide in a " + w + "px viewport: " + out.join(", ");
})()`

// a11y checks the accessibility basics of a page: each field has a label,
// nothing has a positive tabindex, every control is a real link or button.
const a11y = `(() => {
  const bad = [];
  document.querySelectorAll("input:not([type=hidden]), select, textarea").forEach(e => { if (!e.labels || e.labels.length === 0) bad.push("unlabelled " + e.name); });
  document.querySelectorAll("[tabindex]").forEach(e => { if (e.tabIndex > 0) bad.push("tabindex " + e.tabIndex); });
  document.querySelectorAll("[onclick], div[role=button], span[role=button], a:not([href])").forEach(e => bad.push("not a real control: " + e.tagName));
  return bad.join("; ");
})()`

// TestScreenshotsAndLayout takes the screenshots docs/console.md shows
// (inbox, run page, timeline) and checks every page at 1280×800 and at
// phone width (390×844) for horizontal overflow.
func TestScreenshotsAndLayout(t *testing.T) {
	s := devStack(t)
	s.Start(t, "shot-7", "pay invoice INV-7", "suspended")
	s.Start(t, "shot-13", "pay invoice INV-13", "suspended")
	s.Start(t, "shot-8", "pay invoice INV-8", "finished")
	s.Start(t, "shot-13q", "pay invoice INV-13", "suspended")
	s.UnconfirmedByAPI(t, "shot-13q", "asking the bank whether it was sent")
	s.WaitStatus(t, "shot-13q", "finished")
	ctx := tab(t)

	pages := []struct{ path, ready string }{
		{"/", "#" + cardKey("approval", "shot-7", "2/call_2_1")},
		{"/runs", `tr[data-run="shot-8"]`},
		{"/runs/shot-8", "#timeline"},
		{"/runs/shot-13", "#" + cardKey("uncertain", "shot-13", "2/call_2_1")},
		{"/?tool=send_payment&min_amount=1000", "#filter-note"},
		{"/runs?q=shot", "#search-note"},
		{"/batch?tool=send_payment", "#batch-all"},
	}
	for _, size := range []struct {
		name string
		w, h int64
		opts []chromedp.EmulateViewportOption
	}{{"desktop", 1280, 800, nil}, {"phone", 390, 844, []chromedp.EmulateViewportOption{chromedp.EmulateMobile, chromedp.EmulateScale(2)}}} {
		do(t, ctx, "viewport "+size.name, chromedp.EmulateViewport(size.w, size.h, size.opts...))
		for _, p := range pages {
			do(t, ctx, size.name+" "+p.path, chromedp.Navigate(s.ConsoleURL+p.path), chromedp.WaitVisible(chromedp.CSS(p.ready)))
			if problem := js[string](t, ctx, noOverflow); problem != "" {
				t.Errorf("%s %s: %s", size.name, p.path, problem)
			}
			if size.name == "phone" && p.path == "/" {
				saveShot(t, "inbox-phone.png", get(t, ctx, "phone screenshot", chromedp.CaptureScreenshot()))
			}
		}
	}

	do(t, ctx, "desktop again", chromedp.EmulateViewport(1280, 800))
	do(t, ctx, "inbox",
		chromedp.Navigate(s.ConsoleURL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#"+cardKey("uncertain", "shot-13", "2/call_2_1"))),
		chromedp.WaitVisible(chromedp.CSS("#"+cardKey("question", "shot-13q", "2/call_2_1"))),
		waitJS(`document.getElementById("live-status").classList.contains("on")`))
	saveShot(t, "inbox.png", get(t, ctx, "inbox screenshot", chromedp.FullScreenshot(100)))
	do(t, ctx, "run page",
		chromedp.Navigate(s.ConsoleURL+"/runs/shot-8"),
		chromedp.WaitVisible(chromedp.ID("timeline")),
		waitJS(`document.getElementById("live-status").classList.contains("on")`))
	saveShot(t, "run.png", get(t, ctx, "run page screenshot", chromedp.CaptureScreenshot()))
	do(t, ctx, "scroll to the timeline", chromedp.ScrollIntoView(chromedp.ID("timeline")))
	saveShot(t, "timeline.png", get(t, ctx, "timeline screenshot", chromedp.Screenshot(chromedp.ID("timeline"))))

	// The timeline is the lines `weft events` prints: one row per event.
	rows := js[int](t, ctx, `document.querySelectorAll("#timeline tbody tr").length`)
	h := s.HistoryAll(t, "shot-8")
	if rows != len(h) {
		t.Errorf("timeline has %d rows, the history %d events", rows, len(h))
	}
	// Clean up what waits, so other tests' inboxes are theirs.
	s.ApproveByAPI(t, "shot-7")
	s.reconcileByAPI(t, "shot-13")
	s.resolveByAPI(t, "shot-13q")
}

// TestApproveFromInboxWithKeyboard approves a payment from the inbox using
// only the keyboard (the credential field, then Tab to the Approve button,
// Enter) and sees the run complete on its page.
func TestApproveFromInboxWithKeyboard(t *testing.T) {
	s := devStack(t)
	s.Start(t, "kb-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("approval", "kb-7", "2/call_2_1")
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)))
	do(t, ctx, "type the credential", typeIn(card+` input[name=credential]`, "alice"))
	focused := ""
	for i := 0; i < 6 && focused != "BUTTON:approve"; i++ {
		do(t, ctx, "tab", chromedp.KeyEvent(kb.Tab))
		focused = js[string](t, ctx, `document.activeElement.tagName + ":" + (document.activeElement.value || document.activeElement.name || "")`)
	}
	if focused != "BUTTON:approve" {
		t.Fatalf("Tab from the credential never reached the Approve button (last focus %s)", focused)
	}
	do(t, ctx, "press Enter", chromedp.KeyEvent(kb.Enter),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Approved")`))
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/kb-7"),
		waitJS(`document.getElementById("run-status").dataset.status === "finished"`))
	v := s.WaitStatus(t, "kb-7", "finished")
	if v.Outcome == nil || v.Outcome.Kind != "completed" {
		t.Fatalf("outcome %+v", v.Outcome)
	}
	a := action(t, v, "2/call_2_1")
	if a.State != projections.StateSucceeded || len(a.Approvals) != 1 || a.Approvals[0].Answer != "approve" || a.Approvals[0].Reviewer != "alice" {
		t.Fatalf("action %+v", a)
	}
	s.Start(t, "kb-13", "pay invoice INV-13", "suspended")
	for _, p := range []string{"/", "/runs", "/runs/kb-7", "/runs/kb-13"} {
		do(t, ctx, "open "+p, chromedp.Navigate(s.ConsoleURL+p), chromedp.WaitVisible(chromedp.ID("main")))
		if problems := js[string](t, ctx, a11y); problems != "" {
			t.Errorf("%s: %s", p, problems)
		}
	}
	s.reconcileByAPI(t, "kb-13")
}

// TestReconcileThroughGeneratedForm records an uncertain payment's output
// through the form generated from send_payment's output schema, and
// another one as unconfirmed.
func TestReconcileThroughGeneratedForm(t *testing.T) {
	s := devStack(t)
	s.Start(t, "rec-13", "pay invoice INV-13", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("uncertain", "rec-13", "2/call_2_1")
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)))
	names := js[[]string](t, ctx, `Array.from(document.querySelectorAll("`+card+` fieldset[data-kind=output] [name^='out.']")).map(e => e.name)`)
	if strings.Join(names, ",") != "out.id,out.status" {
		t.Fatalf("generated output fields %v, want out.id,out.status (send_payment's output schema)", names)
	}
	do(t, ctx, "fill the output",
		typeIn(card+` input[name="out.id"]`, "PAY-13"),
		typeIn(card+` input[name="out.status"]`, "sent"),
		typeIn(card+` input[name=by]`, "bob"),
		chromedp.Click(chromedp.CSS(card+` button[type=submit]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Recorded as the tool's output")`))
	v := s.WaitStatus(t, "rec-13", "finished")
	if a := action(t, v, "2/call_2_1"); a.State != projections.StateReconciled || a.Result != `{"id":"PAY-13","status":"sent"}` {
		t.Fatalf("action %+v", a)
	}
	if rec := s.History(t, "rec-13", events.NameReconciled); len(rec) != 1 {
		t.Fatalf("%d reconciled events, want 1", len(rec))
	}

	s.Start(t, "rec-13b", "pay invoice INV-13", "suspended")
	card = "#" + cardKey("uncertain", "rec-13b", "2/call_2_1")
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)))
	if !js[bool](t, ctx, `document.querySelector("`+card+` fieldset[data-kind=unconfirmed]").disabled`) {
		t.Error("the unconfirmed fieldset is enabled (would be sent) before it was chosen")
	}
	do(t, ctx, "record unconfirmed",
		chromedp.Click(chromedp.CSS(card+` input[name=kind][value=unconfirmed]`)),
		typeIn(card+` input[name=note]`, "checking with the bank"),
		chromedp.Click(chromedp.CSS(card+` button[type=submit]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Recorded as unconfirmed")`))
	v = s.WaitStatus(t, "rec-13b", "finished")
	if a := action(t, v, "2/call_2_1"); a.State != projections.StateReconciled || !strings.Contains(a.Result, "checking with the bank") {
		t.Fatalf("action %+v", a)
	}
	s.resolveByAPI(t, "rec-13b") // the open question it left
}

// TestResolveOpenQuestion: an uncertain payment recorded as unconfirmed is
// an open question in the inbox; a person records what finally happened
// through the form generated from send_payment's output schema; the
// question leaves the inbox (live, in another open inbox) and appears
// resolved in the run's audit, with the resolved event in its timeline.
// The run does not change.
func TestResolveOpenQuestion(t *testing.T) {
	s := devStack(t)
	s.Start(t, "q-13", "pay invoice INV-13", "suspended")
	s.UnconfirmedByAPI(t, "q-13", "asking the bank")
	before := s.WaitStatus(t, "q-13", "finished")
	card := "#" + cardKey("question", "q-13", "2/call_2_1")

	watcher := tab(t) // another person's inbox, left open
	do(t, watcher, "open the inbox elsewhere", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)),
		waitJS(`document.getElementById("live-status").classList.contains("on")`))

	ctx := tab(t)
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)))
	if problems := js[string](t, ctx, a11y); problems != "" {
		t.Errorf("the inbox with a question: %s", problems)
	}
	// Tab reaches the question's button from its first field.
	do(t, ctx, "focus the output", chromedp.Focus(chromedp.CSS(card+` input[name="out.id"]`)))
	focused := ""
	for i := 0; i < 8 && focused != "BUTTON"; i++ {
		do(t, ctx, "tab", chromedp.KeyEvent(kb.Tab))
		focused = js[string](t, ctx, `document.activeElement.closest("`+card+`") ? document.activeElement.tagName : "outside"`)
	}
	if focused != "BUTTON" {
		t.Errorf("Tab from the output never reached the question's button (last focus %s)", focused)
	}
	if note := get(t, ctx, "note", chromedp.Text(chromedp.CSS(card+` .note`))); note != "asking the bank" {
		t.Errorf("the card shows the note %q, want the unconfirmed note", note)
	}
	names := js[[]string](t, ctx, `Array.from(document.querySelectorAll("`+card+` fieldset[data-kind=output] [name^='out.']")).map(e => e.name)`)
	if strings.Join(names, ",") != "out.id,out.status" {
		t.Fatalf("generated output fields %v, want out.id,out.status (send_payment's output schema)", names)
	}
	do(t, ctx, "record what finally happened",
		typeIn(card+` input[name="out.id"]`, "PAY-13"),
		typeIn(card+` input[name="out.status"]`, "sent"),
		typeIn(card+` input[name=by]`, "alice"),
		chromedp.Click(chromedp.CSS(card+` button[type=submit]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Resolved: it happened")`))

	// The other inbox drops the question without a reload.
	js[bool](t, watcher, `window.weftNotReloaded = true`)
	do(t, watcher, "the question leaves the other inbox", waitJS(`!document.querySelector("`+card+`")`))
	if !js[bool](t, watcher, `window.weftNotReloaded === true`) {
		t.Error("the other inbox was reloaded")
	}
	// The notice links to the run's audit.
	do(t, ctx, "open the run's audit", chromedp.Click(chromedp.CSS(`#notices a`)),
		chromedp.WaitVisible(chromedp.CSS(`#audit-questions li[data-action="2/call_2_1"]`)))
	item := get(t, ctx, "audit item", chromedp.Text(chromedp.CSS(`#audit-questions li[data-action="2/call_2_1"]`)))
	resolved := s.History(t, "q-13", events.NameResolved)
	if len(resolved) != 1 {
		t.Fatalf("%d resolved events, want 1", len(resolved))
	}
	for _, want := range []string{"asking the bank", fmt.Sprintf("resolved in event %d", resolved[0].Version), "it happened", "alice", "PAY-13", "sent"} {
		if !strings.Contains(item, want) {
			t.Errorf("the audit's open question says %q, want it to contain %q", item, want)
		}
	}
	if verdict := get(t, ctx, "verdict", chromedp.Text(chromedp.CSS(`#audit .verdict`))); !strings.HasPrefix(verdict, "Verified") {
		t.Errorf("audit verdict %q", verdict)
	}
	do(t, ctx, "the timeline has the resolved event", chromedp.WaitVisible(chromedp.CSS(`#timeline tr[data-type=resolved]`)))
	do(t, ctx, "scroll to the audit", chromedp.ScrollIntoView(chromedp.ID("audit")))
	saveShot(t, "audit.png", get(t, ctx, "audit screenshot", chromedp.Screenshot(chromedp.ID("audit"))))
	if q := get(t, ctx, "action's question", chromedp.AttributeValue(chromedp.CSS(`li[data-action="2/call_2_1"] .question-line`), "data-question")).Value; q != "resolved" {
		t.Errorf("the action's question line is %q, want resolved", q)
	}
	after := s.WaitStatus(t, "q-13", "finished")
	a := action(t, after, "2/call_2_1")
	if a.Question == nil || a.Question.Resolution == nil || a.Question.Resolution.Kind != "output" || a.Question.Resolution.By != "alice" {
		t.Fatalf("question %+v", a.Question)
	}
	if after.Outcome == nil || before.Outcome == nil || after.Outcome.Kind != before.Outcome.Kind || a.Result != action(t, before, "2/call_2_1").Result {
		t.Errorf("resolving changed the run: outcome %+v → %+v, result %q → %q", before.Outcome, after.Outcome, action(t, before, "2/call_2_1").Result, a.Result)
	}
}

// TestRejectWithReason rejects a payment with a reason; the model reads it
// and the run finishes.
func TestRejectWithReason(t *testing.T) {
	s := devStack(t)
	s.Start(t, "rej-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("approval", "rej-7", "2/call_2_1")
	do(t, ctx, "reject", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)),
		typeIn(card+` input[name=credential]`, "carol"),
		typeIn(card+` textarea[name=reason]`, "duplicate of INV-6"),
		chromedp.Click(chromedp.CSS(card+` button[value=reject]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Rejected")`))
	v := s.WaitStatus(t, "rej-7", "finished")
	a := action(t, v, "2/call_2_1")
	if a.State != projections.StateRejected || len(a.Approvals) != 1 || a.Approvals[0].Reason != "duplicate of INV-6" || a.Approvals[0].Reviewer != "carol" {
		t.Fatalf("action %+v", a)
	}
}

// TestRefusedActionShowsItsCode: a request answered elsewhere while the
// viewer typed (the run has finished since) is refused run_ended with the
// outcome kind as reason; the card shows the code and reason, stays on the
// page with a note, its form gets a new command id, and the credential is
// in no attribute of the page.
func TestRefusedActionShowsItsCode(t *testing.T) {
	s := devStack(t)
	s.Start(t, "ref-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("approval", "ref-7", "2/call_2_1")
	do(t, ctx, "type", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)),
		waitJS(`document.getElementById("live-status").classList.contains("on")`),
		typeIn(card+` input[name=credential]`, "dave-s3cret"))
	before := get(t, ctx, "command id", chromedp.Value(chromedp.CSS(card+` input[name=command_id]`)))
	s.ApproveByAPI(t, "ref-7") // someone else answers meanwhile
	s.WaitStatus(t, "ref-7", "finished")
	do(t, ctx, "approve too late",
		// the live update keeps the card the viewer typed into, with a note
		waitJS(`!!document.querySelector("`+card+` .gone-note")`),
		chromedp.Click(chromedp.CSS(card+` button[value=approve]`)),
		waitJS(`!!document.querySelector("`+card+` [data-result] code.code")`))
	after := get(t, ctx, "command id", chromedp.Value(chromedp.CSS(card+` input[name=command_id]`)))
	code := get(t, ctx, "code", chromedp.Text(chromedp.CSS(card+` [data-result] code.code`)))
	reason := get(t, ctx, "reason", chromedp.Text(chromedp.CSS(card+` [data-result] code.reason`)))
	if code != "run_ended" || reason != "completed" {
		t.Fatalf("refusal shows %q (%q), want run_ended (completed)", code, reason)
	}
	if after == before || after == "" {
		t.Fatalf("command id %q after the refusal, was %q: a corrected form needs a new one", after, before)
	}
	if html := get(t, ctx, "page source", chromedp.OuterHTML(chromedp.CSS("html"))); strings.Contains(html, "dave-s3cret") {
		t.Error("the credential is written into the page")
	}
}

// TestLiveRunStatus: the run page follows the run without a reload.
func TestLiveRunStatus(t *testing.T) {
	s := devStack(t)
	s.Start(t, "live-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/live-7"),
		waitJS(`document.getElementById("run-status").dataset.status === "suspended"`),
		waitJS(`document.getElementById("live-status").classList.contains("on")`))
	js[bool](t, ctx, `window.weftNotReloaded = true`)
	s.ApproveByAPI(t, "live-7")
	do(t, ctx, "see it finish",
		waitJS(`document.getElementById("run-status").dataset.status === "finished"`),
		waitJS(`!!document.querySelector("#timeline tr[data-type=run_finished]")`))
	if !js[bool](t, ctx, `window.weftNotReloaded === true`) {
		t.Fatal("the page was reloaded")
	}
}

// TestDoubleClickActsOnce: a double click on Approve, and a form submitted
// twice at once, send one command id; the run records one answer and the
// page shows the approval, not a refusal.
func TestDoubleClickActsOnce(t *testing.T) {
	s := devStack(t)
	for i, how := range []string{"dblclick", "requestSubmit"} {
		runID := fmt.Sprintf("dbl-%d", i)
		s.Start(t, runID, "pay invoice INV-7", "suspended")
		ctx := tab(t)
		card := "#" + cardKey("approval", runID, "2/call_2_1")
		do(t, ctx, "open", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)),
			typeIn(card+` input[name=credential]`, "erin"))
		if how == "dblclick" {
			do(t, ctx, how, chromedp.DoubleClick(chromedp.CSS(card+` button[value=approve]`)))
		} else {
			js[bool](t, ctx, `(() => { const f = document.querySelector("`+card+` form"); const b = f.querySelector("button[value=approve]"); f.requestSubmit(b); f.requestSubmit(b); return true })()`)
		}
		do(t, ctx, "answer", waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Approved")`),
			waitJS(`!document.querySelector("`+card+` form[data-busy]")`))
		if text := get(t, ctx, "result", chromedp.Text(chromedp.CSS(card+` [data-result]`))); strings.Contains(text, "Refused") {
			t.Errorf("%s: a press was refused: %s", how, text)
		}
		s.WaitStatus(t, runID, "finished")
		if n := len(s.History(t, runID, events.NameApprovalAnswered)); n != 1 {
			t.Errorf("%s: %d approval answers recorded, want 1", how, n)
		}
	}
}

// TestTimesInViewersZone: times show in the browser's zone, with the
// recorded UTC time on hover.
func TestTimesInViewersZone(t *testing.T) {
	s := devStack(t)
	s.Start(t, "tz-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "Kolkata", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		// The zone, and a fixed locale so the expected text is one.
		if _, err := cdp.Call(ctx, tg, emulation.SetLocaleOverride, emulation.SetLocaleOverrideParams{Locale: "en_US"}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: "Asia/Kolkata"})
		return err
	}), chromedp.Navigate(s.ConsoleURL+"/runs/tz-8"),
		waitJS(`document.querySelector("#timeline time").title.startsWith("Recorded ")`))
	text := js[string](t, ctx, `document.querySelector("#timeline time").textContent`)
	title := js[string](t, ctx, `document.querySelector("#timeline time").title`)
	at, err := time.Parse(time.RFC3339Nano, js[string](t, ctx, `document.querySelector("#timeline time").getAttribute("datetime")`))
	if err != nil {
		t.Fatal(err)
	}
	local := at.In(time.FixedZone("IST", 5*3600+1800))
	if !strings.Contains(text, "GMT+5:30") || !strings.Contains(text, local.Format(":04:05")) || !strings.Contains(text, local.Format("3:04")) {
		t.Errorf("time shown %q, want %s in GMT+5:30", text, local.Format("15:04:05"))
	}
	if want := "Recorded " + at.UTC().Format("2006-01-02 15:04:05.000") + " UTC"; title != want {
		t.Errorf("title %q, want %q", title, want)
	}
}

func (s *stack) reconcileByAPI(t *testing.T, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Cmd.Reconcile(ctx, api.ReconcileRequest{CommandID: "test-" + run, Run: run, Action: "2/call_2_1", Content: json.RawMessage(`{"error":"test cleanup"}`)}); err != nil {
		t.Fatalf("reconcile %s: %v", run, err)
	}
}

// resolveByAPI resolves the run's open question as not happened.
func (s *stack) resolveByAPI(t *testing.T, run string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.Cmd.Resolve(ctx, api.ResolveRequest{CommandID: "test-resolve-" + run, Run: run, Action: "2/call_2_1", Content: json.RawMessage(`{"error":"test cleanup"}`)}); err != nil {
		t.Fatalf("resolve %s: %v", run, err)
	}
}

// TestChildRuns: a run that delegated shows its child run on its page —
// a link, the child's current status — and its family status waiting for
// the child; the child's page names its parent and has the child's
// approval; once a person approves it there, the parent's page (left
// open, not reloaded) shows the child settled and the parent finished.
func TestChildRuns(t *testing.T) {
	s := familyStack(t)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Cmd.Start(sctx, api.StartRequest{Run: "fam-7", Agent: "office", Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	var child string
	deadline := time.Now().Add(45 * time.Second)
	for child == "" && time.Now().Before(deadline) {
		if v, err := s.Query.Run(sctx, "fam-7"); err == nil && len(v.Children) == 1 {
			child = v.Children[0].Run
		}
		time.Sleep(50 * time.Millisecond)
	}
	if child == "" {
		t.Fatal("fam-7 never delegated")
	}
	s.WaitStatus(t, child, "suspended") // the desk waits for the finance approval

	parent := tab(t)
	row := `#children li[data-child="` + child + `"]`
	do(t, parent, "open the parent", chromedp.Navigate(s.ConsoleURL+"/runs/fam-7"),
		chromedp.WaitVisible(chromedp.CSS(row)),
		waitJS(`document.querySelector('`+row+` .badge').textContent === "suspended"`),
		waitJS(`document.getElementById("live-status").classList.contains("on")`))
	if href := get(t, parent, "child link", chromedp.AttributeValue(chromedp.CSS(row+` a`), "href")).Value; href != "/runs/"+child {
		t.Errorf("the child's link is %q, want /runs/%s", href, child)
	}
	if fam := get(t, parent, "family", chromedp.Text(chromedp.CSS(`#run-family`))); !strings.Contains(fam, "suspended") || !strings.Contains(fam, "waiting for child run "+child) {
		t.Errorf("the family row says %q, want suspended, waiting for child run %s", fam, child)
	}
	if text := get(t, parent, "child row", chromedp.Text(chromedp.CSS(row))); !strings.Contains(text, demo.AgentName) || !strings.Contains(text, "1/call_1_1") {
		t.Errorf("the child row says %q, want the desk agent and the delegating action", text)
	}
	if problems := js[string](t, parent, a11y); problems != "" {
		t.Errorf("the parent's page: %s", problems)
	}
	phone := tab(t)
	do(t, phone, "the parent's page on a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(s.ConsoleURL+"/runs/fam-7"), chromedp.WaitVisible(chromedp.CSS(row)))
	if problem := js[string](t, phone, noOverflow); problem != "" {
		t.Errorf("the parent's page at 390 px: %s", problem)
	}
	do(t, phone, "the child's page on a phone", chromedp.Navigate(s.ConsoleURL+"/runs/"+child), chromedp.WaitVisible(chromedp.ID("run-parent")))
	if problem := js[string](t, phone, noOverflow); problem != "" {
		t.Errorf("the child's page at 390 px: %s", problem)
	}
	do(t, parent, "scroll to the child runs", chromedp.ScrollIntoView(chromedp.ID("children")))
	saveShot(t, "children.png", get(t, parent, "child runs screenshot", chromedp.Screenshot(chromedp.ID("children"))))
	js[bool](t, parent, `window.weftNotReloaded = true`)

	ctx := tab(t)
	do(t, ctx, "follow the link to the child", chromedp.Navigate(s.ConsoleURL+"/runs/fam-7"), chromedp.WaitVisible(chromedp.CSS(row+` a`)),
		again(chromedp.Click(chromedp.CSS(row+` a`))), chromedp.WaitVisible(chromedp.ID("run-parent")))
	if p := get(t, ctx, "parent", chromedp.Text(chromedp.ID("run-parent"))); !strings.Contains(p, "fam-7") || !strings.Contains(p, "1/call_1_1") {
		t.Errorf("the child's parent row says %q", p)
	}
	card := "#" + cardKey("approval", child, "2/call_2_1")
	do(t, ctx, "approve the child's payment on its page", chromedp.WaitVisible(chromedp.CSS(card)),
		typeIn(card+` input[name=credential]`, "ivy"),
		chromedp.Click(chromedp.CSS(card+` button[value=approve]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Approved")`))

	do(t, parent, "the parent's page follows",
		waitJS(`document.querySelector('`+row+` .badge').textContent === "finished"`),
		waitJS(`document.querySelector('`+row+`').textContent.includes("settled: completed")`),
		waitJS(`document.getElementById("run-status").dataset.status === "finished"`))
	if !js[bool](t, parent, `window.weftNotReloaded === true`) {
		t.Error("the parent's page was reloaded")
	}
	if js[bool](t, parent, `!!document.getElementById("run-family")`) {
		t.Error("the family row is still shown once the family finished")
	}
	v := s.WaitStatus(t, "fam-7", "finished")
	if v.Outcome == nil || v.Outcome.Kind != "completed" || len(v.Children) != 1 || v.Children[0].Outcome == nil || v.Children[0].Outcome.Kind != "completed" {
		b, _ := json.Marshal(v)
		t.Fatalf("parent %s", b)
	}
}

// queryCounter counts the query service's run queries for one run, as
// the server sees them (a plain subscriber gets a copy of every request).
type queryCounter struct {
	mu sync.Mutex
	n  int
}

func (s *stack) countRunQueries(t *testing.T, run string) *queryCounter {
	t.Helper()
	qc := &queryCounter{}
	sub, err := s.NC.Subscribe("weft.api.query.run", func(m *nats.Msg) {
		var req struct {
			Run string `json:"run"`
		}
		if json.Unmarshal(m.Data, &req) == nil && req.Run == run {
			qc.mu.Lock()
			qc.n++
			qc.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return qc
}

func (q *queryCounter) count() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// hide makes the tab report itself hidden (or visible again) and tells the
// page, as a browser does when the tab goes to the background.
func hide(t *testing.T, ctx context.Context, hidden bool) {
	t.Helper()
	js[bool](t, ctx, fmt.Sprintf(`(() => {
	  Object.defineProperty(document, "hidden", {configurable: true, get: () => %[1]t});
	  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => %[1]t ? "hidden" : "visible"});
	  document.dispatchEvent(new Event("visibilitychange"));
	  return true;
	})()`, hidden))
}

// TestLiveUpdatesDoNotHammer: pages that show the same run share one
// poll of the query service (four open pages cost what one does), a tab
// in the background asks nothing, and a tab shown again catches up.
func TestLiveUpdatesDoNotHammer(t *testing.T) {
	s := devStack(t)
	s.Start(t, "calm-7", "pay invoice INV-7", "suspended")
	qc := s.countRunQueries(t, "calm-7")
	const poll = time.Second // the console's default, which weft dev uses
	tabs := make([]context.Context, 4)
	for i := range tabs {
		tabs[i] = tab(t)
		do(t, tabs[i], "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/calm-7"),
			waitJS(`document.getElementById("live-status").classList.contains("on")`))
	}
	// Four pages open: the run is asked about about once a poll interval,
	// not four times.
	n0, t0 := qc.count(), time.Now()
	time.Sleep(5 * poll)
	n, elapsed := qc.count()-n0, time.Since(t0)
	t.Logf("four open pages: %d run queries in %v", n, elapsed.Round(time.Millisecond))
	if max := int(elapsed/poll) + 2; n > max {
		t.Errorf("four open pages asked about the run %d times in %v, want at most %d (one poll for all of them)", n, elapsed.Round(time.Millisecond), max)
	}
	// Every tab in the background: nobody asks at all.
	for _, ctx := range tabs {
		hide(t, ctx, true)
		do(t, ctx, "paused", waitJS(`document.getElementById("live-status").classList.contains("paused")`))
	}
	quiet := false
	for deadline := time.Now().Add(45 * time.Second); !quiet && time.Now().Before(deadline); {
		before := qc.count()
		time.Sleep(3 * poll)
		quiet = qc.count() == before
	}
	if !quiet {
		t.Fatal("the run is still asked about while every page showing it is in the background")
	}
	// A change meanwhile; one tab shown again catches up without a reload.
	js[bool](t, tabs[0], `window.weftNotReloaded = true`)
	s.ApproveByAPI(t, "calm-7")
	s.WaitStatus(t, "calm-7", "finished")
	hide(t, tabs[0], false)
	do(t, tabs[0], "caught up",
		waitJS(`document.getElementById("live-status").classList.contains("on")`),
		waitJS(`document.getElementById("run-status").dataset.status === "finished"`))
	if !js[bool](t, tabs[0], `window.weftNotReloaded === true`) {
		t.Error("the page was reloaded")
	}
}

// recordPosts makes the page keep the body of every request it sends, to
// check later that a signing key never left it.
const recordPosts = `(() => {
  window.weftBodies = [];
  const f = window.fetch;
  window.fetch = (u, o) => { if (o && o.body) window.weftBodies.push(String(o.body)); return f(u, o); };
  return true;
})()`

// TestSignedApprovalProof ("10 Least privilege"): against weft
// dev --secure, whose agent's only approver takes signed proofs, the
// approval card asks for the signing key instead of a credential; the page
// signs exactly the request with it — a key the approver does not trust is
// refused not_authenticated, the approver's own key approves — and the key
// is never sent nor written into the page; the run page and its audit
// panel show the recorded proof verified. A rejection is signed too, with
// the key chosen as a file.
func TestSignedApprovalProof(t *testing.T) {
	s := secureStack(t)
	keyFile := filepath.Join(s.Roles, demo.ApproverKeyFile)
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	seed := strings.TrimSpace(string(raw))
	kp, err := nkeys.FromSeed([]byte(seed))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()

	s.Start(t, "sig-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("approval", "sig-7", "2/call_2_1")
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card+` [data-signing-key]`)))
	if !js[bool](t, ctx, `document.querySelector("`+card+` [data-credential]").hidden`) {
		t.Error("the credential field is shown for an approver of signed proofs")
	}
	if got := get(t, ctx, "approver", chromedp.Value(chromedp.CSS(card+` select[name=approver]`))); got != demo.SignedApprover {
		t.Errorf("approver %q, want %q", got, demo.SignedApprover)
	}
	if problems := js[string](t, ctx, a11y); problems != "" {
		t.Errorf("the inbox with a signed approval: %s", problems)
	}
	saveShot(t, "approval-signed.png", get(t, ctx, "signed approval screenshot", chromedp.Screenshot(chromedp.CSS(card))))
	js[bool](t, ctx, recordPosts)

	do(t, ctx, "approve with a key the approver does not trust",
		typeIn(card+` [data-signing-key]`, string(strangerSeed)),
		chromedp.Click(chromedp.CSS(card+` button[value=approve]`)),
		waitJS(`!!document.querySelector("`+card+` [data-result] code.code")`))
	code := get(t, ctx, "code", chromedp.Text(chromedp.CSS(card+` [data-result] code.code`)))
	reason := get(t, ctx, "reason", chromedp.Text(chromedp.CSS(card+` [data-result] code.reason`)))
	if code != "proof_refused" || reason != "not_authenticated" {
		t.Fatalf("a stranger's proof shows %q (%q), want proof_refused (not_authenticated)", code, reason)
	}
	js[bool](t, ctx, `(() => { document.querySelector("`+card+` [data-signing-key]").value = ""; return true })()`)
	do(t, ctx, "approve with the approver's key",
		typeIn(card+` [data-signing-key]`, seed),
		chromedp.Click(chromedp.CSS(card+` button[value=approve]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Approved. Signed with key `+pub+`")`))
	// Read in one evaluation: the answered card may be re-rendered or
	// removed from the inbox at any moment after the approval (reading its
	// field by node id raced that). No field of the page may hold the key.
	if js[bool](t, ctx, `[...document.querySelectorAll("input, textarea")].some((e) => e.value.includes(`+strconv.Quote(seed)+`))`) {
		t.Error("the signing key stays in a field after the approval")
	}
	bodies := js[[]string](t, ctx, `window.weftBodies`)
	if len(bodies) != 2 {
		t.Fatalf("%d posts, want 2", len(bodies))
	}
	for _, b := range bodies {
		if strings.Contains(b, seed) || strings.Contains(b, string(strangerSeed)) || strings.Contains(b, "SU") && strings.Contains(b, "signing") {
			t.Fatalf("a signing key was sent: %s", b)
		}
		if !strings.Contains(b, "proof=%7B") {
			t.Errorf("a post without its proof: %s", b)
		}
	}
	v := s.WaitStatus(t, "sig-7", "finished")
	a := action(t, v, "2/call_2_1")
	if a.State != projections.StateSucceeded || len(a.Approvals) != 1 || a.Approvals[0].Proof == nil || a.Approvals[0].Proof.Key != pub || !a.Approvals[0].Proof.Verified {
		b, _ := json.Marshal(a)
		t.Fatalf("action %s", b)
	}
	answered := s.History(t, "sig-7", events.NameApprovalAnswered)
	if len(answered) != 1 {
		t.Fatalf("%d answers recorded, want 1", len(answered))
	}

	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/sig-7"),
		chromedp.WaitVisible(chromedp.CSS(`#audit-proofs li[data-version="`+fmt.Sprint(answered[0].Version)+`"]`)))
	if html := get(t, ctx, "page source", chromedp.OuterHTML(chromedp.CSS("html"))); strings.Contains(html, seed) {
		t.Fatal("the signing key is written into the run page")
	}
	if p := get(t, ctx, "action's proof", chromedp.Text(chromedp.CSS(`li[data-action="2/call_2_1"] .proof`))); !strings.Contains(p, pub) || !strings.Contains(p, "verifies") {
		t.Errorf("the action shows %q, want the key and that it verifies", p)
	}
	item := get(t, ctx, "audit proof", chromedp.Text(chromedp.CSS(`#audit-proofs li[data-version="`+fmt.Sprint(answered[0].Version)+`"]`)))
	for _, want := range []string{"approve", "2/call_2_1", pub, "demo approver", demo.SignedApprover, "verifies"} {
		if !strings.Contains(item, want) {
			t.Errorf("the audit's proof says %q, want it to contain %q", item, want)
		}
	}
	if verdict := get(t, ctx, "verdict", chromedp.Text(chromedp.CSS(`#audit .verdict`))); !strings.HasPrefix(verdict, "Verified") {
		t.Errorf("audit verdict %q", verdict)
	}
	do(t, ctx, "scroll to the audit", chromedp.ScrollIntoView(chromedp.ID("audit")))
	saveShot(t, "audit-proof.png", get(t, ctx, "audit screenshot", chromedp.Screenshot(chromedp.ID("audit"))))

	// A rejection, signed with the key file.
	s.Start(t, "sig-7r", "pay invoice INV-7", "suspended")
	card = "#" + cardKey("approval", "sig-7r", "2/call_2_1")
	do(t, ctx, "reject with the key file", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card+` [data-signing-file]`)),
		chromedp.SetUploadFiles(chromedp.CSS(card+` [data-signing-file]`), []string{keyFile}),
		// Spaces around it, which the console trims, and two lines (a
		// textarea): the page signs the reason sent.
		typeIn(card+` textarea[name=reason]`, "  paid twice\nsee INV-6  "),
		chromedp.Click(chromedp.CSS(card+` button[value=reject]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Rejected. Signed with key `+pub+`")`))
	v = s.WaitStatus(t, "sig-7r", "finished")
	if a := action(t, v, "2/call_2_1"); a.State != projections.StateRejected || len(a.Approvals) != 1 || a.Approvals[0].Proof == nil || !a.Approvals[0].Proof.Verified || a.Approvals[0].Reason != "paid twice\nsee INV-6" {
		b, _ := json.Marshal(a)
		t.Fatalf("action %s", b)
	}
	// Its proof covers the reason (the v3 digest): the audit does not
	// list it unsigned.
	answered = s.History(t, "sig-7r", events.NameApprovalAnswered)
	var rejected events.ApprovalAnswered
	if len(answered) != 1 || json.Unmarshal(answered[0].Payload, &rejected) != nil || rejected.Proof == nil || rejected.Proof.Reason != "paid twice\nsee INV-6" {
		t.Fatalf("%d answers recorded (the first: %s): want one, its proof stating the reason %q", len(answered), firstPayload(answered), "paid twice\nsee INV-6")
	}
}

// firstPayload is the payload of the first of envs, or nothing.
func firstPayload(envs []events.Envelope) string {
	if len(envs) == 0 {
		return ""
	}
	return string(envs[0].Payload)
}
