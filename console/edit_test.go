package console_test

import (
	"context"
	"encoding/json"
	"html"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/consolestack"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
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

// waitApproval waits (45 s at most) until the approvals inbox the
// projector stores has run's pending request: the pages' cards read it.
func (s *stack) waitApproval(t *testing.T, run string) {
	t.Helper()
	for deadline := time.Now().Add(45 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		items, err := s.Query.Approvals(ctx, projector.InboxRequest{Run: run})
		cancel()
		if err == nil && len(items) == 1 {
			return
		}
	}
	t.Fatalf("the approvals inbox never had %s's request", run)
}

// answered returns the run's one recorded approval answer.
func (s *stack) answered(t *testing.T, run string) events.ApprovalAnswered {
	t.Helper()
	h := s.History(t, run, events.NameApprovalAnswered)
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
	s.Start(t, "nedit-7", "pay invoice INV-7", "suspended")
	s.waitApproval(t, "nedit-7")
	_, page := s.Get(t, "/runs/nedit-7")
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
	if n := len(s.History(t, "nedit-7", events.NameApprovalAnswered)); n != 0 {
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
	v := s.WaitStatus(t, "nedit-7", "finished")
	if a := action(t, v, "2/call_2_1"); string(a.Arguments) != askedINV7 || string(a.Approved) != narrowINV7 {
		t.Fatalf("action arguments %s approved %s, want the model's and the edit", a.Arguments, a.Approved)
	}
	if ans := s.answered(t, "nedit-7"); string(ans.Arguments) != narrowINV7 {
		t.Fatalf("the log records the approve's arguments %s, want %s", ans.Arguments, narrowINV7)
	}
	if _, page := s.Get(t, "/runs/nedit-7"); !strings.Contains(page, "data-approved-arguments") || !strings.Contains(page, "Approved with changes") {
		t.Fatal("the run page does not mark the approved arguments")
	}
}

func TestSemantics4_ConsoleFormUnchangedArgumentsAreNoEdit(t *testing.T) {
	s := devStack(t)
	accept := map[string]string{"Accept": "application/json"}
	s.Start(t, "nedit-8", "pay invoice INV-7", "suspended")
	form := approveForm("nedit-8", "console-nedit-8", demo.Approver, "gina")
	form.Set("runs_with", askedINV7)
	form.Set("arguments", prettyAsked)
	if _, a := s.post(t, "/act/approval", form, accept); !strings.Contains(a, `"message":"Approved.`) {
		t.Fatalf("the form's arguments left as they are answer %s, want approved as asked", a)
	}
	s.WaitStatus(t, "nedit-8", "finished")
	if ans := s.answered(t, "nedit-8"); ans.Arguments != nil {
		t.Fatalf("the log records an edit %s for arguments left as they were", ans.Arguments)
	}

	s.Start(t, "nedit-9", "pay invoice INV-7", "suspended")
	form = approveForm("nedit-9", "console-nedit-9", demo.Approver, "gina")
	form.Set("decision", "reject")
	form.Set("reason", "paid twice")
	form.Set("runs_with", askedINV7)
	form.Set("arguments", strings.Replace(prettyAsked, "1200", "90", 1))
	if _, a := s.post(t, "/act/approval", form, accept); !strings.Contains(a, `"message":"Rejected.`) {
		t.Fatalf("a reject with edited arguments in the form answers %s, want rejected", a)
	}
	s.WaitStatus(t, "nedit-9", "finished")
	if ans := s.answered(t, "nedit-9"); ans.Answer != events.AnswerReject || ans.Arguments != nil {
		t.Fatalf("the log records %+v, want a reject without arguments", ans)
	}
}

// The narrowing desk: the demo's payment desk under a policy that holds an
// approver's edit narrower than the request (docs/security.md, "Approving
// narrower arguments"): an edited payment above the amount the model asked
// for is denied. It runs on a stack of its own (consolestack.Hosted).
func narrowStack(t *testing.T) *stack {
	t.Helper()
	return &stack{stacks.Get(t, "narrow", func() (*consolestack.Stack, error) {
		desk := demo.Policy()
		p := policy.Func(func(ctx context.Context, a policy.Action) (policy.Decision, error) {
			if a.Asked != nil {
				var asked, edit demo.SendPayment
				if json.Unmarshal(a.Asked, &asked) == nil && json.Unmarshal(a.Arguments, &edit) == nil && edit.Amount > asked.Amount {
					return policy.Deny("approve at most the amount asked"), nil
				}
			}
			return desk.Decide(ctx, a)
		})
		a, err := agent.New(demo.AgentName, demo.ScriptedModel(), demo.Tools(), p, agent.WithApprovers(approvers.Trusting(demo.Approver))).Build()
		if err != nil {
			return nil, err
		}
		return consolestack.Hosted("narrow", a)
	})}
}

// An edit the policy denies is refused edit_refused (policy_denied): the
// page shows the code and the reason, nothing is recorded, the request
// still waits and its card is still on the inbox; a narrower edit is then
// approved.
func TestSemantics4_ConsoleShowsEditRefused(t *testing.T) {
	s := narrowStack(t)
	s.Start(t, "nrefuse-7", "pay invoice INV-7", "suspended")
	s.waitApproval(t, "nrefuse-7")
	form := approveForm("nrefuse-7", "console-nrefuse-1", demo.Approver, "gina")
	form.Set("runs_with", askedINV7)
	form.Set("arguments", strings.Replace(askedINV7, "1200", "5000", 1))
	_, page := s.post(t, "/act/approval", form, nil)
	if !strings.Contains(page, `<code class="code">edit_refused</code>`) || !strings.Contains(page, `<code class="reason">policy_denied</code>`) {
		t.Fatalf("the page does not show edit_refused (policy_denied):\n%s", page)
	}
	if n := len(s.History(t, "nrefuse-7", events.NameApprovalAnswered)); n != 0 {
		t.Fatalf("%d answers recorded after a refused edit, want 0", n)
	}
	if v := s.WaitStatus(t, "nrefuse-7", "suspended"); len(v.Approvals) != 1 {
		t.Fatalf("approvals %v, want the request still pending", v.Approvals)
	}
	if _, inbox := s.Get(t, "/"); !strings.Contains(inbox, `id="`+cardKey("approval", "nrefuse-7", "2/call_2_1")+`"`) {
		t.Fatal("the request's card left the inbox after a refused edit")
	}
	form.Set("command_id", "console-nrefuse-2")
	form.Set("arguments", narrowINV7)
	if _, a := s.post(t, "/act/approval", form, map[string]string{"Accept": "application/json"}); !strings.Contains(a, `"ok":true`) {
		t.Fatalf("the narrower edit answers %s", a)
	}
	s.WaitStatus(t, "nrefuse-7", "finished")
	if ans := s.answered(t, "nrefuse-7"); string(ans.Arguments) != narrowINV7 {
		t.Fatalf("the log records %s, want %s", ans.Arguments, narrowINV7)
	}
}
