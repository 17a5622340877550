package console_test

import (
	"encoding/json"
	"html"
	"strings"
	"testing"

	"github.com/weftrun/weft/demo"
	"github.com/weftrun/weft/events"
)

// Without a browser (docs/semantics.md §4, "Approving narrower
// arguments"): the approval form's edited arguments are sent as the
// approve's arguments; arguments that are not JSON are not sent; the
// arguments left as the form starts them (the call as asked) and a reject
// send no edit.

const (
	askedINV7   = `{"invoice":"INV-7","payee":"ACME Ltd","amount":1200,"currency":"EUR"}`
	narrowINV7  = `{"invoice":"INV-7","payee":"ACME Ltd","amount":90,"currency":"EUR"}`
	prettyAsked = "{\n  \"invoice\": \"INV-7\",\n  \"payee\": \"ACME Ltd\",\n  \"amount\": 1200,\n  \"currency\": \"EUR\"\n}"
)

// answered returns the run's one recorded approval answer.
func (s *stack) answered(t *testing.T, run string) events.ApprovalAnswered {
	t.Helper()
	h := s.history(t, run, events.NameApprovalAnswered)
	if len(h) != 1 {
		t.Fatalf("%d answers recorded for %s, want 1", len(h), run)
	}
	var ans events.ApprovalAnswered
	if err := json.Unmarshal(h[0].Payload, &ans); err != nil {
		t.Fatal(err)
	}
	return ans
}

func TestSemantics4_ConsoleFormSendsEditedArguments(t *testing.T) {
	s := devStack(t)
	s.start(t, "nedit-7", "pay invoice INV-7", "suspended")
	_, page := s.get(t, "/runs/nedit-7")
	page = html.UnescapeString(page)
	if !strings.Contains(page, `name="runs_with" value="`+askedINV7+`"`) || !strings.Contains(page, prettyAsked+"</textarea>") {
		t.Fatalf("the approval form does not start from the model's arguments:\n%s", page)
	}
	accept := map[string]string{"Accept": "application/json"}

	form := approveForm("nedit-7", "console-nedit-1", demo.Approver, "gina")
	form.Set("runs_with", askedINV7)
	form.Set("arguments", `{"amount": 90,`)
	if _, a := s.post(t, "/act/approval", form, accept); !strings.Contains(a, "not JSON") || strings.Contains(a, `"ok":true`) {
		t.Fatalf("arguments that are not JSON answer %s, want not sent", a)
	}
	if n := len(s.history(t, "nedit-7", events.NameApprovalAnswered)); n != 0 {
		t.Fatalf("%d answers recorded after arguments that are not JSON", n)
	}

	form.Set("command_id", "console-nedit-2")
	form.Set("arguments", strings.Replace(prettyAsked, "1200", "90", 1))
	_, a := s.post(t, "/act/approval", form, accept)
	var ans struct {
		OK      bool   `json:"ok"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(a), &ans); err != nil || !ans.OK || !strings.HasPrefix(ans.Message, "Approved with changes: the call runs with "+narrowINV7+".") {
		t.Fatalf("the edit answers %s", a)
	}
	v := s.waitStatus(t, "nedit-7", "finished")
	if a := action(t, v, "2/call_2_1"); string(a.Arguments) != askedINV7 || string(a.Approved) != narrowINV7 {
		t.Fatalf("action arguments %s approved %s, want the model's and the edit", a.Arguments, a.Approved)
	}
	if ans := s.answered(t, "nedit-7"); string(ans.Arguments) != narrowINV7 {
		t.Fatalf("the log records the approve's arguments %s, want %s", ans.Arguments, narrowINV7)
	}
	if _, page := s.get(t, "/runs/nedit-7"); !strings.Contains(page, "data-approved-arguments") || !strings.Contains(page, "Approved with changes") {
		t.Fatal("the run page does not mark the approved arguments")
	}
}

func TestSemantics4_ConsoleFormUnchangedArgumentsAreNoEdit(t *testing.T) {
	s := devStack(t)
	accept := map[string]string{"Accept": "application/json"}
	s.start(t, "nedit-8", "pay invoice INV-7", "suspended")
	form := approveForm("nedit-8", "console-nedit-8", demo.Approver, "gina")
	form.Set("runs_with", askedINV7)
	form.Set("arguments", prettyAsked)
	if _, a := s.post(t, "/act/approval", form, accept); !strings.Contains(a, `"message":"Approved.`) {
		t.Fatalf("the form's arguments left as they are answer %s, want approved as asked", a)
	}
	s.waitStatus(t, "nedit-8", "finished")
	if ans := s.answered(t, "nedit-8"); ans.Arguments != nil {
		t.Fatalf("the log records an edit %s for arguments left as they were", ans.Arguments)
	}

	s.start(t, "nedit-9", "pay invoice INV-7", "suspended")
	form = approveForm("nedit-9", "console-nedit-9", demo.Approver, "gina")
	form.Set("decision", "reject")
	form.Set("reason", "paid twice")
	form.Set("runs_with", askedINV7)
	form.Set("arguments", strings.Replace(prettyAsked, "1200", "90", 1))
	if _, a := s.post(t, "/act/approval", form, accept); !strings.Contains(a, `"message":"Rejected.`) {
		t.Fatalf("a reject with edited arguments in the form answers %s, want rejected", a)
	}
	s.waitStatus(t, "nedit-9", "finished")
	if ans := s.answered(t, "nedit-9"); ans.Answer != events.AnswerReject || ans.Arguments != nil {
		t.Fatalf("the log records %+v, want a reject without arguments", ans)
	}
}
