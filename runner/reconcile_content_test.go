package runner_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §10: reconciliation content is the tool's encoded output,
// {"error": m} or {"unconfirmed": note}. Content that is neither — not
// JSON, null, or an "output" the tool's output schema refuses — is refused
// invalid_content naming the path and the reason, once (no doubled code in
// the message), and records nothing; on a live run and on a stored one.
func TestScenario38_ReconcileContentChecked(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(1, "uncertain")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow)), "r10c", "x")
	s := h.waitStatus("r10c", aggregate.StatusSuspended)
	v := s.Version()
	act := s.Actions()[0].ID
	cases := []struct{ content, want string }{
		{`null`, "null"},
		{`{"foo":1}`, `"foo"`},
		{`{"id":5}`, "/id"},
	}
	check := func(stored bool) {
		t.Helper()
		for i, c := range cases {
			req := api.ReconcileRequest{CommandID: string(rune('a'+i)) + map[bool]string{false: "l", true: "s"}[stored], Run: "r10c", Action: act, Content: json.RawMessage(c.content)}
			var err error
			if stored {
				_, err = h.client.ReconcileStored(ctx(t), req)
			} else {
				_, err = h.client.Reconcile(ctx(t), req)
			}
			var we *weft.Error
			if !errors.As(err, &we) || we.Code != weft.CodeInvalidContent {
				t.Fatalf("stored=%v content %s: %v, want invalid_content", stored, c.content, err)
			}
			if strings.Contains(we.Message, "invalid_content") || !strings.Contains(we.Message, c.want) {
				t.Fatalf("stored=%v content %s: message %q, want it to name %s once", stored, c.content, we.Message, c.want)
			}
		}
	}
	check(false)
	if got := h.state("r10c").Version(); got != v {
		t.Fatalf("a refused reconciliation wrote events (version %d → %d)", v, got)
	}
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r10c"}); err != nil {
		t.Fatal(err)
	}
	s = h.waitStatus("r10c", aggregate.StatusFinished)
	if a, _ := s.Action(act); a.State != aggregate.ActionUncertain {
		t.Fatalf("action after cancel: %s", a.State)
	}
	check(true)
	if _, err := h.client.ReconcileStored(ctx(t), api.ReconcileRequest{CommandID: "ok", Run: "r10c", Action: act, Content: json.RawMessage(`{"id":"pay-1"}`)}); err != nil {
		t.Fatalf("valid output on the stored run: %v", err)
	}
}
