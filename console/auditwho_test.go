package console_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/proof"
)

// auditQuestions is the run page's audit item of open questions.
var auditQuestions = regexp.MustCompile(`(?s)<li id="audit-questions">.*?</ul>`)

// TestSecurityWhoDidIt_AuditPanelSaysVerified (docs/security.md "Who did
// it"; docs/semantics.md §10, open questions): the run page's audit panel
// says who recorded an open question and who recorded its resolution as the
// page's other who-fields do — "by bob (unverified)" for a typed name, "by
// nobody named (unverified)" for none, and on the secure stack, signed
// with the deployment's person key, "by demo approver (verified)" whatever
// name was typed.
func TestSecurityWhoDidIt_AuditPanelSaysVerified(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	answer, _ := json.Marshal(map[string]string{"error": "never received"})

	plain := devStack(t)
	plain.Start(t, "aw-13u", "pay invoice INV-13", "suspended")
	plain.UnconfirmedByAPI(t, "aw-13u", "asking the bank")
	plain.WaitStatus(t, "aw-13u", "finished")
	if _, err := plain.Cmd.Resolve(ctx, api.ResolveRequest{CommandID: "aw-resolve-u", Run: "aw-13u", Action: "2/call_2_1", Content: answer}); err != nil {
		t.Fatal(err)
	}

	sec := secureStack(t)
	kp, pub := sec.ApproverKey(t)
	sec.Start(t, "aw-13", "pay invoice INV-13", "suspended")
	sign := func(s proof.CommandSubject) *events.CommandProof {
		p, err := proof.NewCommand(s, pub, time.Now().Add(30*time.Second))
		if err == nil {
			p, err = proof.SignCommand(p, kp.Sign)
		}
		if err != nil {
			t.Fatal(err)
		}
		return &p
	}
	note, _ := json.Marshal(map[string]string{"unconfirmed": "asking the bank"})
	p := sign(proof.CommandSubject{Command: proof.CommandReconcile, Run: "aw-13", Action: "2/call_2_1", Content: note, Reason: "bank ticket 7"})
	if _, err := sec.Cmd.Reconcile(ctx, api.ReconcileRequest{CommandID: "aw-reconcile", Run: "aw-13", Action: "2/call_2_1", Content: note, Reason: "bank ticket 7", By: "mallory", Proof: p}); err != nil {
		t.Fatal(err)
	}
	sec.WaitStatus(t, "aw-13", "finished")
	p = sign(proof.CommandSubject{Command: proof.CommandResolve, Run: "aw-13", Action: "2/call_2_1", Content: answer, Reason: "bank ticket 8"})
	if _, err := sec.Cmd.Resolve(ctx, api.ResolveRequest{CommandID: "aw-resolve", Run: "aw-13", Action: "2/call_2_1", Content: answer, Reason: "bank ticket 8", By: "mallory", Proof: p}); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		s                *stack
		run              string
		opened, resolved string
	}{
		{plain, "aw-13u", `<span class="who" data-verified="false">by bob (unverified)</span>`, `<span class="who" data-verified="false">by nobody named (unverified)</span>`},
		{sec, "aw-13", `<span class="who" data-verified="true">by demo approver (verified)</span>`, `<span class="who" data-verified="true">by demo approver (verified)</span>`},
	} {
		var item string
		for deadline := time.Now().Add(20 * time.Second); ; {
			_, body := c.s.Get(t, "/runs/"+c.run)
			item = auditQuestions.FindString(body)
			if strings.Contains(item, `data-resolved="true"`) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		opened := regexp.MustCompile(`recorded as unconfirmed in event \d+ ` + regexp.QuoteMeta(c.opened+" (“asking the bank”)"))
		if !opened.MatchString(item) {
			t.Errorf("%s: the audit panel's open question does not say %q:\n%s", c.run, c.opened, item)
		}
		if want := ", recorded " + c.resolved + " at "; !strings.Contains(item, want) {
			t.Errorf("%s: the audit panel's resolution lacks %q:\n%s", c.run, want, item)
		}
		if strings.Contains(item, "mallory") {
			t.Errorf("%s: the typed name is shown for a signed command:\n%s", c.run, item)
		}
	}
}
