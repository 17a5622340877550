package console_test

import (
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/proof"
)

// Without a browser: what the console answers to plain HTTP.

func (s *stack) post(t *testing.T, path string, form url.Values, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.ConsoleURL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func approveForm(run, commandID, approver, credential string) url.Values {
	return url.Values{"command_id": {commandID}, "run": {run}, "action": {"2/call_2_1"}, "revision": {"1"},
		"approver": {approver}, "credential": {credential}, "decision": {"approve"}, "return": {"/"}}
}

// A form sent twice at once with its command id acts once: both answers
// are the approval, and the run records one answer.
func TestFormSentTwiceActsOnce(t *testing.T) {
	s := devStack(t)
	s.Start(t, "twice-7", "pay invoice INV-7", "suspended")
	form := approveForm("twice-7", "console-twice-1", demo.Approver, "gina")
	var wg sync.WaitGroup
	answers := make([]string, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, answers[i] = s.post(t, "/act/approval", form, map[string]string{"Accept": "application/json"})
		}()
	}
	wg.Wait()
	for _, a := range answers {
		var ans struct {
			OK   bool   `json:"ok"`
			Code string `json:"code"`
		}
		if err := json.Unmarshal([]byte(a), &ans); err != nil || !ans.OK {
			t.Errorf("answer %s, want ok", a)
		}
	}
	s.WaitStatus(t, "twice-7", "finished")
	if n := len(s.History(t, "twice-7", events.NameApprovalAnswered)); n != 1 {
		t.Fatalf("%d approval answers recorded, want 1", n)
	}
}

// A refused approval sent without the script answers the page with the
// code and reason on top, and nowhere the credential typed.
func TestRefusalPageShowsCodeNotCredential(t *testing.T) {
	s := devStack(t)
	s.Start(t, "echo-7", "pay invoice INV-7", "suspended")
	const secret = "hunter2-h12-secret"
	resp, body := s.post(t, "/act/approval", approveForm("echo-7", "console-echo-1", "bank", secret), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if !strings.Contains(body, `<code class="code">proof_refused</code>`) || !strings.Contains(body, `<code class="reason">other_approvers</code>`) {
		t.Fatalf("the page does not show proof_refused (other_approvers):\n%s", body)
	}
	if strings.Contains(body, secret) {
		t.Fatal("the credential is echoed into the page")
	}
	_, js := s.post(t, "/act/approval", approveForm("echo-7", "console-echo-2", "bank", secret), map[string]string{"Accept": "application/json"})
	if strings.Contains(js, secret) || !strings.Contains(js, `"code":"proof_refused"`) || !strings.Contains(js, `"next_command_id":"console-`) {
		t.Fatalf("answer %s", js)
	}
	// Nothing was written: the request still waits.
	if v := s.WaitStatus(t, "echo-7", "suspended"); len(v.Approvals) != 1 {
		t.Fatalf("approvals %v", v.Approvals)
	}
	s.ApproveByAPI(t, "echo-7")
}

// A form posted from another site is refused before anything is sent.
func TestCrossOriginPostRefused(t *testing.T) {
	s := devStack(t)
	s.Start(t, "csrf-7", "pay invoice INV-7", "suspended")
	resp, _ := s.post(t, "/act/approval", approveForm("csrf-7", "console-csrf-1", demo.Approver, "mallory"),
		map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d, want 403", resp.StatusCode)
	}
	if n := len(s.History(t, "csrf-7", events.NameApprovalAnswered)); n != 0 {
		t.Fatalf("%d approval answers recorded, want 0", n)
	}
	s.ApproveByAPI(t, "csrf-7")
}

// Every page answers without the script; an unknown run is a 404 page
// naming unknown_run; the pages carry the content security policy.
func TestPagesWithoutScript(t *testing.T) {
	s := devStack(t)
	s.Start(t, "plain-8", "pay invoice INV-8", "finished")
	for _, p := range []string{"/", "/runs", "/runs?status=finished&agent=payment-desk", "/runs/plain-8"} {
		resp, body := s.Get(t, p)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "</html>") {
			t.Errorf("%s: status %d", p, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: CSP %q", p, csp)
		}
	}
	resp, body := s.Get(t, "/runs/no-such-run")
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "unknown_run") {
		t.Errorf("unknown run: status %d\n%s", resp.StatusCode, body)
	}
	resp, body = s.Get(t, "/runs?status=bogus")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "bad_filter") {
		t.Errorf("bad filter: status %d\n%s", resp.StatusCode, body)
	}
	_, body = s.Get(t, "/runs/plain-8")
	if !strings.Contains(body, "Verified: ") || !strings.Contains(body, "byte for byte the view refolded from the history") {
		t.Errorf("the audit panel does not verify the run:\n%s", body)
	}
	if resp, _ := s.Get(t, "/live?watch=bogus"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("live watch=bogus: status %d", resp.StatusCode)
	}
}

