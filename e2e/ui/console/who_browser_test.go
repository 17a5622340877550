package console_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/proof"
)

// TestSecurityWhoDidIt_RunPage (docs/security.md "Who did it";
// docs/semantics.md §10 reconciliation): the run page names who
// reconciled an action and whether the deployment vouches for it — on the
// secure stack a reconciliation signed with a person key (the approver
// key) shows "by demo approver (verified)" with the key, whatever name was
// typed; on the plain stack a typed name shows "by bob (unverified)".
func TestSecurityWhoDidIt_RunPage(t *testing.T) {
	sec := secureStack(t)
	kp, pub := sec.ApproverKey(t)
	sec.Start(t, "who-13", "pay invoice INV-13", "suspended")
	content, _ := json.Marshal(map[string]string{"unconfirmed": "asking the bank"})
	sub := proof.CommandSubject{Command: proof.CommandReconcile, Run: "who-13", Action: "2/call_2_1", Content: content, Reason: "bank ticket 7"}
	p, err := proof.NewCommand(sub, pub, time.Now().Add(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = proof.SignCommand(p, kp.Sign); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := sec.Cmd.Reconcile(c, api.ReconcileRequest{CommandID: "who-signed", Run: "who-13", Action: sub.Action, Content: content, Reason: sub.Reason, By: "mallory", Proof: &p}); err != nil {
		t.Fatal(err)
	}
	sec.WaitStatus(t, "who-13", "finished")

	plain := devStack(t)
	plain.Start(t, "who-13u", "pay invoice INV-13", "suspended")
	plain.UnconfirmedByAPI(t, "who-13u", "asking the bank")
	plain.WaitStatus(t, "who-13u", "finished")

	line := `li[data-action="2/call_2_1"] .reconciled-line`
	for _, c := range []struct {
		url, verified string
		want          []string
	}{
		{sec.ConsoleURL + "/runs/who-13", "true", []string{"by demo approver (verified)", pub, "bank ticket 7"}},
		{plain.ConsoleURL + "/runs/who-13u", "false", []string{"by bob (unverified)"}},
	} {
		ctx := tab(t)
		do(t, ctx, "open "+c.url, chromedp.Navigate(c.url), chromedp.WaitVisible(chromedp.CSS(line)))
		text := get(t, ctx, "the reconciled line", chromedp.Text(chromedp.CSS(line)))
		for _, w := range c.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: the reconciled line says %q, want %q", c.url, text, w)
			}
		}
		if strings.Contains(text, "mallory") {
			t.Errorf("%s: the typed name is shown for a signed reconciliation: %q", c.url, text)
		}
		if v := get(t, ctx, "data-verified", chromedp.AttributeValue(chromedp.CSS(line+" .who"), "data-verified")).Value; v != c.verified {
			t.Errorf("%s: data-verified %q, want %s", c.url, v, c.verified)
		}
	}
}
