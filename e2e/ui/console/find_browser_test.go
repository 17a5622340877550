package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/model"
)

// The amounts stack: the demo's payment desk (tools, policy: approval
// above 100 EUR, approver desk) driven by a model that pays the amount its
// input names ("pay 500"), so that pending approvals differ by amount; on
// a stack of its own, so that its inbox holds only its tests' items.
func amountsStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "amounts", func() (*consolestack.Stack, error) {
		m := model.NewRules("pay-amount",
			model.Rule{Name: "report the payment", Match: func(req model.Request) bool { _, ok := model.ResultOf(req, "send_payment"); return ok },
				Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
					c, _ := model.ResultOf(req, "send_payment")
					return model.Answer("Payment result: "+string(c))(ctx, req)
				}},
			model.Rule{Name: "pay the amount", Match: func(model.Request) bool { return true },
				Step: func(ctx context.Context, req model.Request) (model.Reply, error) {
					n, _ := strconv.ParseInt(strings.TrimPrefix(req.Transcript[0].Text, "pay "), 10, 64)
					args, _ := json.Marshal(demo.SendPayment{Invoice: "INV-A" + strconv.FormatInt(n, 10), Payee: "ACME Ltd", Amount: n, Currency: "EUR"})
					return model.CallTools(model.Call("send_payment", string(args)))(ctx, req)
				}},
		)
		a, err := agent.New(demo.AgentName, m, demo.Tools(), demo.Policy(), agent.WithApprovers(approvers.Trusting(demo.Approver))).Build()
		if err != nil {
			return nil, err
		}
		return consolestack.Hosted("amounts", a)
	})}
}

// cardRuns lists the runs of the cards in an inbox section, in page order.
func cardRuns(t *testing.T, ctx context.Context, section string) []string {
	t.Helper()
	return js[[]string](t, ctx, `Array.from(document.querySelectorAll("#`+section+`-cards article.card")).map(a => a.querySelector("form input[name=run]").value)`)
}

