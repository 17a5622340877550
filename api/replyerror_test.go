package api_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/api"
	"github.com/weftrun/weft/internal/natstest"
)

// reply is a reply message with body data and, when st is set, the micro
// error headers Nats-Service-Error (code) and Nats-Service-Error-Code (st).
func reply(data, code, st string) *nats.Msg {
	m := &nats.Msg{Header: nats.Header{}, Data: []byte(data)}
	if st != "" {
		m.Header.Set("Nats-Service-Error", code)
		m.Header.Set("Nats-Service-Error-Code", st)
	}
	return m
}

// TestReplyErrorReadsTheOneEnvelope (docs/protocol.md, "Error codes"): an
// error reply's body {"schema":1,"error":{…}} is its weft.Error; a reply
// whose Nats-Service-Error headers mark an error with a protocol code and
// whose body is empty or carries no error is the header's code; a success
// reply is no error.
func TestReplyErrorReadsTheOneEnvelope(t *testing.T) {
	body := reply(`{"schema":1,"error":{"code":"already_started","message":"run pay-7 exists","same_input":true}}`, "already_started", "409")
	if e := api.ReplyError(body); e == nil || e.Code != weft.CodeAlreadyStarted || e.SameInput == nil || !*e.SameInput || e.Message != "run pay-7 exists" {
		t.Errorf("ReplyError(body) = %#v, want already_started with same_input and its message", e)
	}
	for _, data := range []string{``, `{}`, `{"schema":1}`, `{"schema":1,"error":null}`} {
		if e := api.ReplyError(reply(data, "unavailable", "503")); e == nil || e.Code != weft.CodeUnavailable {
			t.Errorf("ReplyError(header unavailable, body %q) = %#v, want unavailable", data, e)
		}
	}
	for _, data := range []string{`{"schema":1,"run":"pay-7","status":"running"}`, `{"schema":1,"error":null}`, `null`} {
		if e := api.ReplyError(reply(data, "", "")); e != nil {
			t.Errorf("ReplyError(%s) = %#v, want nil", data, e)
		}
	}
}

// unreadableReplies are replies that are not the error envelope: a body of
// another shape, an error without a code, an error header without a
// protocol code, an empty body without one.
var unreadableReplies = []struct{ data, code, st string }{
	{data: `{"error":"x"}`},
	{data: `{"schema":1,"error":"refused","run":"r"}`},
	{data: `{"error":{"code":503,"err_code":10077,"description":"stream is offline"}}`}, // a JetStream API error
	{data: `[1]`},
	{data: `{"schema":"1"}`},
	{data: `not json`},
	{data: `{"schema":1,"error":{"message":"no code"}}`},
	{data: `oops`, code: "some text", st: "500"},
	{data: `{"schema":1}`, code: "some text", st: "500"},
	{data: `not json`, code: "unavailable", st: "503"},
	{data: ``, code: "", st: "500"},
	{data: ``},
}

// TestReplyErrorReadsAnUnreadableReplyInternal (docs/protocol.md, "Error
// codes"; docs/protocol/41-tasks.md "Report until a runner answers"): a
// reply that is not the error envelope is no answer, so ReplyError reads
// it internal, never nil (a success). Before, every body that was not an
// error envelope was nil, and a header code that is not a protocol code
// was returned as that code.
func TestReplyErrorReadsAnUnreadableReplyInternal(t *testing.T) {
	for _, r := range unreadableReplies {
		if e := api.ReplyError(reply(r.data, r.code, r.st)); e == nil || e.Code != weft.CodeInternal || !strings.Contains(e.Message, "unreadable reply") {
			t.Errorf("ReplyError(%q, header %q %q) = %#v, want internal, unreadable reply", r.data, r.code, r.st, e)
		}
	}
}

// TestClientStartAnsweredUnreadablyIsAnError (docs/protocol.md, "Error
// codes"): api.Client's Start answered with a reply that is not the error
// envelope returns an error, not a started run. Before, a body such as
// {"schema":1,"error":"refused","run":"r"} was a StartReply for run r.
func TestClientStartAnsweredUnreadablyIsAnError(t *testing.T) {
	srv := natstest.Start(t)
	var next atomic.Pointer[nats.Msg]
	sub, err := srv.Conn.Subscribe(api.SubjectPrefix+api.EndpointStart, func(m *nats.Msg) {
		r := *next.Load()
		r.Subject = m.Reply
		_ = m.RespondMsg(&r)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := srv.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	c := api.NewClient(srv.Connect())
	for _, r := range unreadableReplies {
		next.Store(reply(r.data, r.code, r.st))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := c.Start(ctx, api.StartRequest{Run: "r", Agent: "notes", Input: "hello"})
		cancel()
		var we *weft.Error
		if !errors.As(err, &we) || we.Code != weft.CodeInternal {
			t.Errorf("Start answered %q (header %q %q) = %+v, %v; want internal", r.data, r.code, r.st, got, err)
		}
	}
}
