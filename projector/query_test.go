package projector_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	weft "github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/events"
	"github.com/weftrun/weft/projections"
	"github.com/weftrun/weft/projector"
	"github.com/weftrun/weft/protocol"
)

func request[T any](t testing.TB, nc *nats.Conn, endpoint string, body string) (T, *nats.Msg) {
	t.Helper()
	var out T
	m, err := nc.Request(projector.QueryPrefix+"."+endpoint, []byte(body), 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", endpoint, err)
	}
	if m.Header.Get("Nats-Service-Error-Code") == "" {
		if err := json.Unmarshal(m.Data, &out); err != nil {
			t.Fatalf("%s: %v: %s", endpoint, err, m.Data)
		}
	}
	return out, m
}

func wantError(t *testing.T, nc *nats.Conn, endpoint, body, code string) {
	t.Helper()
	_, m := request[struct{}](t, nc, endpoint, body)
	if got := m.Header.Get("Nats-Service-Error"); got != code {
		t.Fatalf("%s %s: error code %q, want %q (%s)", endpoint, body, got, code, m.Data)
	}
	if got, want := m.Header.Get("Nats-Service-Error-Code"), fmt.Sprint(api.Status(weft.Code(code))); got != want {
		t.Fatalf("%s %s: status %q, want %q", endpoint, body, got, want)
	}
	var e api.ErrorReply
	if err := json.Unmarshal(m.Data, &e); err != nil || e.Error == nil || string(e.Error.Code) != code {
		t.Fatalf("%s %s: body %s", endpoint, body, m.Data)
	}
}

// TestQueryService exercises every query endpoint over NATS, as any client
// would, and their documented errors.
func TestQueryService(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	p, err := projector.New(ctx, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	runProjector(t, p)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log, projector.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })

	t0 := now.Add(-time.Hour)
	req := events.Requirement{Name: "finance", Version: 1}
	appendLog(t, s.Log, []events.Recorded{
		{Run: "pay-1", Version: 1, At: t0, Event: events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Runner: "r"}},
		{Run: "pay-2", Version: 1, At: t0.Add(time.Second), Event: events.RunStarted{Agent: events.AgentRef{Name: "triage", Version: "1"}, Input: "x", Runner: "r"}},
		{Run: "pay-1", Version: 2, At: t0.Add(2 * time.Second), Event: events.ModelRequested{Turn: 1}},
		{Run: "pay-1", Version: 3, At: t0.Add(3 * time.Second), Event: events.ModelReplied{Turn: 1, Kind: events.ReplyToolRequest, Calls: []events.ToolCall{
			{ID: "a", Name: "pay", Arguments: json.RawMessage(`{"amount":10}`)}, {ID: "b", Name: "wire", Arguments: json.RawMessage(`{}`)}}}},
		{Run: "pay-1", Version: 4, At: t0.Add(4 * time.Second), Event: events.ApprovalRequested{Action: "1/a", Revision: 1, Requirement: req, Why: "policy"}},
		{Run: "pay-1", Version: 5, At: t0.Add(5 * time.Second), Event: events.AttemptFenced{Action: "1/b", Tool: "wire", Attempt: 1}},
		{Run: "pay-1", Version: 6, At: t0.Add(6 * time.Second), Event: events.AttemptReported{Action: "1/b", Attempt: 1, Outcome: events.OutcomeUncertain, Evidence: "bank timed out"}},
	})
	waitSeq(t, p, lastSeq(t, s.JS))
	// The service mirrors the buckets through watches: wait for them.
	deadline := time.Now().Add(10 * time.Second)
	for {
		l, _ := request[projections.ListPage](t, s.Conn, "list", `{}`)
		a, _ := request[projector.ApprovalsReply](t, s.Conn, "approvals", ``)
		if len(l.Runs) == 2 && l.Runs[0].Version == 6 && len(a.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("list never caught up: %+v", l)
		}
		time.Sleep(10 * time.Millisecond)
	}

	run, _ := request[projector.RunReply](t, s.Conn, "run", `{"schema":1,"run":"pay-1"}`)
	if run.View.Status != projections.StatusSuspended || len(run.View.Approvals) != 1 || len(run.View.Uncertain) != 1 {
		t.Fatalf("run view %+v", run.View)
	}
	list, _ := request[projections.ListPage](t, s.Conn, "list", `{"limit":1}`)
	if len(list.Runs) != 1 || list.Runs[0].Run != "pay-1" || list.Next == "" {
		t.Fatalf("page 1 %+v", list)
	}
	list2, _ := request[projections.ListPage](t, s.Conn, "list", `{"limit":1,"cursor":"`+list.Next+`"}`)
	if len(list2.Runs) != 1 || list2.Runs[0].Run != "pay-2" || list2.Next != "" {
		t.Fatalf("page 2 %+v", list2)
	}
	byAgent, _ := request[projections.ListPage](t, s.Conn, "list", `{"agent":"triage","status":"working"}`)
	if len(byAgent.Runs) != 1 || byAgent.Runs[0].Run != "pay-2" {
		t.Fatalf("by agent %+v", byAgent)
	}
	appr, _ := request[projector.ApprovalsReply](t, s.Conn, "approvals", `{"run":"pay-1"}`)
	if len(appr.Items) != 1 || appr.Items[0].Action != "1/a" || appr.Items[0].Tool != "pay" || string(appr.Items[0].Arguments) != `{"amount":10}` || appr.Items[0].Requirement != req {
		t.Fatalf("approvals %+v", appr)
	}
	unc, _ := request[projector.UncertainReply](t, s.Conn, "uncertain", `{}`)
	if len(unc.Items) != 1 || unc.Items[0].Evidence != "bank timed out" || unc.Items[0].AgeMillis != (time.Hour-6*time.Second).Milliseconds() {
		t.Fatalf("uncertain %+v", unc)
	}
	hist, _ := request[projector.HistoryReply](t, s.Conn, "history", `{"run":"pay-1","after":2,"limit":3}`)
	if len(hist.Events) != 3 || hist.Events[0].Version != 3 || hist.Next != 5 || hist.Head.Version != 6 {
		t.Fatalf("history %+v", hist)
	}

	wantError(t, s.Conn, "run", `{"run":"nope"}`, "unknown_run")
	wantError(t, s.Conn, "run", `{"run":"a b"}`, "invalid_name")
	wantError(t, s.Conn, "run", `{"run":`, "invalid_json")
	wantError(t, s.Conn, "run", `{"schema":2,"run":"pay-1"}`, "invalid_request")
	wantError(t, s.Conn, "list", `{"status":"sleeping"}`, "bad_filter")
	wantError(t, s.Conn, "list", `{"updated_since":"yesterday"}`, "bad_filter")
	wantError(t, s.Conn, "list", `{"cursor":"garbage!"}`, "bad_cursor")
	wantError(t, s.Conn, "approvals", `{"agent":"a b"}`, "bad_filter")
	wantError(t, s.Conn, "history", `{"run":"nope"}`, "unknown_run")
	wantError(t, s.Conn, "history", `{"run":"pay-1","after":99}`, "bad_cursor")
}

