package mcpserve_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/busyrunner"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
)

// callTool calls tool on a fresh session of srv and decodes the answer.
func callTool(t *testing.T, srv *mcpserve.Server, tool string, args any) (mcpserve.Answer, *mcp.CallToolResult) {
	t.Helper()
	return (&fixture{session: connect(t, srv.MCP())}).call(t, tool, args, nil)
}

// TestRetryRules_MCPServeRetriesRunnerBusyWithTheSameCommandID
// (docs/protocol.md "Retry rules"; docs/semantics.md §8 "A run can always be
// answered"): the owner of the run's partition answers the start
// runner_busy three times, then a real runner takes it over. weft mcp
// serve sends the start again with one command id and answers the run's
// answer. Before, the call was refused runner_busy.
func TestRetryRules_MCPServeRetriesRunnerBusyWithTheSameCommandID(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3, Projector: true})
	srv, err := mcpserve.New(d.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans, _ := callTool(t, srv, "notes", map[string]any{"input": "hello", "key": "k"})
	run := mcpserve.RunID("weft", "local", "k")
	if ans.Status != mcpserve.StatusCompleted || ans.Run != run || string(ans.Answer) != `"echo: hello"` {
		t.Fatalf("answer %+v, want completed with echo: hello", ans)
	}
	fw := d.Forwarded()
	if len(fw) == 0 || fw[0].CommandID == "" {
		t.Fatalf("the tries carried no command id: %+v", fw)
	}
	d.AppliedUnder(t, api.EndpointStart, run, fw[0].CommandID, 3)
}

// TestRetryRules_MCPServeNoRetryRefusesRunnerBusy: with NoRetry the start
// is sent once and the call is refused runner_busy (nothing was started).
func TestRetryRules_MCPServeNoRetryRefusesRunnerBusy(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Busy: 3})
	srv, err := mcpserve.New(d.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, NoRetry: true})
	if err != nil {
		t.Fatal(err)
	}
	ans, res := callTool(t, srv, "notes", map[string]any{"input": "hello", "key": "k"})
	if ans.Status != mcpserve.StatusRefused || ans.Error == nil || ans.Error.Code != weft.CodeRunnerBusy || !res.IsError {
		t.Fatalf("answer %+v, want refused runner_busy", ans)
	}
	if n := len(d.Forwarded()); n != 1 {
		t.Fatalf("sent %d times, want once", n)
	}
}

