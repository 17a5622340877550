package mcpserve_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/internal/busyrunner"
	"github.com/weftrun/weft/internal/mcptest"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/mcpserve"
	"github.com/weftrun/weft/mcptools"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/tools"
)

// fakeQuery answers the query service's run endpoint on nc as a read model
// that has not caught up answers: unknown_run for every run. With silent,
// it takes the requests and never answers, as a query service that hangs.
func fakeQuery(t *testing.T, nc *nats.Conn, silent bool) {
	t.Helper()
	sub, err := nc.Subscribe(projector.QueryPrefix+"."+projector.EndpointRun, func(m *nats.Msg) {
		if silent {
			return
		}
		replyUnknownRun(m, &weft.Error{Code: weft.CodeUnknownRun, Message: "no such run"})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// replyUnknownRun answers m as the query service answers a run it does
// not have: the error reply e (unknown_run) with the micro error headers.
func replyUnknownRun(m *nats.Msg, e *weft.Error) {
	body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: e})
	reply := nats.NewMsg(m.Reply)
	reply.Header.Set("Nats-Service-Error", string(e.Code))
	reply.Header.Set("Nats-Service-Error-Code", "404")
	reply.Data = body
	_ = m.RespondMsg(reply)
}

func echoAgent(t *testing.T) *agent.Agent { return busyrunner.Echo(t) }

// unknown calls tool and expects the answer "not known": a JSON-RPC error
// with code mcpserve.CodeOutcomeUnknown whose data is the Answer.
func unknown(t *testing.T, session *mcp.ClientSession, tool string, args any) (mcpserve.Answer, *jsonrpc.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err == nil {
		b, _ := json.Marshal(res.StructuredContent)
		t.Fatalf("%s answered %s (isError %v), want the JSON-RPC error %d (not known)", tool, b, res.IsError, mcpserve.CodeOutcomeUnknown)
	}
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) || werr.Code != mcpserve.CodeOutcomeUnknown {
		t.Fatalf("%s: %v, want the JSON-RPC error %d (not known)", tool, err, mcpserve.CodeOutcomeUnknown)
	}
	var ans mcpserve.Answer
	if err := json.Unmarshal(werr.Data, &ans); err != nil || ans.Status != mcpserve.StatusUnknown {
		t.Fatalf("%s: the error's data %s (%v), want an Answer with status unknown", tool, werr.Data, err)
	}
	return ans, werr
}