// A run's view never goes back: the run query answers at the log's head
// whether the projector has stored nothing yet, stored the head, or stored
// an older view (it folds the log's newer events onto it), and says which
// version it stored. Before, a run answered "finished" from the log while
// no view was stored, then "working" once the lagging projector stored an
// older view (the console's audit panel saw this in CI).
func TestQueryRunNeverAnswersAnOlderViewThanTheLog(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	svc, err := projector.Serve(ctx, s.Conn, s.JS, s.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Stop() })
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	recs := []events.Recorded{
		{Run: "pay-1", Version: 1, At: t0, Event: events.RunStarted{Agent: events.AgentRef{Name: "desk", Version: "1"}, Input: "pay", Runner: "r"}},
		{Run: "pay-1", Version: 2, At: t0.Add(time.Second), Event: events.ModelRequested{Turn: 1}},
		{Run: "pay-1", Version: 3, At: t0.Add(2 * time.Second), Event: events.ModelReplied{Turn: 1, Kind: events.ReplyFinalAnswer, Text: "done"}},
		{Run: "pay-1", Version: 4, At: t0.Add(3 * time.Second), Event: events.RunFinished{Outcome: events.Outcome{Kind: events.OutcomeCompleted}}},
	}
	appendLog(t, s.Log, recs)
	var whole, older projections.RunView
	for i, r := range recs {
		whole = projections.Apply(whole, r)
		if i == 1 {
			older = whole
		}
	}
	ask := func(stage string, wantProjected uint64) {
		t.Helper()
		got, m := request[projector.RunReply](t, s.Conn, "run", `{"run":"pay-1"}`)
		if code := m.Header.Get("Nats-Service-Error"); code != "" {
			t.Fatalf("%s: %s %s", stage, code, m.Data)
		}
		want, _ := whole.Encode()
		have, _ := got.View.Encode()
		if string(have) != string(want) || got.Projected != wantProjected {
			t.Fatalf("%s: view version %d status %s projected %d, want the log's head (version %d, %s) and projected %d",
				stage, got.View.Version, got.View.Status, got.Projected, whole.Version, whole.Status, wantProjected)
		}
	}
	ask("no view stored", 0)
	kv, err := s.JS.KeyValue(ctx, protocol.ViewsBucket)
	if err != nil {
		t.Fatal(err)
	}
	b, err := older.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "pay-1", b); err != nil {
		t.Fatal(err)
	}
	ask("an older view stored", 2)
	b, _ = whole.Encode()
	if _, err := kv.Put(ctx, "pay-1", b); err != nil {
		t.Fatal(err)
	}
	ask("the head stored", 4)
}
