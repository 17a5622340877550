package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// docs/semantics.md §4, a batch decision from the console: the person
// selects pending approvals with checkboxes, reviews a summary (count,
// runs, total amount) before confirming, types the credential once, and
// reads an outcome per request; each run's approval is recorded.
func TestSemantics4_ConsoleAnswersSeveralApprovals(t *testing.T) {
	s := devStack(t)
	for _, run := range []string{"bt-1", "bt-2", "bt-3"} {
		s.Start(t, run, "pay invoice INV-7", "suspended")
	}
	ctx := tab(t)
	box := func(run string) string { return `tr[data-item="` + run + ` 2/call_2_1 1"] input[type=checkbox]` }
	do(t, ctx, "open the batch page", chromedp.Navigate(s.ConsoleURL+"/batch"), chromedp.WaitVisible(chromedp.CSS(box("bt-3"))))
	if problems := js[string](t, ctx, a11y); problems != "" {
		t.Errorf("/batch: %s", problems)
	}
	do(t, ctx, "select two", chromedp.Click(chromedp.CSS(box("bt-1"))), chromedp.Click(chromedp.CSS(box("bt-2"))),
		chromedp.Click(chromedp.CSS("#batch-review")), chromedp.WaitVisible(chromedp.ID("batch-summary")))
	if got, want := js[string](t, ctx, `document.getElementById("batch-summary").textContent`), "Approve 2 approvals of 2 runs, total amount 2400."; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	do(t, ctx, "confirm", typeIn("#b-credential", "alice"), chromedp.Click(chromedp.CSS("#batch-confirm")), chromedp.WaitVisible(chromedp.ID("batch-done")))
	if got := js[string](t, ctx, `document.getElementById("batch-done").textContent`); got != "2 of 2 answered." {
		t.Fatalf("outcome %q", got)
	}
	if n := js[int](t, ctx, `document.querySelectorAll('tr[data-outcome="answered"]').length`); n != 2 {
		t.Fatalf("%d answered rows, want 2", n)
	}
	for _, run := range []string{"bt-1", "bt-2"} {
		v := s.WaitStatus(t, run, "finished")
		if a := action(t, v, "2/call_2_1"); len(a.Approvals) != 1 || a.Approvals[0].Answer != "approve" || a.Approvals[0].Reviewer != "alice" {
			t.Fatalf("%s: approvals %+v", run, a.Approvals)
		}
	}
	for _, ap := range action(t, s.WaitStatus(t, "bt-3", "suspended"), "2/call_2_1").Approvals {
		if ap.Answer != "" {
			t.Fatalf("bt-3, not selected, was answered: %+v", ap)
		}
	}
	s.ApproveByAPI(t, "bt-3")
}