// docs/console.md, "Inbox": the filters (tool, requirement, older than,
// amount range) narrow the inbox and are the page's URL, so a filtered
// inbox can be shared; a filter nothing passes says so; the batch page
// takes the same filters, and "Select all shown" answers exactly the
// approvals it showed — the others stay pending, among them one that
// matches the filters but arrived after the page was drawn
// (docs/semantics.md §4: no batch answers an item it was not given).
func TestConsoleFiltersNarrowTheInboxAndTheBatchPage(t *testing.T) {
	s := amountsStack(t)
	runs := map[int]string{150: "am-150", 500: "am-500", 700: "am-700", 2000: "am-2000"}
	for _, n := range []int{150, 500, 700, 2000} {
		s.Start(t, runs[n], "pay "+strconv.Itoa(n), "suspended")
	}
	ctx := tab(t)
	do(t, ctx, "filter the inbox by amount", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.ID("f-open")),
		chromedp.Click(chromedp.ID("f-open")), chromedp.WaitVisible(chromedp.ID("f-min")),
		typeIn("#f-min", "400"), typeIn("#f-max", "1000"), chromedp.KeyEvent(kb.Enter),
		chromedp.WaitVisible(chromedp.ID("filter-note")))
	if got, want := js[string](t, ctx, `location.search`), "?tool=&requirement=&older_than=&min_amount=400&max_amount=1000"; got != want {
		t.Errorf("the filtered inbox's URL query is %q, want %q", got, want)
	}
	if got := cardRuns(t, ctx, "approvals"); !slices.Equal(got, []string{"am-500", "am-700"}) {
		t.Fatalf("approvals shown for amounts 400..1000: %v, want am-500 and am-700", got)
	}
	saveShot(t, "inbox-filters.png", get(t, ctx, "filtered inbox screenshot", chromedp.CaptureScreenshot()))
	shared := map[string][]string{
		"/?tool=send_payment&min_amount=1000":                          {"am-2000"},
		"/?max_amount=400":                                             {"am-150"},
		"/?requirement=" + demo.Requirement + "@v1":                    {"am-150", "am-500", "am-700", "am-2000"},
		"/?requirement=" + demo.Requirement:                            {"am-150", "am-500", "am-700", "am-2000"},
		"/?tool=refund":                                                nil,
		"/?requirement=" + demo.Requirement + "@v2":                    nil,
		"/?older_than=8760h":                                           nil,
		"/?item=am-700/" + action1(t, s, "am-700") + "&max_amount=400": nil,
	}
	for u, want := range shared {
		do(t, ctx, "open "+u, chromedp.Navigate(s.ConsoleURL+u), chromedp.WaitVisible(chromedp.ID("filter-note")))
		if got := cardRuns(t, ctx, "approvals"); !slices.Equal(got, want) {
			t.Errorf("%s shows %v, want %v", u, got, want)
		}
		if want == nil {
			if got := js[string](t, ctx, `document.querySelector("#approvals .empty").textContent`); got != "No approval matches the filters." {
				t.Errorf("%s says %q when nothing passes", u, got)
			}
		}
	}
	for _, q := range []string{"older_than=soon", "older_than=-1h", "min_amount=many", "max_amount=many", "item=am-700"} {
		for _, page := range []string{"/?", "/batch?"} {
			if resp, body := s.Get(t, page+q); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "bad_filter") {
				t.Errorf("%s%s, a filter that does not parse: %d, bad_filter shown %v", page, q, resp.StatusCode, strings.Contains(body, "bad_filter"))
			}
		}
	}

	do(t, ctx, "answer the filtered approvals together", chromedp.Navigate(s.ConsoleURL+"/?min_amount=400&max_amount=1000"),
		chromedp.WaitVisible(chromedp.ID("batch-these")), chromedp.Click(chromedp.ID("batch-these")),
		chromedp.WaitVisible(chromedp.ID("batch-all")))
	if got := js[[]string](t, ctx, `Array.from(document.querySelectorAll("tr[data-item]")).map(r => r.dataset.item.split(" ")[0])`); !slices.Equal(got, []string{"am-500", "am-700"}) {
		t.Fatalf("the batch page shows %v, want am-500 and am-700", got)
	}
	// An approval that matches the filters arrives after the page is drawn:
	// the person never saw it, so "Select all shown" must leave it out.
	s.Start(t, "am-800", "pay 800", "suspended")
	do(t, ctx, "select all shown", chromedp.Click(chromedp.ID("batch-all")), chromedp.WaitVisible(chromedp.ID("batch-summary")))
	if got, want := js[string](t, ctx, `document.getElementById("batch-summary").textContent`), "Approve 2 approvals of 2 runs, total amount 1200."; got != want {
		t.Fatalf("summary %q, want %q", got, want)
	}
	if got := js[string](t, ctx, `new URL(document.getElementById("batch-back").href).search`); got != "?max_amount=1000&min_amount=400" {
		t.Errorf("Back from the review goes to %q, want the filtered selection", got)
	}
	do(t, ctx, "confirm", typeIn("#b-credential", "alice"), chromedp.Click(chromedp.ID("batch-confirm")), chromedp.WaitVisible(chromedp.ID("batch-done")))
	if got := js[string](t, ctx, `document.getElementById("batch-done").textContent`); got != "2 of 2 answered." {
		t.Fatalf("outcome %q", got)
	}
	for _, run := range []string{"am-500", "am-700"} {
		s.WaitStatus(t, run, "finished")
	}
	for _, run := range []string{"am-150", "am-2000", "am-800"} {
		v := s.WaitStatus(t, run, "suspended")
		if len(v.Approvals) != 1 {
			t.Errorf("%s, not shown, has approvals %v pending, want its one", run, v.Approvals)
		}
	}
	if _, body := s.Get(t, "/batch?min_amount=400&max_amount=1000"); !strings.Contains(body, `data-item="am-800 `) || strings.Contains(body, `data-item="am-500 `) || strings.Contains(body, `data-item="am-700 `) {
		t.Errorf("the batch page drawn again does not show exactly am-800, the approval that arrived later")
	}
}

// action1 is the action of a run's one pending approval.
func action1(t *testing.T, s *stack, run string) string {
	t.Helper()
	v := s.WaitStatus(t, run, "suspended")
	if len(v.Approvals) != 1 {
		t.Fatalf("%s: approvals %v", run, v.Approvals)
	}
	return v.Approvals[0]
}

