package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/tools"
)

type invoiceIn struct {
	Invoice int `json:"invoice"`
}

type invoiceOut struct {
	ID string `json:"id"`
}

// TestSemantics4_ApproveNeverRetriesARevisionNobodySaw: pay-44's approval
// request was at revision 1 when `weft approve` without --revision read it;
// alice then approved it and the policy, re-run with her context, asked for
// another requirement (requirement_changed: revision 2, finance v2), so the
// runner refuses revision 1 (stale_reference). The CLI must not answer
// revision 2 by itself (nobody saw it: a person approves what they saw) and
// must say what happened: the revision came from the view, the request
// changed since, nothing was answered, and the --revision of the request
// now pending. The run query answers at the log's head, so the window is
// the time between the CLI's read and the runner's decision; the test
// gives the refusal to the CLI's explanation (staleRevision) as approve
// does. The log keeps revision 2 unanswered.
func TestSemantics4_ApproveNeverRetriesARevisionNobodySaw(t *testing.T) {
	pay := tools.Bind(tools.Define[invoiceIn, invoiceOut]("pay_invoice", "Pays an invoice."), func(context.Context, tools.Call, invoiceIn) (invoiceOut, error) {
		return invoiceOut{ID: "PAY-44"}, nil
	}, func(error) tools.Failure { return tools.Explain("no") })
	pol := policy.Func(func(context.Context, policy.Action) (policy.Decision, error) {
		return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
	})
	m := model.NewRules("desk", model.Rule{Name: "done", Match: func(model.Request) bool { return true }, Step: model.Answer("paid")})
	ag, err := agent.New("payment-desk", m, []tools.Tool{pay}, pol, agent.WithApprovers(approvers.Trusting("desk"))).Build()
	if err != nil {
		t.Fatal(err)
	}
	st := mcptest.StartWithoutProjector(t, ag)
	s := st.Server
	svc, err := projector.Serve(context.Background(), s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	req := events.Requirement{Name: "finance", Version: 1}
	cfg, _ := ag.ToolConfig("pay_invoice")
	call := aggregate.ModelReply{Turn: 1, Reply: aggregate.Reply{Kind: events.ReplyToolRequest, Turn: events.Message{Role: "assistant", Calls: []events.ToolCall{
		{ID: "c1", Name: "pay_invoice", Arguments: json.RawMessage(`{"invoice":44}`)}}}}}
	cmds := []aggregate.Command{
		aggregate.Start{Run: "pay-44", Agent: ag.Ref(), Input: "pay invoice 44", Runner: "r-gone", Limits: ag.Limits()},
		call,
		aggregate.ResolveCalls{Turn: 1, Calls: []aggregate.Resolution{{CallID: "c1", Validation: events.CallValid, Normalized: json.RawMessage(`{"invoice":44}`),
			Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: req}, Tool: cfg}}},
	}
	all := decide(t, "pay-44", append(cmds,
		aggregate.Approve{Action: "1/c1", Revision: 1, Reviewer: "alice", Verifier: "desk", Tool: cfg,
			Policy: aggregate.PolicyResult{Decision: events.PolicyRequireApproval, Requirement: events.Requirement{Name: "finance", Version: 2}}},
	)...)
	appendRun(t, s.Log, "pay-44", all...)

	refused := &weft.Error{Code: weft.CodeStaleReference, Message: "revision 1 of 1/c1 is not the pending request"}
	errs := staleRevision(context.Background(), projector.NewClient(s.Conn), s.Log, "approve", "pay-44", "1/c1", 1, refused).Error()
	for _, want := range []string{"stale_reference",
		"revision 1 was read from the run's view; the approval request changed since, and nothing was answered",
		"Now pending: revision 2", "requirement finance v2", "--revision 2"} {
		if !strings.Contains(errs, want) {
			t.Fatalf("the explanation lacks %q:\n%s", want, errs)
		}
	}
	envs, _, err := s.Log.Load(context.Background(), "pay-44")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range envs[len(all):] {
		if env.Type == events.NameApprovalAnswered {
			t.Fatalf("the CLI answered a revision nobody saw: %+v", env)
		}
	}
}
