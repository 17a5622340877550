package mcpops_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/approvers"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/mcpops"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/tools"
)

type payIn struct {
	Invoice string  `json:"invoice"`
	Amount  float64 `json:"amount,omitempty"`
}

type payOut struct {
	ID string `json:"id"`
}

// stack starts a runner and projector serving "desk", whose model pays
// once (an approval by the trusting approver "desk") and then answers.
func stack(t *testing.T) *mcptest.Stack {
	t.Helper()
	pay := tools.Bind(tools.Define[payIn, payOut]("pay", "Pays an invoice."), func(_ context.Context, _ tools.Call, in payIn) (payOut, error) {
		return payOut{ID: "PAY-" + in.Invoice}, nil
	}, func(error) tools.Failure { return tools.Explain("no") })
	m := model.NewRules("desk",
		model.Rule{Name: "report", Match: func(r model.Request) bool { return len(model.Results(r)) > 0 }, Step: model.Answer("paid")},
		model.Rule{Name: "pay", Match: func(model.Request) bool { return true }, Step: model.CallTools(model.Call("pay", `{"invoice":"INV-7"}`))})
	pol := policy.Func(func(context.Context, policy.Action) (policy.Decision, error) {
		return policy.RequireApproval(policy.Requirement{Name: "finance", Version: 1}), nil
	})
	ag, err := agent.New("desk", m, []tools.Tool{pay}, pol, agent.WithApprovers(approvers.Trusting("desk"))).Build()
	if err != nil {
		t.Fatal(err)
	}
	return mcptest.StartStack(t, ag)
}

