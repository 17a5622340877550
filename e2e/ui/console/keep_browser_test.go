package console_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/retention"
)

// TestSemantics14_RestartFromTurnOneOnTheRunPage: on a finished run's
// page, Restart from a step with turn 1 starts a new run whose view
// carries forked_from = the finished run, turn 1 (docs/semantics.md §14);
// the answer links the new run, whose page links its parent and names who
// restarted it (the typed name, unverified: docs/security.md, "Who did
// it"), and the parent's page lists it.
func TestSemantics14_RestartFromTurnOneOnTheRunPage(t *testing.T) {
	s := devStack(t)
	s.Start(t, "rs-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "restart from turn 1", chromedp.Navigate(s.ConsoleURL+"/runs/rs-8"), chromedp.WaitVisible(chromedp.CSS(`#restart-form button[type=submit]`)),
		chromedp.SetValue(chromedp.CSS(`#r-turn`), "1"),
		typeIn(`#r-run`, "rs-8b"),
		typeIn(`#r-reason`, "tool fixed"),
		typeIn(`#r-by`, "dave"),
		chromedp.Click(chromedp.CSS(`#restart-form button[type=submit]`)),
		waitJS(`(document.querySelector("#restart-form [data-result]")||{}).textContent.includes("Restarted run rs-8 from turn 1 as run rs-8b by dave (unverified).")`))
	if href := js[string](t, ctx, `document.querySelector("#restart-form [data-outcome-link]").getAttribute("href")`); href != "/runs/rs-8b" {
		t.Errorf("the answer links %q, want /runs/rs-8b", href)
	}
	v := s.WaitStatus(t, "rs-8b", "finished")
	if v.ForkedFrom == nil || v.ForkedFrom.Run != "rs-8" || v.ForkedFrom.Turn != 1 {
		t.Fatalf("the new run's forked_from: %+v, want run rs-8 turn 1", v.ForkedFrom)
	}
	if r := v.Restarted; r == nil || r.By != "dave" || r.Verified || r.Reason != "tool fixed" {
		t.Fatalf("the new run's restarted: %+v, want dave unverified, reason tool fixed", v.Restarted)
	}
	saveShot(t, "run-restart.png", get(t, ctx, "restart screenshot", chromedp.Screenshot(chromedp.ID("run-restart"))))
	do(t, ctx, "the new run links its parent", chromedp.Navigate(s.ConsoleURL+"/runs/rs-8b"), chromedp.WaitVisible(chromedp.CSS(`#run-forked-from a[href="/runs/rs-8"]`)))
	if text := get(t, ctx, "restarted by", chromedp.Text(chromedp.CSS(`#run-restarted-by`))); text != "by dave (unverified): “tool fixed”" {
		t.Errorf("the new run's page says it was restarted %q, want by dave (unverified) and the reason", text)
	}
	// The parent's forks come from the projector's index of forked_from,
	// which may follow the new run's view by a moment.
	s.waitFork(t, "rs-8", "rs-8b")
	do(t, ctx, "the parent lists its restart", chromedp.Navigate(s.ConsoleURL+"/runs/rs-8"), chromedp.WaitVisible(chromedp.CSS(`#forks li[data-fork="rs-8b"] a[href="/runs/rs-8b"]`)))
}

// TestSemantics14_ARestartSentTwiceAtOnceStartsOneRun: the restart form,
// with no run id typed, sent twice before its first answer (a double
// click) names one new run in both sends, so with its one command id it
// restarts once (docs/semantics.md §14): both answers name the same run,
// and the parent lists exactly one restart.
func TestSemantics14_ARestartSentTwiceAtOnceStartsOneRun(t *testing.T) {
	s := devStack(t)
	s.Start(t, "rd-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/rd-8"), chromedp.WaitVisible(chromedp.CSS(`#restart-form button[type=submit]`)),
		chromedp.SetValue(chromedp.CSS(`#r-turn`), "1"))
	// Each answer replaces the result's text: record every answer's link.
	if !js[bool](t, ctx, `(() => {
		const f = document.getElementById("restart-form"), fetch0 = window.fetch;
		window.restartAnswers = [];
		window.fetch = (...a) => fetch0(...a).then(r => { r.clone().json().then(j => window.restartAnswers.push(j.link || JSON.stringify(j))); return r; });
		f.requestSubmit(); f.requestSubmit();
		return f.dataset.busy === "2" })()`) {
		t.Fatal("the two submits were not both in flight")
	}
	do(t, ctx, "both answered", waitJS(`(() => { const f = document.getElementById("restart-form"); return !f.dataset.busy && window.restartAnswers.length === 2 })()`))
	links := js[[]string](t, ctx, `window.restartAnswers`)
	if len(links) != 2 || links[0] != links[1] || !strings.HasPrefix(links[0], "/runs/") {
		t.Fatalf("the two answers link %q, want one new run", links)
	}
	s.waitFork(t, "rd-8", strings.TrimPrefix(links[0], "/runs/"))
	qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := s.Query.RunFamily(qctx, "rd-8")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Forks) != 1 {
		t.Errorf("the parent lists the restarts %+v, want one", rep.Forks)
	}
}