// TestAViewThatLagsIsNeverAGuess (docs/semantics.md §6
// statuses): the read model has not caught up with the log (it answers
// unknown_run for runs the command API started). A keyed call whose run
// was started, or reopened with the same input, is answered "not known",
// naming the run, never "still working": nobody saw it working. The same
// key with another input is "not known" too, naming no run: whether the
// key's run is this input's cannot be read, and that run may belong to
// another input. Before, all three answered working, the second with the
// other input's run.
func TestAViewThatLagsIsNeverAGuess(t *testing.T) {
	st := mcptest.StartWithoutProjector(t, echoAgent(t))
	fakeQuery(t, st.Server.Conn, false)
	// The start gets half the wait: enough to be answered on a loaded
	// machine, so that the answer is the query's, the one under test (with
	// 300 ms, a start slowed past 150 ms answered internal in CI instead).
	srv, err := mcpserve.New(st.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	session := connect(t, srv.MCP())
	run := mcpserve.RunID("weft", "local", "k")

	ans, werr := unknown(t, session, "notes", map[string]any{"input": "hello", "key": "k"})
	if ans.Run != run || ans.Error == nil || ans.Error.Code != weft.CodeUnknownRun {
		t.Fatalf("a started run the read model has not seen: %+v", ans)
	}
	mustContain(t, "message", werr.Message, "Not known (run "+run+")", "repeat this call with the same key")

	ans, werr = unknown(t, session, "notes", map[string]any{"input": "another", "key": "k"})
	if ans.Run != "" {
		t.Fatalf("the same key with another input names run %s: it may be another input's", ans.Run)
	}
	mustContain(t, "message", werr.Message, "repeat this call with the same key")

	if ans, _ = unknown(t, session, "notes", map[string]any{"input": "hello", "key": "k"}); ans.Run != run {
		t.Fatalf("the same key and input again: %+v", ans)
	}
}

// TestTheWaitBoundsEveryQuery: a query service that takes requests and never
// answers holds a call no longer than its wait; the answer is "not known",
// naming the run. Before, the call hung until the client gave up.
func TestTheWaitBoundsEveryQuery(t *testing.T) {
	st := mcptest.StartWithoutProjector(t, echoAgent(t))
	fakeQuery(t, st.Server.Conn, true)
	// The start gets half the wait: enough to be answered on a loaded
	// machine, so that the answer is the query's, the one under test (with
	// 300 ms, a start slowed past 150 ms answered internal in CI instead).
	srv, err := mcpserve.New(st.Server.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	session := connect(t, srv.MCP())
	ans, _ := unknown(t, session, "notes", map[string]any{"input": "hello", "key": "k"})
	if ans.Run != mcpserve.RunID("weft", "local", "k") || ans.Error == nil || ans.Error.Code != weft.CodeUnavailable {
		t.Fatalf("a query service that does not answer: %+v", ans)
	}
}

// TestAStartWithoutAKnownOutcomeIsNeverAFailure (docs/semantics.md §3 across
// the MCP
// boundary): the command API answers a start unavailable (a runner whose
// append's outcome is not known), outcome_unknown (a forward not answered
// in time), or with a reply nobody can read: the run may have started. The answer is "not known", naming the run — a JSON-RPC
// error, never an isError result, since a client reads isError as a
// definite failure (mcptools makes it Explain, and the calling model may
// start the work again under another key). Through mcptools, the calling
// action is uncertain. Before, both were isError results: Explain.
func TestAStartWithoutAKnownOutcomeIsNeverAFailure(t *testing.T) {
	s := natstest.Start(t)
	for _, c := range []struct {
		name  string
		reply func(m *nats.Msg)
		code  weft.Code
	}{
		{"unavailable", func(m *nats.Msg) {
			body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: &weft.Error{Code: weft.CodeUnavailable, Message: "the append's outcome is not known"}})
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set("Nats-Service-Error", string(weft.CodeUnavailable))
			reply.Header.Set("Nats-Service-Error-Code", "503")
			reply.Data = body
			_ = m.RespondMsg(reply)
		}, weft.CodeUnavailable},
		{"an unreadable reply", func(m *nats.Msg) { _ = m.Respond([]byte("started?")) }, weft.CodeInternal},
		{"outcome_unknown", func(m *nats.Msg) {
			body, _ := json.Marshal(api.ErrorReply{Schema: api.Schema, Error: &weft.Error{Code: weft.CodeOutcomeUnknown, Message: "the driver did not answer in time"}})
			reply := nats.NewMsg(m.Reply)
			reply.Header.Set("Nats-Service-Error", string(weft.CodeOutcomeUnknown))
			reply.Header.Set("Nats-Service-Error-Code", "504")
			reply.Data = body
			_ = m.RespondMsg(reply)
		}, weft.CodeOutcomeUnknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub, err := s.Conn.Subscribe(api.SubjectPrefix+api.EndpointStart, c.reply)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := s.Conn.Flush(); err != nil {
				t.Fatal(err)
			}
			srv, err := mcpserve.New(s.Conn, mcpserve.Config{Agents: []mcpserve.Agent{{Name: "notes"}}, Wait: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			session := connect(t, srv.MCP())
			ans, werr := unknown(t, session, "notes", map[string]any{"input": "pay", "key": "k"})
			if ans.Run != mcpserve.RunID("weft", "local", "k") || ans.Error == nil || ans.Error.Code != c.code {
				t.Fatalf("keyed: %+v", ans)
			}
			mustContain(t, "message", werr.Message, "repeat this call with the same key")
			ans, werr = unknown(t, session, "notes", map[string]any{"input": "pay"})
			if !strings.HasPrefix(ans.Run, "mcp-") {
				t.Fatalf("unkeyed: %+v, want the run id it was started under", ans)
			}
			if strings.Contains(werr.Message, "same key") {
				t.Fatalf("an unkeyed call is told to repeat itself with its key (a repeat would be a new run): %s", werr.Message)
			}

			client := mcptools.New(mcptools.Transport("weft mcp in memory", func() (mcp.Transport, error) {
				st, ct := mcp.NewInMemoryTransports()
				if _, err := srv.MCP().Connect(context.Background(), st, nil); err != nil {
					return nil, err
				}
				return ct, nil
			}))
			defer client.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			list, err := client.Tools(ctx, mcptools.Only("notes"))
			if err != nil {
				t.Fatal(err)
			}
			r := list[0].Invoke(ctx, tools.Call{Run: "caller", Action: "1/c", Attempt: 1}, json.RawMessage(`{"input":"pay"}`), tools.Settlement{})
			if r.Outcome != events.OutcomeUncertain {
				t.Fatalf("through mcptools: %s %q %q, want uncertain", r.Outcome, r.Message, r.Evidence)
			}
		})
	}
}
