package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/catalog"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/eventlog"
	"github.com/weftrun/weft/host"
	"github.com/weftrun/weft/internal/demo"
	"github.com/weftrun/weft/internal/natstest"
	"github.com/weftrun/weft/projector"
)

// endpoint is one request/reply endpoint and a well-formed body for it,
// addressed at a real run and action, that the malformed cases spoil one
// field at a time.
type endpoint struct {
	subject string
	body    map[string]any
	// run: the endpoint names a run (empty run id: invalid_name).
	run bool
	// strict: unknown fields are refused (commands; queries ignore them).
	strict bool
	// limits: the string fields with a size limit, and the limit.
	limits map[string]int
	// maxBody is the endpoint's body limit.
	maxBody int
	// answer: the endpoint answers an approval request by its revision.
	answer bool
	// extra are the endpoint's own malformed cases.
	extra []badCase
}

type badCase struct {
	name string
	body []byte
	code weft.Code
}

// malformed returns every malformed case of e, each with the code
// docs/protocol.md's error table documents for it.
func (e endpoint) malformed() []badCase {
	// Each case has a command id of its own: a refusal is kept for its
	// command id (docs/protocol/40-commands.md, Idempotency), so a shared
	// one would answer every case with the first case's reply.
	n := 0
	with := func(k string, v any) []byte {
		m := map[string]any{}
		for k, v := range e.body {
			m[k] = v
		}
		if _, ok := m["command_id"]; ok {
			n++
			m["command_id"] = fmt.Sprintf("bad-%d", n)
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	cs := []badCase{
		{"not JSON", []byte(`{"schema":1,`), weft.CodeInvalidJSON},
		{"not an object", []byte(`[1,2]`), weft.CodeInvalidRequest},
		{"schema 2", with("schema", 2), weft.CodeInvalidRequest},
		{"body over its limit", append(append([]byte(`{"schema":1,"pad":"`), strings.Repeat("x", e.maxBody)...), `"}`...), weft.CodePayloadTooLarge},
	}
	if e.run {
		cs = append(cs,
			badCase{"run empty", with("run", ""), weft.CodeInvalidName},
			badCase{"run missing", with("run", nil), weft.CodeInvalidName},
			badCase{"run breaks the grammar", with("run", "pay.7"), weft.CodeInvalidName},
			badCase{"run of 129 characters", with("run", strings.Repeat("r", 129)), weft.CodeInvalidName},
			badCase{"run of the wrong type", with("run", 7), weft.CodeInvalidRequest},
		)
	}
	if e.answer {
		// docs/adr/0016-input-limits.md (docs/semantics.md §4: an answer names
		// the request's
		// revision): no revision is an incomplete request, not a stale
		// reference.
		cs = append(cs,
			badCase{"revision missing", with("revision", nil), weft.CodeInvalidRequest},
			badCase{"revision 0", with("revision", 0), weft.CodeInvalidRequest},
			badCase{"revision negative", with("revision", -1), weft.CodeInvalidRequest},
		)
	}
	if e.strict {
		cs = append(cs, badCase{"unknown field", with("extra", 1), weft.CodeInvalidRequest})
	}
	cs = append(cs, e.extra...)
	names := make([]string, 0, len(e.limits))
	for k := range e.limits {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		cs = append(cs, badCase{k + " one byte over its limit", with(k, strings.Repeat("x", e.limits[k]+1)), weft.CodePayloadTooLarge})
	}
	return cs
}

// TestBadInputEveryEndpoint is docs/adr/0016-input-limits.md's table
// (docs/protocol.md,
// "Error codes": every input refusal says "nothing written"): every
// malformed case of every endpoint of the weft, weft-query and catalog
// services, sent to a real runner and projector (host.Run on a real
// nats-server), is answered with the documented code and headers, and the
// log is unchanged afterwards.
func TestBadInputEveryEndpoint(t *testing.T) {
	s := natstest.Start(t)
	desk, err := demo.Agent(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- host.Run(ctx, s.Conn, s.JS, []*agent.Agent{desk}, host.WithReady(func() { close(ready) }))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("host.Run: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("host.Run: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("host never ready")
	}
	c, err := client.New(s.Conn)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer wcancel()
	// A real run with a real pending approval: the well-formed bodies
	// address it, so a case that slipped through validation would be
	// applied and change the log.
	if _, err := c.Start(wctx, api.StartRequest{Run: "pay-7", Agent: demo.AgentName, Input: "pay invoice INV-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(wctx, "pay-7", client.Suspended); err != nil {
		t.Fatal(err)
	}
	const action = "2/call_2_1"
	ids := map[string]int{"command_id": api.MaxID}
	run := func(extra map[string]int) map[string]int {
		m := map[string]int{}
		for k, v := range ids {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	queue := "payment-desk.1.send_payment"
	commands := []endpoint{
		{subject: "weft.api.start", body: map[string]any{"schema": 1, "command_id": "c", "run": "new-1", "agent": demo.AgentName, "input": "pay invoice INV-9"},
			limits: run(map[string]int{"input": api.MaxInput, "correlation": api.MaxID})},
		{subject: "weft.api.approve", run: true, answer: true, body: map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "revision": 1, "approver": demo.Approver, "credential": "alice"},
			limits: run(map[string]int{"action": api.MaxID, "approver": api.MaxID, "credential": api.MaxCredential})},
		{subject: "weft.api.reject", run: true, answer: true, body: map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "revision": 1, "reason": "no", "approver": demo.Approver, "credential": "alice"},
			limits: run(map[string]int{"action": api.MaxID, "approver": api.MaxID, "credential": api.MaxCredential, "reason": api.MaxReason, "by": api.MaxID})},
		{subject: "weft.api.reconcile", run: true, body: map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "content": map[string]any{"unconfirmed": "x"}, "by": "alice"},
			limits: run(map[string]int{"action": api.MaxID, "by": api.MaxID})},
		{subject: "weft.api.reconcile_stored", run: true, body: map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "content": map[string]any{"unconfirmed": "x"}, "by": "alice"},
			limits: run(map[string]int{"action": api.MaxID, "by": api.MaxID})},
		{subject: "weft.api.resolve", run: true, body: map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "content": map[string]any{"error": "x"}, "by": "alice"},
			limits: run(map[string]int{"action": api.MaxID, "by": api.MaxID})},
		{subject: "weft.api.cancel", run: true, body: map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "reason": "r", "by": "alice"},
			limits: run(map[string]int{"reason": api.MaxReason, "by": api.MaxID})},
	}
	report := map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "attempt": 1, "incarnation": 1, "outcome": "explain", "message": "m", "worker": "w"}
	reportLimits := run(map[string]int{"action": api.MaxID, "message": api.MaxText, "evidence": api.MaxText, "cause": api.MaxID, "worker": api.MaxID})
	settle := map[string]any{"schema": 1, "command_id": "c", "run": "pay-7", "action": action, "outcome": "explain", "message": "m", "summary": "s"}
	settleLimits := run(map[string]int{"action": api.MaxID, "message": api.MaxText, "evidence": api.MaxText, "summary": api.MaxReason})
	commands = append(commands,
		endpoint{subject: "weft.api.report", run: true, body: report, limits: reportLimits},
		endpoint{subject: "weft.api.report." + queue, run: true, body: report, limits: reportLimits},
		endpoint{subject: "weft.api.settle", run: true, body: settle, limits: settleLimits},
		endpoint{subject: "weft.api.settle." + queue, run: true, body: settle, limits: settleLimits},
	)
	var all []endpoint
	for _, e := range commands {
		e.strict, e.maxBody = true, api.MaxBody
		all = append(all, e)
	}
	for _, q := range []struct {
		name string
		run  bool
		body map[string]any
	}{
		{projector.EndpointRun, true, map[string]any{"schema": 1, "run": "pay-7"}},
		{projector.EndpointHistory, true, map[string]any{"schema": 1, "run": "pay-7"}},
		{projector.EndpointList, false, map[string]any{"schema": 1}},
		{projector.EndpointApprovals, false, map[string]any{"schema": 1}},
		{projector.EndpointUncertain, false, map[string]any{"schema": 1}},
		{projector.EndpointQuestions, false, map[string]any{"schema": 1}},
	} {
		all = append(all, endpoint{subject: projector.QueryPrefix + "." + q.name, run: q.run, body: q.body, maxBody: projector.MaxQueryBody})
	}
	all = append(all, endpoint{subject: catalog.SubjectPrefix + demo.AgentName, body: map[string]any{"schema": 1, "version": "1"}, maxBody: catalog.MaxBody,
		extra: []badCase{{"version of the wrong type", []byte(`{"schema":1,"version":1}`), weft.CodeInvalidRequest}}})

	head := func() uint64 {
		st, err := s.JS.Stream(wctx, eventlog.Stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(wctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := head()
	n := 0
	for _, e := range all {
		for _, bc := range e.malformed() {
			n++
			what := fmt.Sprintf("%s, %s", e.subject, bc.name)
			msg, err := s.Conn.Request(e.subject, bc.body, 10*time.Second)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			var er api.ErrorReply
			if err := json.Unmarshal(msg.Data, &er); err != nil || er.Error == nil {
				t.Errorf("%s: not an error reply: %.200s", what, msg.Data)
				continue
			}
			if er.Error.Code != bc.code || msg.Header.Get("Nats-Service-Error") != string(bc.code) || msg.Header.Get("Nats-Service-Error-Code") != fmt.Sprint(api.Status(bc.code)) {
				t.Errorf("%s: got %s (%s %s: %s), want %s", what, er.Error.Code, msg.Header.Get("Nats-Service-Error"), msg.Header.Get("Nats-Service-Error-Code"), er.Error.Message, bc.code)
			}
		}
	}
	if after := head(); after != before {
		t.Errorf("the log moved from sequence %d to %d under %d malformed requests; want it unchanged", before, after, n)
	}
	t.Logf("%d malformed requests to %d endpoints", n, len(all))
}