// docs/console.md, "Runs": the search finds a run by its exact id and the
// runs whose id starts with what was typed; nothing found says so.
func TestConsoleRunSearchFindsByIDAndPrefix(t *testing.T) {
	s := devStack(t)
	for _, run := range []string{"srch-alpha-1", "srch-alpha-2", "srch-beta"} {
		s.Start(t, run, "pay invoice INV-8", "finished")
	}
	ctx := tab(t)
	rows := func() []string {
		return js[[]string](t, ctx, `Array.from(document.querySelectorAll("#runs-table tr[data-run]")).map(r => r.dataset.run)`)
	}
	do(t, ctx, "search a prefix", chromedp.Navigate(s.ConsoleURL+"/runs"), chromedp.WaitVisible(chromedp.ID("f-q")),
		typeIn("#f-q", "srch-alpha"), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("search-note")))
	got := rows()
	slices.Sort(got)
	if !slices.Equal(got, []string{"srch-alpha-1", "srch-alpha-2"}) {
		t.Fatalf("search srch-alpha found %v", got)
	}
	saveShot(t, "runs-search.png", get(t, ctx, "run search screenshot", chromedp.CaptureScreenshot()))
	do(t, ctx, "search an id", chromedp.Navigate(s.ConsoleURL+"/runs?q=srch-beta"), chromedp.WaitVisible(chromedp.ID("search-note")))
	if got := rows(); !slices.Equal(got, []string{"srch-beta"}) {
		t.Fatalf("search srch-beta found %v", got)
	}
	if note := js[string](t, ctx, `document.getElementById("search-note").textContent`); !strings.Contains(note, "the run with that id") {
		t.Errorf("the exact match is not said: %q", note)
	}
	do(t, ctx, "search nothing", chromedp.Navigate(s.ConsoleURL+"/runs?q=srch-none"), chromedp.WaitVisible(chromedp.ID("search-note")))
	if got := js[string](t, ctx, `document.querySelector("#runs-table .empty").textContent`); got != "No run matches." {
		t.Errorf("an empty search says %q", got)
	}
}

// docs/console.md, "Inbox": every card has a shareable link that opens the
// inbox narrowed to that item, the card focused; "Copy link" copies it
// (with the keyboard: Enter on the link).
func TestConsoleSharedLinkOpensTheItemFocused(t *testing.T) {
	s := devStack(t)
	for _, run := range []string{"lk-7", "lk-7b", "lk-7c"} {
		t.Cleanup(func() { s.ApproveByAPI(t, run) })
	}
	s.Start(t, "lk-7", "pay invoice INV-7", "suspended")
	s.Start(t, "lk-7b", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	key := cardKey("approval", "lk-7", "2/call_2_1")
	link := `#` + key + ` a[data-copy-link]`
	do(t, ctx, "grant the clipboard", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, name := range []string{"clipboard-read", "clipboard-write"} {
			if _, err := cdp.Call(ctx, tg, browser.SetPermission, browser.SetPermissionParams{Permission: &browser.PermissionDescriptor{Name: name}, Setting: browser.PermissionSettingGranted}); err != nil {
				return err
			}
		}
		return nil
	}))
	do(t, ctx, "open the inbox", chromedp.Navigate(s.ConsoleURL+"/"), chromedp.WaitVisible(chromedp.CSS(link)),
		chromedp.Focus(chromedp.CSS(link)), chromedp.KeyEvent(kb.Enter),
		waitJS(`document.querySelector("#`+key+` [data-copied]").textContent === "Link copied."`))
	want := s.ConsoleURL + "/?item=lk-7%2F2%2Fcall_2_1#" + key
	if got := get(t, ctx, "read the clipboard", chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise)); got != want {
		t.Fatalf("copied %q, want %q", got, want)
	}
	do(t, ctx, "open the link", chromedp.Navigate(want), chromedp.WaitVisible(chromedp.CSS("#"+key)),
		waitJS(`document.activeElement && document.activeElement.id === "`+key+`"`))
	if got := cardRuns(t, ctx, "approvals"); !slices.Equal(got, []string{"lk-7"}) {
		t.Errorf("the shared link shows %v, want lk-7's card only", got)
	}
	// The card keeps its focus and outline across a live refresh: another
	// run's approval changes the inbox while the linked card is open.
	do(t, ctx, "wait for the live stream", waitJS(`document.getElementById("live-status").classList.contains("on")`))
	before := js[string](t, ctx, `document.body.dataset.updated || ""`)
	s.Start(t, "lk-7c", "pay invoice INV-7", "suspended")
	do(t, ctx, "wait for a live refresh", waitJS(`(document.body.dataset.updated || "") !== "`+before+`"`))
	if got := js[string](t, ctx, `document.activeElement.id + (document.activeElement.hasAttribute("data-linked") ? " outlined" : "")`); got != key+" outlined" {
		t.Errorf("after a live refresh the focus is on %q, want the linked card %s, outlined", got, key)
	}
}

// docs/console.md, "Inbox": a link whose fragment is malformed (not
// percent-decodable) still opens a live inbox.
func TestConsoleMalformedFragmentKeepsLiveUpdates(t *testing.T) {
	s := devStack(t)
	ctx := tab(t)
	do(t, ctx, "open a malformed link", chromedp.Navigate(s.ConsoleURL+"/#%E0"),
		waitJS(`document.getElementById("live-status").classList.contains("on")`))
}

