package console_test

import (
	"testing"

	"github.com/chromedp/chromedp"
)

// TestSemantics13_PauseAndResumeFromTheRunPage: on the run page of a run
// waiting for approval, Pause run pauses it (docs/semantics.md §13: the
// view says paused, the page says by whom and why), and Resume run — the
// button the paused page offers instead — resumes it.
func TestSemantics13_PauseAndResumeFromTheRunPage(t *testing.T) {
	s := devStack(t)
	s.Start(t, "pz-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	do(t, ctx, "pause", chromedp.Navigate(s.ConsoleURL+"/runs/pz-7"), chromedp.WaitVisible(chromedp.CSS(`#run-pause button[value=pause]`)),
		typeIn(`#p-reason`, "checking the vendor"),
		typeIn(`#p-by`, "alice"),
		chromedp.Click(chromedp.CSS(`#run-pause button[value=pause]`)),
		waitJS(`(document.querySelector("#run-pause [data-result]")||{}).textContent.includes("Paused.")`))
	if v := s.WaitStatus(t, "pz-7", "paused"); v.Pause == nil || v.Pause.By != "alice" || v.Pause.Reason != "checking the vendor" {
		t.Fatalf("pause in the view: %+v", v.Pause)
	}
	do(t, ctx, "resume", chromedp.Navigate(s.ConsoleURL+"/runs/pz-7"), chromedp.WaitVisible(chromedp.CSS(`#run-pause button[value=resume]`)),
		waitJS(`document.getElementById("paused-note").textContent.includes("by alice (unverified): “checking the vendor”")`),
		chromedp.Click(chromedp.CSS(`#run-pause button[value=resume]`)),
		waitJS(`(document.querySelector("#run-pause [data-result]")||{}).textContent.includes("Resumed.")`))
	if v := s.WaitStatus(t, "pz-7", "suspended"); v.Pause != nil {
		t.Fatalf("resumed run still has a pause: %+v", v.Pause)
	}
}
