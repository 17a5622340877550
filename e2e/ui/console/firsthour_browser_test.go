package console_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The first hour, the console's Runs page: it updates by itself — the live
// stream's fingerprint is not read as the "Changed since" filter (every
// load said "Weft did not answer (bad_filter(updated_since) …)") — and a
// filter the person set stays the stream's filter.
func TestFirstHour_RunsPageUpdatesByItself(t *testing.T) {
	s := devStack(t)
	s.Start(t, "fh-runs-1", "pay invoice INV-8", "finished")
	ctx := tab(t)
	for i, path := range []string{"/runs", "/runs?status=finished&since=2000-01-01T00:00&tz=0"} {
		run := []string{"fh-runs-2", "fh-runs-3"}[i]
		do(t, ctx, "open "+path, chromedp.Navigate(s.ConsoleURL+path),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-run="fh-runs-1"]`)),
			waitJS(`document.getElementById("live-status").classList.contains("on")`))
		js[bool](t, ctx, `window.weftNotReloaded = true`)
		s.Start(t, run, "pay invoice INV-8", "finished")
		do(t, ctx, path+": the new run appears", waitJS(`!!document.querySelector('tr[data-run="`+run+`"]')`))
		if !js[bool](t, ctx, `window.weftNotReloaded === true`) {
			t.Errorf("%s: the page was reloaded", path)
		}
		if st := js[string](t, ctx, `document.getElementById("live-status").textContent`); strings.Contains(st, "did not answer") {
			t.Errorf("%s: the live status says %q", path, st)
		}
	}
}

// The first hour, the Runs page at 390 px wide: the table's caption spans
// the list (it broke one letter per line), and the run-id field's pattern
// is one Chromium compiles (HTML patterns use the v flag: "-" at the end of
// a class must be escaped; an invalid pattern is ignored), so that a run id
// with a space is flagged before it is sent.
func TestFirstHour_RunsPageAtPhoneWidth(t *testing.T) {
	s := devStack(t)
	s.Start(t, "fh-phone-1", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)),
		chromedp.Navigate(s.ConsoleURL+"/runs"), chromedp.WaitVisible(chromedp.CSS(`tr[data-run="fh-phone-1"]`)))
	if problem := js[string](t, ctx, `(() => {
  const c = document.querySelector("table.runs caption"), tb = document.querySelector("table.runs");
  const cw = c.getBoundingClientRect().width, tw = tb.getBoundingClientRect().width;
  return cw >= tw - 2 ? "" : "caption " + Math.round(cw) + "px wide in a " + Math.round(tw) + "px table";
})()`); problem != "" {
		t.Error(problem)
	}
	for _, c := range []struct {
		id       string
		mismatch bool
	}{{"pay-9_b", false}, {"pay 9", true}} {
		got := js[bool](t, ctx, `(() => { const i = document.getElementById("s-run"); i.value = `+jsString(c.id)+`; return i.validity.patternMismatch })()`)
		if got != c.mismatch {
			t.Errorf("run id %q: patternMismatch %v, want %v", c.id, got, c.mismatch)
		}
	}
}

// The first hour, starting runs from the Runs page: after a start the
// Start button works again (it stayed disabled), with a new command id,
// so a second run starts from the same form.
func TestFirstHour_StartButtonStartsAgain(t *testing.T) {
	s := devStack(t)
	ctx := tab(t)
	form := `form[action="/act/start"]`
	do(t, ctx, "open the runs", chromedp.Navigate(s.ConsoleURL+"/runs"), chromedp.WaitVisible(chromedp.CSS(form)))
	for _, run := range []string{"fh-start-1", "fh-start-2"} {
		do(t, ctx, "start "+run,
			chromedp.SetValue(chromedp.CSS(form+` input[name=run]`), run),
			chromedp.SetValue(chromedp.CSS(form+` input[name=input]`), "pay invoice INV-8"),
			chromedp.Click(chromedp.CSS(form+` button[type=submit]`)),
			waitJS(`(document.querySelector('`+form+` [data-result]')||{}).textContent.includes("Started run `+run+`.")`),
			waitJS(`!document.querySelector('`+form+`[data-busy]')`))
		if js[bool](t, ctx, `document.querySelector('`+form+` button[type=submit]').disabled`) {
			t.Fatalf("after starting %s the Start button is disabled", run)
		}
		s.WaitStatus(t, run, "finished")
	}
}

// The first hour: a reconciliation output form sent without its required
// field says "Not sent." once, then why (it read "Not sent. Not sent: id
// is required.").
func TestFirstHour_NotSentSaysItOnce(t *testing.T) {
	s := devStack(t)
	s.Start(t, "fh-ns-13", "pay invoice INV-13", "suspended")
	ctx := tab(t)
	card := "#" + cardKey("uncertain", "fh-ns-13", "2/call_2_1")
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(card)))
	do(t, ctx, "send without the id",
		typeIn(card+` input[name="out.status"]`, "sent"),
		chromedp.Click(chromedp.CSS(card+` button[type=submit]`)),
		waitJS(`(document.querySelector("`+card+` [data-result]")||{}).textContent.includes("Not sent.")`))
	got := js[string](t, ctx, `document.querySelector("`+card+` [data-result]").textContent`)
	if want := "Not sent. The tool's output: id is required."; got != want {
		t.Errorf("the form says %q, want %q", got, want)
	}
	s.reconcileByAPI(t, "fh-ns-13")
}

// The first hour: the run page shows a finished run's answer as the text
// the agent answered, not as escaped JSON.
func TestFirstHour_RunPageShowsTheAnswerAsText(t *testing.T) {
	s := devStack(t)
	v := s.Start(t, "fh-ans-8", "pay invoice INV-8", "finished")
	var want string
	if v.Outcome == nil || json.Unmarshal(v.Outcome.Answer, &want) != nil || want == "" {
		t.Fatalf("the demo's run has no text answer: %+v", v.Outcome)
	}
	ctx := tab(t)
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/fh-ans-8"), chromedp.WaitVisible(chromedp.ID("run-answer")))
	if got := js[string](t, ctx, `document.getElementById("run-answer").textContent`); got != want {
		t.Errorf("the run page's answer is %q, want %q", got, want)
	}
	if got := js[string](t, ctx, `(document.querySelector(".outcome-text")||{}).textContent || ""`); strings.Contains(got, `\"`) || strings.Contains(got, "answer=") {
		t.Errorf("the outcome still shows the answer as JSON: %q", got)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