// The runs page filters by status and agent and pages with the query
// service's cursor.
func TestRunsFilterAndPaging(t *testing.T) {
	s := devStack(t)
	s.Start(t, "page-8a", "pay invoice INV-8", "finished")
	s.Start(t, "page-8b", "pay invoice INV-8", "finished")
	s.Start(t, "page-7", "pay invoice INV-7", "suspended")
	rowRun := regexp.MustCompile(`<tr data-run="([^"]+)">`)
	rows := func(body string) []string {
		var out []string
		for _, m := range rowRun.FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	// The projector writes a run's view first, then its list entries
	// (projector.store): the run list may lag the view s.start waited
	// for by a moment, so the list is read until it shows page-7. The
	// projector folds in log order, so by then the earlier runs' entries
	// are written too.
	var body string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body = s.Get(t, "/runs?status=suspended&agent=payment-desk")
		if slices.Contains(rows(body), "page-7") || time.Now().After(deadline) {
			break
		}
	}
	if got := rows(body); !slices.Contains(got, "page-7") || slices.Contains(got, "page-8a") {
		t.Fatalf("status=suspended lists %v", got)
	}
	_, body = s.Get(t, "/runs?agent=nobody")
	if got := rows(body); len(got) != 0 || !strings.Contains(body, "No run matches.") {
		t.Fatalf("agent=nobody lists %v", got)
	}
	// Newest first, one per page: page-7, then page-8b, then page-8a.
	next := regexp.MustCompile(`<a href="(/runs\?[^"]+)" rel="next">`)
	path := "/runs?limit=1"
	var seen []string
	for i := range 3 {
		_, body = s.Get(t, path)
		seen = append(seen, rows(body)...)
		if i == 2 {
			break
		}
		m := next.FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no next page after %v:\n%s", seen, body)
		}
		path = html.UnescapeString(m[1])
	}
	if want := []string{"page-7", "page-8b", "page-8a"}; !slices.Equal(seen, want) {
		t.Fatalf("pages %v, want %v", seen, want)
	}
	if !strings.Contains(body, `>Newest</a>`) {
		t.Error("a later page has no link back to the newest runs")
	}
	// Changed since a time in the future: nothing.
	_, body = s.Get(t, "/runs?since=2999-01-01T00:00&tz=0")
	if got := rows(body); len(got) != 0 {
		t.Fatalf("since 2999 lists %v", got)
	}
}

// Resolving an open question twice: the second form (a new command id) is
// refused already_resolved with the first resolution's kind as reason,
// and the history records one resolution; a form without what happened
// is not sent.
func TestResolveTwiceRefused(t *testing.T) {
	s := devStack(t)
	s.Start(t, "q2-13", "pay invoice INV-13", "suspended")
	s.UnconfirmedByAPI(t, "q2-13", "asking the bank")
	s.WaitStatus(t, "q2-13", "finished")
	form := func(id string) url.Values {
		return url.Values{"command_id": {id}, "run": {"q2-13"}, "action": {"2/call_2_1"}, "kind": {"error"},
			"error": {"the bank never received it"}, "by": {"hank"}, "return": {"/"}}
	}
	json := map[string]string{"Accept": "application/json"}
	empty := form("console-q2-0")
	empty.Set("error", " ")
	if _, a := s.post(t, "/act/resolve", empty, json); !strings.Contains(a, `"ok":false`) || strings.Contains(a, `"code"`) {
		t.Fatalf("a form without the reason answered %s, want not sent", a)
	}
	if _, a := s.post(t, "/act/resolve", form("console-q2-1"), json); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("first resolve answered %s", a)
	}
	resp, body := s.post(t, "/act/resolve", form("console-q2-2"), nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<code class="code">already_resolved</code>`) || !strings.Contains(body, `<code class="reason">error</code>`) {
		t.Fatalf("second resolve: status %d, the page does not show already_resolved (error):\n%s", resp.StatusCode, body)
	}
	if n := len(s.History(t, "q2-13", events.NameResolved)); n != 1 {
		t.Fatalf("%d resolved events, want 1", n)
	}
}

// An approver of signed proofs takes nothing else: a form without a proof
// (a page without its script) is not sent, and a proof signed with the
// approver's key for other arguments is refused proof_refused
// (other_arguments), shown with its reason; nothing is recorded.
func TestSignedApproverNeedsProof(t *testing.T) {
	s := secureStack(t)
	s.Start(t, "sig-plain-7", "pay invoice INV-7", "suspended")
	form := approveForm("sig-plain-7", "console-sig-1", demo.SignedApprover, "anyone")
	form.Set("agent", demo.AgentName)
	form.Set("version", "1")
	jsonAnswer := map[string]string{"Accept": "application/json"}
	if _, a := s.post(t, "/act/approval", form, jsonAnswer); !strings.Contains(a, `"ok":false`) || strings.Contains(a, `"code"`) || !strings.Contains(a, "signed proof") {
		t.Fatalf("a form without a proof answered %s, want not sent, naming the signed proof", a)
	}
	kp, pub := s.ApproverKey(t)
	p, err := proof.New(proof.Subject{Run: "sig-plain-7", Action: "2/call_2_1", Revision: 1, Requirement: events.Requirement{Name: demo.Requirement, Version: 1},
		Tool: "send_payment", Arguments: json.RawMessage(`{"invoice":"INV-7","payee":"Mallory","amount":1200,"currency":"EUR"}`), Answer: events.AnswerApprove},
		pub, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.Sign(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	form.Set("command_id", "console-sig-2")
	form.Set("proof", string(b))
	resp, body := s.post(t, "/act/approval", form, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `<code class="code">proof_refused</code>`) || !strings.Contains(body, `<code class="reason">other_arguments</code>`) {
		t.Fatalf("status %d: the page does not show proof_refused (other_arguments):\n%s", resp.StatusCode, body)
	}
	if n := len(s.History(t, "sig-plain-7", events.NameApprovalAnswered)); n != 0 {
		t.Fatalf("%d answers recorded, want 0", n)
	}
	if v := s.WaitStatus(t, "sig-plain-7", "suspended"); len(v.Approvals) != 1 {
		t.Fatalf("approvals %v", v.Approvals)
	}
}
