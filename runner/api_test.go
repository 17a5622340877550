package runner_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/agent"
	"github.com/weftrun/weft/aggregate"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/model"
	"github.com/weftrun/weft/policy"
	"github.com/weftrun/weft/tools"
)

// Bad input gets a clear coded error with the service error headers, and
// loses nothing; the service is discoverable as "weft" with its endpoints.
func TestAPIBadInput(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.Answer("ok"))
	h := newHarness(t)
	h.startRunner([]*agent.Agent{build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(allow))})
	nc := h.srv.Conn
	cases := []struct {
		subject, body string
		code          weft.Code
		status        string
	}{
		{"weft.api.start", `{not json`, weft.CodeInvalidJSON, "400"},
		{"weft.api.start", `{"schema":2,"agent":"desk","input":"x"}`, weft.CodeInvalidRequest, "400"},
		{"weft.api.start", `{"schema":1,"agent":"desk","input":"x","extra":1}`, weft.CodeInvalidRequest, "400"},
		{"weft.api.start", `{"schema":1,"agent":"nobody","input":"x"}`, weft.CodeUnknownAgent, "404"},
		{"weft.api.start", `{"schema":1,"run":"bad.id","agent":"desk","input":"x"}`, weft.CodeInvalidName, "400"},
		// Agent names and versions are grammar-checked (1-64 of
		// [A-Za-z0-9_-], versions also '.'): invalid_name, not unknown_agent.
		{"weft.api.start", `{"schema":1,"agent":"pay.desk","input":"x"}`, weft.CodeInvalidName, "400"},
		{"weft.api.start", `{"schema":1,"agent":"desk","version":"1 0","input":"x"}`, weft.CodeInvalidName, "400"},
		{"weft.api.start", `{"schema":1,"agent":"desk","version":"9.9","input":"x"}`, weft.CodeUnknownAgent, "404"},
		{"weft.api.start", `{"schema":1,"agent":"desk","input":"` + strings.Repeat("x", api.MaxBody) + `"}`, weft.CodePayloadTooLarge, "413"},
		{"weft.api.approve", `{"schema":1,"command_id":"1","run":"missing","action":"1/a","revision":1,"approver":"desk","credential":"x"}`, weft.CodeUnknownRun, "404"},
		{"weft.api.cancel", `{"schema":1,"command_id":"1"}`, weft.CodeInvalidName, "400"},
		{"weft.api.reconcile", `{"schema":1,"command_id":"1","run":"missing","action":"1/a"}`, weft.CodeInvalidContent, "400"},
	}
	for _, c := range cases {
		msg, err := nc.Request(c.subject, []byte(c.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", c.subject, err)
		}
		var er api.ErrorReply
		if err := json.Unmarshal(msg.Data, &er); err != nil || er.Error == nil {
			t.Errorf("%s %.40s: not an error reply: %s", c.subject, c.body, msg.Data)
			continue
		}
		if er.Error.Code != c.code || msg.Header.Get("Nats-Service-Error-Code") != c.status || msg.Header.Get("Nats-Service-Error") != string(c.code) {
			t.Errorf("%s %.40s: got %s (%s), want %s (%s)", c.subject, c.body, er.Error.Code, msg.Header.Get("Nats-Service-Error-Code"), c.code, c.status)
		}
	}
	// Error replies go through the micro error path: $SRV.STATS.weft counts
	// them (nats micro stats weft).
	msg, err := nc.Request("$SRV.STATS.weft", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(msg.Data, &stats); err != nil {
		t.Fatal(err)
	}
	errs := map[string]int{}
	for _, c := range cases {
		errs[c.subject]++
	}
	// Each endpoint is served by its lanes (api.WithLanes): the errors of
	// a subject are the sum over its lanes.
	counted := map[string]int{}
	for _, e := range stats.Endpoints {
		counted[e.Subject] += e.NumErrors
	}
	for subject, n := range counted {
		if n != errs[subject] {
			t.Errorf("stats of %s: %d errors, want %d", subject, n, errs[subject])
		}
	}
	// Discoverable: $SRV.INFO.weft lists every endpoint.
	msg, err = nc.Request("$SRV.INFO.weft", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range info.Endpoints {
		got[e.Subject] = true
	}
	for _, e := range []string{"start", "approve", "reject", "reconcile", "reconcile_stored", "settle", "cancel", "report"} {
		if !got["weft.api."+e] {
			t.Errorf("endpoint weft.api.%s missing from %v", e, got)
		}
	}
}

// The same command id sent eight times at once is applied once and every
// sender gets the first reply.
func TestAPISameCommandIDConcurrently(t *testing.T) {
	t.Parallel()
	b := &bodies{}
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{b.tool()}, policy.Func(approvalAbove)), "cid", "x")
	s := h.waitStatus("cid", aggregate.StatusSuspended)
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "same", Run: "cid", Action: act.ID, Revision: act.Request.Revision, Approver: "desk", Credential: "a"})
			errs <- err
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("a sender of the same command id got %v", err)
		}
	}
	finished(t, h, "cid")
	if b.starts.Load() != 1 {
		t.Fatalf("starts %d", b.starts.Load())
	}
}

// docs/semantics.md §4 (answering an approval request): approve and reject
// without
// an approver on an agent with approvers are refused alike —
// invalid_request naming the field — and record nothing.
func TestAnswerWithoutApprover(t *testing.T) {
	t.Parallel()
	m := model.NewScripted("s", model.CallTools(payCall(500, "ok")), model.Answer("ok"))
	h := one(t, build(t, m, []tools.Tool{(&bodies{}).tool()}, policy.Func(approvalAbove)), "noappr", "x")
	s := h.waitStatus("noappr", aggregate.StatusSuspended)
	v := s.Version()
	act, _ := s.Action(aggregate.Status(s).Approvals[0])
	_, aerr := h.client.Approve(ctx(t), api.ApproveRequest{CommandID: "a", Run: "noappr", Action: act.ID, Revision: act.Request.Revision, Credential: "x"})
	_, rerr := h.client.Reject(ctx(t), api.RejectRequest{CommandID: "r", Run: "noappr", Action: act.ID, Revision: act.Request.Revision, Credential: "x"})
	for name, err := range map[string]error{"approve": aerr, "reject": rerr} {
		var we *weft.Error
		if !errors.As(err, &we) || we.Code != weft.CodeInvalidRequest || !strings.Contains(we.Message, "approver") {
			t.Errorf("%s without approver: %v, want invalid_request naming approver", name, err)
		}
	}
	if got := h.state("noappr").Version(); got != v {
		t.Fatalf("a refused answer wrote events (version %d → %d)", v, got)
	}
}