// docs/console.md, "Run page": Download history serves the bytes `weft
// audit export <run>` writes, named <run>.jsonl, and `weft audit verify
// --file` passes on them.
func TestConsoleHistoryDownloadIsTheAuditExport(t *testing.T) {
	s := devStack(t)
	s.Start(t, "hd-8", "pay invoice INV-8", "finished")
	bin := weftBinary(t)
	ctx := tab(t)
	do(t, ctx, "open the run", chromedp.Navigate(s.ConsoleURL+"/runs/hd-8"), chromedp.WaitVisible(chromedp.ID("history-download")))
	href := js[string](t, ctx, `document.getElementById("history-download").href`)
	resp, err := http.Get(href)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got bytes.Buffer
	if _, err := got.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if cd := resp.Header.Get("Content-Disposition"); resp.StatusCode != http.StatusOK || cd != "attachment; filename=hd-8.jsonl" {
		t.Fatalf("download: %d, Content-Disposition %q", resp.StatusCode, cd)
	}
	weftCmd := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"NATS_URL=" + s.NC.ConnectedUrl(), "HOME=" + t.TempDir()}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("weft %v: %v\n%s", args, err, stderr.String())
		}
		return string(out), nil
	}
	export, err := weftCmd("audit", "export", "hd-8")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != export {
		t.Fatalf("the download differs from weft audit export:\n%s\nwant\n%s", got.String(), export)
	}
	file := filepath.Join(t.TempDir(), "hd-8.jsonl")
	if err := os.WriteFile(file, got.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := weftCmd("audit", "verify", "--file", file); err != nil {
		t.Fatalf("the download does not verify: %v", err)
	}
	if resp, _ := s.Get(t, "/runs/hd-none/history"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the history of an unknown run: %d, want 404", resp.StatusCode)
	}
}

// docs/console.md, "Times, keyboard, screens": every control this page
// set adds is reached with Tab and works with Enter — the inbox filters
// and a card's Copy link, the batch page's Select all shown, the run
// search, Download history.
func TestConsoleFindControlsWorkFromTheKeyboard(t *testing.T) {
	s := devStack(t)
	t.Cleanup(func() { s.ApproveByAPI(t, "kf-7") })
	s.Start(t, "kf-7", "pay invoice INV-7", "suspended")
	ctx := tab(t)
	// reach opens page and tabs from its top ("": from the focus on the
	// page open) until each id (or, for "copy", a Copy link) had the
	// focus, in that order.
	reach := func(page string, ids ...string) {
		t.Helper()
		if page != "" { // "": go on from the focus on the page open
			do(t, ctx, "open "+page, chromedp.Navigate(s.ConsoleURL+page), chromedp.WaitReady(chromedp.CSS("body")))
		}
		for _, id := range ids {
			focused := ""
			for i := 0; i < 80 && focused != id; i++ {
				do(t, ctx, "tab", chromedp.KeyEvent(kb.Tab))
				focused = js[string](t, ctx, `document.activeElement.hasAttribute("data-copy-link") ? "copy" : document.activeElement.id`)
			}
			if focused != id {
				t.Fatalf("%s: Tab never reached %s", page, id)
			}
		}
	}
	reach("/", "f-open")
	do(t, ctx, "open the filters with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("f-tool")))
	reach("", "f-tool", "f-requirement", "f-older", "f-min", "f-max", "f-apply", "f-clear", "batch-these", "copy")
	do(t, ctx, "copy with Enter", chromedp.KeyEvent(kb.Enter), waitJS(`document.activeElement.parentNode.querySelector("[data-copied]").textContent !== ""`))
	reach("/", "f-open")
	do(t, ctx, "open the filters with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("f-tool")))
	reach("", "f-tool")
	do(t, ctx, "filter with Enter", chromedp.KeyEvent("send_payment"), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("filter-note")))
	if got := js[string](t, ctx, `new URLSearchParams(location.search).get("tool")`); got != "send_payment" {
		t.Errorf("the filter typed is %q in the URL", got)
	}
	reach("/batch?tool=send_payment", "f-tool", "batch-review", "batch-all")
	do(t, ctx, "select all shown with Enter", chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("batch-summary")))
	reach("/runs", "f-q")
	do(t, ctx, "search with Enter", chromedp.KeyEvent("kf-7"), chromedp.KeyEvent(kb.Enter), chromedp.WaitVisible(chromedp.ID("search-note")))
	if got := js[string](t, ctx, `document.querySelector("#runs-table tr[data-run]").dataset.run`); got != "kf-7" {
		t.Errorf("the search typed found %q first", got)
	}
	reach("/runs/kf-7", "history-download")
}