// familyQuery answers the query service's run endpoint on nc as a read
// model does for a run "parent" of agent notes whose family waits for the
// child run "child": unknown_run for the child's first lag reads (a
// replica that has not projected it yet; lag < 0: every read), then a view
// of it with an uncertain action; unknown_run for every other run.
func familyQuery(t *testing.T, nc *nats.Conn, lag int) {
	t.Helper()
	var childReads int
	sub, err := nc.Subscribe(projector.QueryPrefix+"."+projector.EndpointRun, func(m *nats.Msg) {
		var req struct {
			Run string `json:"run"`
		}
		_ = json.Unmarshal(m.Data, &req)
		var rep projector.RunReply
		switch req.Run {
		case "parent":
			rep = projector.RunReply{Schema: 1,
				View:         projections.RunView{Run: "parent", Version: 3, Status: projections.StatusWorking, Agent: events.AgentRef{Name: "notes", Version: "1"}},
				FamilyStatus: projections.Family{Status: projections.StatusSuspended, Waiting: []string{"child"}}}
		case "child":
			childReads++ // the subscription's handler is called for one message at a time
			if lag >= 0 && childReads > lag {
				rep = projector.RunReply{Schema: 1,
					View: projections.RunView{Run: "child", Version: 2, Status: projections.StatusSuspended, Agent: events.AgentRef{Name: "notes", Version: "1"},
						Actions: []projections.ActionView{{ID: "1/call_1_1", Tool: "pay", State: projections.StateUncertain}}},
					FamilyStatus: projections.Family{Status: projections.StatusSuspended}}
			}
		}
		if rep.View.Run == "" {
			replyUnknownRun(m, weft.UnknownRun(req.Run))
			return
		}
		body, _ := json.Marshal(rep)
		_ = m.Respond(body)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestSemantics8_AWaitingChildThatCannotBeReadIsAnsweredItsError
// (docs/semantics.md §8 "A run can always be answered"): a run's family waits
// for
// a child run whose view cannot be read (unknown_run for every read
// within the wait). The status tool answers that error, with its code, at
// the end of the wait — not "still working" after every wait, for ever,
// as before.
func TestSemantics8_AWaitingChildThatCannotBeReadIsAnsweredItsError(t *testing.T) {
	s := natstest.Start(t)
	familyQuery(t, s.Conn, -1)
	srv, err := mcpserve.New(s.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans, res := callTool(t, srv, mcpserve.DefaultStatusTool, map[string]any{"run": "parent"})
	if ans.Status != mcpserve.StatusUnknown || ans.Error == nil || ans.Error.Code != weft.CodeUnknownRun || !res.IsError {
		t.Fatalf("answer %+v, want the child's unknown_run", ans)
	}
	mustContain(t, "message", ans.Error.Message, "child run child", "parent")
}

// TestSemantics8_AListedChildNotProjectedYetIsAskedAgain (docs/semantics.md §8
// "A run can always be answered"; docs/mcp.md): a run's family waits for a
// child run whose first reads answer unknown_run, as a read-model replica
// that has not projected it yet does, then its view. The status tool asks
// again within the wait and answers what the child shows (uncertain).
// Before, the first unknown_run was the answer: unknown.
func TestSemantics8_AListedChildNotProjectedYetIsAskedAgain(t *testing.T) {
	s := natstest.Start(t)
	familyQuery(t, s.Conn, 2)
	srv, err := mcpserve.New(s.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans, _ := callTool(t, srv, mcpserve.DefaultStatusTool, map[string]any{"run": "parent"})
	if ans.Status != mcpserve.StatusUncertain || len(ans.Uncertain) != 1 || ans.Uncertain[0].Run != "child" {
		t.Fatalf("answer %+v, want the child's uncertain action", ans)
	}
}

// TestRetryRules_AStartOfUnknownOutcomeIsReadFromTheRun (docs/protocol.md
// "Retry rules": an outcome that is not known is read from the run, never
// guessed): every try of the start is answered unavailable until the
// call's wait ends, but the run was started (it is in the log and the read
// model). The call follows that run and answers what it shows (working,
// naming the run) instead of "not known"; the same key with another input
// is key_reused.
func TestRetryRules_AStartOfUnknownOutcomeIsReadFromTheRun(t *testing.T) {
	d := busyrunner.Start(t, busyrunner.Config{Agents: []*agent.Agent{busyrunner.Echo(t)}, Projector: true,
		Refusal: &weft.Error{Code: weft.CodeUnavailable, Message: "the append's outcome is not known"}})
	run := mcpserve.RunID("weft", "local", "k")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := d.Server.Log.Append(ctx, run, eventlog.Head{}, time.Now(),
		events.RunStarted{Agent: events.AgentRef{Name: "notes", Version: "1"}, Input: "hello", Runner: busyrunner.Ghost}); err != nil {
		t.Fatal(err)
	}
	srv, err := mcpserve.New(d.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ans, _ := callTool(t, srv, "notes", map[string]any{"input": "hello", "key": "k"})
	if ans.Status != mcpserve.StatusWorking || ans.Run != run {
		t.Fatalf("answer %+v, want working, naming run %s", ans, run)
	}
	if n := len(d.Forwarded()); n < 2 {
		t.Fatalf("the start was sent %d times: unavailable is retried within the wait", n)
	}
	ans, _ = callTool(t, srv, "notes", map[string]any{"input": "another", "key": "k"})
	if ans.Status != mcpserve.StatusRefused || ans.Error == nil || ans.Error.Code != weft.CodeKeyReused {
		t.Fatalf("another input under the key: %+v, want key_reused", ans)
	}
}