// session connects an MCP client to a new operator server over the
// stack's connection.
func session(t *testing.T, stk *mcptest.Stack, cfg mcpops.Config) *mcp.ClientSession {
	t.Helper()
	s, err := mcpops.New(stk.Server.Conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := s.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "assistant", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call calls a tool and decodes its structured answer into out; a tool
// error is returned as an error with the result's text.
func call(ctx context.Context, cs *mcp.ClientSession, name string, args any, out any) error {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return errors.New(text.String())
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

// pending waits for run's first pending approval request in the inbox.
func pending(ctx context.Context, t *testing.T, cs *mcp.ClientSession, run string) projections.ApprovalItem {
	t.Helper()
	var inbox mcpops.InboxOut
	for len(inbox.Approvals) == 0 {
		if err := call(ctx, cs, mcpops.ToolInbox, map[string]any{"kind": "approvals", "run": run}, &inbox); err != nil {
			t.Fatalf("inbox: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal("no approval in the inbox")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return inbox.Approvals[0]
}

// TestOperatorMCP_ReadOnlyByDefaultAndAnswersLikeAPerson: the operator
// MCP server lists the inbox, the runs, a run and its timeline; it offers
// no answering tool unless Answers is set; with it, an approval answered
// through weft_approve is checked and recorded as a person's answer
// (docs/semantics.md §4: once, re-checked when answered): the run
// finishes, its timeline holds exactly one approval_answered, and the same
// command id sent again answers the same without a second answer.
func TestOperatorMCP_ReadOnlyByDefaultAndAnswersLikeAPerson(t *testing.T) {
	st := stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ro := session(t, st, mcpops.Config{})
	if names := toolNames(t, ro); slices.Contains(names, mcpops.ToolApprove) || !slices.Contains(names, mcpops.ToolInbox) || len(names) != 4 {
		t.Fatalf("read-only tools %v, want the four views and no answering tool", names)
	}
	if _, err := st.API.Start(ctx, api.StartRequest{Run: "ops-1", Agent: "desk", Input: "pay INV-7"}); err != nil {
		t.Fatal(err)
	}
	item := pending(ctx, t, ro, "ops-1")
	var inbox mcpops.InboxOut
	if err := call(ctx, ro, mcpops.ToolInbox, map[string]any{"kind": "mail"}, &inbox); err == nil || !strings.Contains(err.Error(), "invalid_request") {
		t.Errorf("kind mail: %v, want invalid_request", err)
	}

	rw := session(t, st, mcpops.Config{Answers: true})
	if names := toolNames(t, rw); !slices.Contains(names, mcpops.ToolApprove) || !slices.Contains(names, mcpops.ToolCancel) {
		t.Fatalf("answering tools missing: %v", names)
	}
	answer := map[string]any{"run": item.Run, "action": item.Action, "revision": item.Revision, "approver": "desk", "credential": "alice", "command_id": "cmd-ops-1"}
	var reply api.Reply
	for range 2 {
		if err := call(ctx, rw, mcpops.ToolApprove, answer, &reply); err != nil {
			t.Fatalf("approve: %v", err)
		}
	}
	// The run tool answers at the log's head; the run list follows the
	// stored view (projected): wait for both.
	var view struct {
		View struct {
			Status  string `json:"status"`
			Version uint64 `json:"version"`
		} `json:"view"`
		Projected uint64 `json:"projected"`
	}
	for view.View.Status != "finished" || view.Projected != view.View.Version {
		if err := call(ctx, ro, mcpops.ToolRun, map[string]any{"run": "ops-1"}, &view); err != nil {
			t.Fatalf("run: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the run did not finish: %s", view.View.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var tl struct {
		Events []events.Envelope `json:"events"`
	}
	if err := call(ctx, ro, mcpops.ToolTimeline, map[string]any{"run": "ops-1"}, &tl); err != nil {
		t.Fatalf("timeline: %v", err)
	}
	n := 0
	for _, e := range tl.Events {
		if e.Type == events.NameApprovalAnswered {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d approval_answered in the timeline, want 1", n)
	}
	var page struct {
		Runs []struct {
			Run string `json:"run"`
		} `json:"runs"`
	}
	if err := call(ctx, ro, mcpops.ToolRuns, map[string]any{"status": "finished"}, &page); err != nil || len(page.Runs) != 1 || page.Runs[0].Run != "ops-1" {
		t.Errorf("runs: %+v %v, want ops-1", page, err)
	}
	if err := call(ctx, ro, mcpops.ToolRun, map[string]any{"run": "nope"}, &view); err == nil || !strings.Contains(err.Error(), "unknown_run") {
		t.Errorf("an unknown run: %v, want unknown_run", err)
	}
}

// TestSemantics4_ApproveNarrower_OperatorMCP (docs/semantics.md §4,
// "Approving narrower arguments"): weft_approve passes edited arguments to
// the runtime, which checks them as it checks an approve's: arguments the
// tool's input does not decode are refused (invalid_content) and leave
// the request pending; edited arguments the policy allows are recorded with
// the answer, byte for byte as the call sent them (key order and number
// spelling kept: a signed proof states their hash), and are the ones the
// tool runs with. weft_reject refuses
// edited arguments (invalid_request) rather than dropping them.
func TestSemantics4_ApproveNarrower_OperatorMCP(t *testing.T) {
	st := stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rw := session(t, st, mcpops.Config{Answers: true})
	if _, err := st.API.Start(ctx, api.StartRequest{Run: "ops-edit", Agent: "desk", Input: "pay INV-7"}); err != nil {
		t.Fatal(err)
	}
	item := pending(ctx, t, rw, "ops-edit")
	answer := func(arguments string) map[string]any {
		return map[string]any{"run": item.Run, "action": item.Action, "revision": item.Revision, "approver": "desk", "credential": "alice",
			"arguments": json.RawMessage(arguments)}
	}
	var reply api.Reply
	rej := answer(`{"invoice":"INV-8"}`)
	rej["reason"] = "no"
	if err := call(ctx, rw, mcpops.ToolReject, rej, &reply); err == nil || !strings.Contains(err.Error(), "invalid_request") {
		t.Fatalf("reject with edited arguments: %v, want invalid_request", err)
	}
	if err := call(ctx, rw, mcpops.ToolApprove, answer(`{"invoice":8}`), &reply); err == nil || !strings.Contains(err.Error(), "invalid_content") {
		t.Fatalf("approve with arguments the tool does not decode: %v, want invalid_content", err)
	}
	if err := call(ctx, rw, mcpops.ToolApprove, answer(`{"invoice":"INV-8","amount":1.50}`), &reply); err != nil {
		t.Fatalf("approve with edited arguments: %v", err)
	}
	var view struct {
		View struct {
			Status string `json:"status"`
		} `json:"view"`
	}
	for view.View.Status != "finished" {
		if err := call(ctx, rw, mcpops.ToolRun, map[string]any{"run": "ops-edit"}, &view); err != nil {
			t.Fatalf("run: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the run did not finish: %s", view.View.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The log read with the query client: this test's MCP client decodes
	// structured answers into maps, which would hide the bytes recorded.
	tl, err := st.Query.History(ctx, projector.HistoryRequest{Run: "ops-edit"})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	var answered []json.RawMessage
	var raw []byte
	for _, e := range tl.Events {
		if e.Type == events.NameApprovalAnswered {
			var a events.ApprovalAnswered
			if err := json.Unmarshal(e.Payload, &a); err != nil {
				t.Fatal(err)
			}
			answered = append(answered, a.Arguments)
		}
	}
	if len(answered) != 1 || string(answered[0]) != `{"invoice":"INV-8","amount":1.50}` {
		t.Errorf("answers recorded with arguments %s, want one with the sent bytes {\"invoice\":\"INV-8\",\"amount\":1.50}", answered)
	}
	raw, err = json.Marshal(tl.Events)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "PAY-INV-8") || strings.Contains(string(raw), "PAY-INV-7") {
		t.Errorf("the tool did not run with the approved arguments only: %s", raw)
	}
}

// TestOperatorMCP_ContentAndArgumentsTakeAnyJSON: the tools whose input
// holds any JSON value (weft_reconcile's and weft_resolve's content,
// weft_approve's arguments) take a JSON object: the request reaches the
// runtime, which answers for the run (unknown_run here), rather than the
// input schema refusing it before.
func TestOperatorMCP_ContentAndArgumentsTakeAnyJSON(t *testing.T) {
	st := stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rw := session(t, st, mcpops.Config{Answers: true, NoRetry: true})
	var reply api.Reply
	for _, c := range []struct {
		tool string
		in   map[string]any
	}{
		{mcpops.ToolReconcile, map[string]any{"run": "nope", "action": "1/call_1_1", "content": map[string]any{"status": "sent", "id": "PAY-1"}}},
		{mcpops.ToolResolve, map[string]any{"run": "nope", "action": "1/call_1_1", "content": map[string]any{"error": "declined"}}},
		{mcpops.ToolApprove, map[string]any{"run": "nope", "action": "1/call_1_1", "revision": 1, "approver": "desk", "credential": "alice", "arguments": map[string]any{"invoice": "INV-8"}}},
	} {
		if err := call(ctx, rw, c.tool, c.in, &reply); err == nil || !strings.HasPrefix(err.Error(), "unknown_run") {
			t.Errorf("%s with an object: %v, want unknown_run", c.tool, err)
		}
	}
}
