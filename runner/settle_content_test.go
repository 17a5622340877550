package runner_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// docs/semantics.md §9 with §10: a settlement's output is the
// tool's encoded output, checked against the tool's output schema as a
// reconciliation's is. Content the schema refuses is refused
// invalid_content naming the path, records nothing, and the action still
// waits for its settlement: a valid one is then accepted (Scenario 25's
// path: a settling tool cancelled mid-body).
func TestScenario25_SettlementContentChecked(t *testing.T) {
	t.Parallel()
	st := &settling{release: make(chan struct{})}
	m := model.NewScripted("s", model.CallTools(payCall(1, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{st.tool(10 * time.Second)}, policy.Func(allow)), "r25c", "x")
	h.waitFor("r25c", "running", func(s aggregate.State) bool { return len(s.Actions()) == 1 && st.starts.Load() == 1 })
	if _, err := h.client.Cancel(ctx(t), api.CancelRequest{CommandID: "c", Run: "r25c"}); err != nil {
		t.Fatal(err)
	}
	s := h.waitFor("r25c", "settling", func(s aggregate.State) bool { return s.Actions()[0].State == aggregate.ActionSettling })
	v := s.Version()
	for i, c := range []struct{ content, want string }{
		{`{"foo":1}`, `"foo"`},
		{`{"id":5}`, "/id"},
		{`null`, `"id"`},
	} {
		_, err := h.client.Settle(ctx(t), api.Settlement{CommandID: "bad-" + string(rune('a'+i)), Run: "r25c", Action: "1/call_1_1", Outcome: events.OutcomeOutput, Content: json.RawMessage(c.content), Summary: "s"})
		var we *weft.Error
		if !errors.As(err, &we) || we.Code != weft.CodeInvalidContent || !strings.Contains(we.Message, c.want) {
			t.Fatalf("settle %s: %v, want invalid_content naming %s", c.content, err, c.want)
		}
	}
	if got := h.state("r25c").Version(); got != v {
		t.Fatalf("a refused settlement wrote events (version %d → %d)", v, got)
	}
	if err := settle(h, t, "r25c", "1/call_1_1", "ok"); err != nil {
		t.Fatalf("a valid settlement after the refused ones: %v", err)
	}
	if s, _ := finished(t, h, "r25c"); s.Actions()[0].State != aggregate.ActionSucceeded {
		t.Fatalf("action %s, want succeeded", s.Actions()[0].State)
	}
}