// TestSemantics14_ARestartRefusedUncertainActionsNamesTheAction: a
// finished run whose payment was recorded as unconfirmed (an open
// question) restarted after it is refused uncertain_actions
// (docs/semantics.md §14): the form shows the code and names the action,
// and no run is started.
func TestSemantics14_ARestartRefusedUncertainActionsNamesTheAction(t *testing.T) {
	s := devStack(t)
	s.Start(t, "ru-13", "pay invoice INV-13", "suspended")
	s.UnconfirmedByAPI(t, "ru-13", "asking the bank")
	v := s.WaitStatus(t, "ru-13", "finished")
	after := strconv.FormatInt(v.Turns+1, 10)
	ctx := tab(t)
	do(t, ctx, "restart after the whole run", chromedp.Navigate(s.ConsoleURL+"/runs/ru-13"), chromedp.WaitVisible(chromedp.CSS(`#restart-form button[type=submit]`)),
		chromedp.SetValue(chromedp.CSS(`#r-turn`), after),
		typeIn(`#r-run`, "ru-13b"),
		chromedp.Click(chromedp.CSS(`#restart-form button[type=submit]`)),
		waitJS(`!!document.querySelector("#restart-form [data-result] code.code")`))
	if code := js[string](t, ctx, `document.querySelector("#restart-form [data-result] code.code").textContent`); code != string(weft.CodeUncertainActions) {
		t.Errorf("the refusal shows code %q, want uncertain_actions", code)
	}
	if text := js[string](t, ctx, `document.querySelector("#restart-form [data-result]").textContent`); !strings.Contains(text, "2/call_2_1") {
		t.Errorf("the refusal %q does not name the uncertain action 2/call_2_1", text)
	}
	qctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Query.Run(qctx, "ru-13b"); !errors.Is(err, &weft.Error{Code: weft.CodeUnknownRun}) {
		t.Errorf("the refused restart's run: %v, want unknown_run", err)
	}
}

// TestRetentionHoldPlacedAndReleasedFromTheRunPage: "Place a legal hold"
// places one (docs/security.md, "Retention and legal hold"): the page
// lists it as active with who and why, and its Release releases it, after
// which the page lists it released and the run has no active hold. The
// list is read again after each answer, without a reload.
func TestRetentionHoldPlacedAndReleasedFromTheRunPage(t *testing.T) {
	s := devStack(t)
	s.Start(t, "hl-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "place a hold", chromedp.Navigate(s.ConsoleURL+"/runs/hl-8"), chromedp.WaitVisible(chromedp.CSS(`#holds-none`)),
		typeIn(`#h-reason`, "litigation L-7"),
		typeIn(`#h-by`, "carol"),
		chromedp.Click(chromedp.CSS(`#hold-form button[type=submit]`)),
		waitJS(`(document.querySelector("#hold-form [data-result]")||{}).textContent.includes("Hold h1 placed on run hl-8 by carol (unverified)")`))
	// The list is read again after the answer, without a reload: it no
	// longer says the run has no hold.
	do(t, ctx, "the page lists it", chromedp.WaitVisible(chromedp.CSS(`#holds li[data-hold=h1][data-active=true]`)))
	if n := js[int](t, ctx, `document.querySelectorAll("#holds-none").length`); n != 0 {
		t.Error("after the hold was placed the page still says the run has no hold")
	}
	if text := get(t, ctx, "hold", chromedp.Text(chromedp.CSS(`#holds li[data-hold=h1]`))); !strings.Contains(text, "by carol (unverified)") || !strings.Contains(text, "litigation L-7") {
		t.Errorf("the hold shows %q, want who (by carol (unverified)) and why", text)
	}
	if hs := s.holds(t, "hl-8"); len(hs) != 1 || !hs[0].Active() || hs[0].By != "carol" || hs[0].Verified {
		t.Fatalf("holds after placing: %+v, want one active, by carol unverified", hs)
	}
	saveShot(t, "run-holds.png", get(t, ctx, "holds screenshot", chromedp.Screenshot(chromedp.ID("holds"))))
	do(t, ctx, "release it",
		typeIn(`#rh-h1-reason`, "settled"),
		typeIn(`#rh-h1-by`, "dave"),
		chromedp.Click(chromedp.CSS(`#holds li[data-hold=h1] button[type=submit]`)),
		waitJS(`document.getElementById("notices").textContent.includes("Hold h1 of run hl-8 released by dave (unverified)")`))
	do(t, ctx, "the page lists it released", chromedp.WaitVisible(chromedp.CSS(`#holds li[data-hold=h1][data-active=false]`)))
	if text := get(t, ctx, "released hold", chromedp.Text(chromedp.CSS(`#holds li[data-hold=h1]`))); !strings.Contains(text, "released by dave (unverified)") {
		t.Errorf("the released hold shows %q, want who released it", text)
	}
	if n := js[int](t, ctx, `document.querySelectorAll("#holds li[data-active=true]").length`); n != 0 {
		t.Errorf("%d active holds shown after the release", n)
	}
	if hs := s.holds(t, "hl-8"); len(hs) != 1 || hs[0].Active() || hs[0].Released.By != "dave" || hs[0].Released.Verified {
		t.Fatalf("holds after the release: %+v", hs)
	}
}

// TestRetentionAHoldIsIdempotentByCommandID: the hold form sent twice
// before its first answer (a double click) sends one command id, and the
// run gets one hold (docs/security.md, "Retention and legal hold": a
// retry with the same command id answers the same hold).
func TestRetentionAHoldIsIdempotentByCommandID(t *testing.T) {
	s := devStack(t)
	s.Start(t, "hd2-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "place a hold twice at once", chromedp.Navigate(s.ConsoleURL+"/runs/hd2-8"), chromedp.WaitVisible(chromedp.CSS(`#holds-none`)),
		typeIn(`#h-reason`, "audit A-2"),
		typeIn(`#h-by`, "erin"))
	// Both submits leave before either answer: the second is what a
	// second click sends while the first is in flight.
	if !js[bool](t, ctx, `(() => { const f = document.getElementById("hold-form"); f.requestSubmit(); f.requestSubmit(); return f.dataset.busy === "2" })()`) {
		t.Fatal("the two submits were not both in flight")
	}
	do(t, ctx, "both answered", waitJS(`(() => { const f = document.getElementById("hold-form"); return !f.dataset.busy && f.querySelector("[data-result]").textContent.includes(" placed on run hd2-8") })()`))
	if hs := s.holds(t, "hd2-8"); len(hs) != 1 || !hs[0].Active() {
		t.Fatalf("holds after a double submit: %+v, want one active hold", hs)
	}
	do(t, ctx, "the page lists one", chromedp.Navigate(s.ConsoleURL+"/runs/hd2-8"), chromedp.WaitVisible(chromedp.CSS(`#holds li[data-hold=h1]`)))
	if n := js[int](t, ctx, `document.querySelectorAll("#holds li[data-hold]").length`); n != 1 {
		t.Errorf("the page lists %d holds, want 1", n)
	}
}

// holds reads the run's legal holds from weft_holds.
func (s *stack) holds(t *testing.T, run string) []retention.Hold {
	t.Helper()
	jsc, err := jetstream.New(s.NC)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs, err := retention.HoldsOf(ctx, jsc, run)
	if err != nil {
		t.Fatal(err)
	}
	return hs
}

// waitFork waits (45 s at most) until the run's query lists fork among
// its restarts.
func (s *stack) waitFork(t *testing.T, run, fork string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rep, err := s.Query.RunFamily(ctx, run)
		cancel()
		if err == nil && slices.ContainsFunc(rep.Forks, func(f projector.Fork) bool { return f.Run == fork }) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("run %s never listed its restart %s", run, fork)
}

// TestRetentionTheOperatorsConsoleSaysHoldsAreNotKnown: with roles, the
// console connects as the operator, which may neither read weft_holds nor
// place a hold (docs/security.md, "Retention and legal hold": only the
// custodian may): the run page says the holds are not known — never that
// the run has none — and its hold form shows the refusal's code.
func TestRetentionTheOperatorsConsoleSaysHoldsAreNotKnown(t *testing.T) {
	s := secureStack(t)
	s.Start(t, "sh-8", "pay invoice INV-8", "finished")
	ctx := tab(t)
	do(t, ctx, "place a hold as the operator", chromedp.Navigate(s.ConsoleURL+"/runs/sh-8"), chromedp.WaitVisible(chromedp.CSS(`#holds-unknown`)),
		typeIn(`#h-reason`, "litigation L-9"),
		typeIn(`#h-by`, "carol"),
		chromedp.Click(chromedp.CSS(`#hold-form button[type=submit]`)),
		waitJS(`!!document.querySelector("#hold-form [data-result] code.code")`))
	if text := get(t, ctx, "holds unknown", chromedp.Text(chromedp.CSS(`#holds-unknown`))); !strings.Contains(text, "may not read weft_holds") {
		t.Errorf("the page says %q, want that the console's credentials may not read weft_holds", text)
	}
	if n := js[int](t, ctx, `document.querySelectorAll("#holds-none").length`); n != 0 {
		t.Error("the page says the run has no hold while it cannot read them")
	}
	if code := js[string](t, ctx, `document.querySelector("#hold-form [data-result] code.code").textContent`); code != string(weft.CodePermissionDenied) {
		t.Errorf("the operator's hold shows code %q, want permission_denied", code)
	}
}
